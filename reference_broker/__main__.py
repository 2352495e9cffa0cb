"""`nsq-reference-broker` / `python -m reference_broker`: parse nsqd's flags, listen, run until a signal."""
from __future__ import annotations

import logging
import sys

from .http_api import ROUTES
from .http_router import HTTPServer
from .nsqd import NSQD, DataPathLocked, MetadataError
from .options import TLS_REQUIRED, Options, parse_options
from .service import configure_logging, stop_signal
from .tcp_server import TCPServer, listen
from .tls import TLSConfigError

log = logging.getLogger("nsqd")


class Broker:
    """The running broker: NSQD plus its TCP, HTTP and (with TLS) HTTPS listeners."""

    def __init__(self, options: Options):
        self.nsqd = NSQD(options)
        tcp_listener = listen(options.tcp_address)
        self.nsqd.tcp_port = tcp_listener.getsockname()[1]
        self.tcp = TCPServer(self.nsqd, tcp_listener)
        self.http = self.https = None
        tls_context = self.nsqd.tls_context
        if tls_context is not None and options.https_address:  # T-06
            https_listener = listen(options.https_address)
            self.https = HTTPServer(https_listener, ROUTES, nsqd=self.nsqd, tls_context=tls_context)
        if options.http_address:  # an empty --http-address turns HTTP off
            http_listener = listen(options.http_address)
            self.nsqd.http_port = http_listener.getsockname()[1]
            https_port = self.https.listener.getsockname()[1] if self.https else 0
            self.http = HTTPServer(http_listener, ROUTES, nsqd=self.nsqd,  # T-10, T-11
                                   tls_required_https_port=https_port if options.tls_required == TLS_REQUIRED else None)

    def start(self) -> None:
        self.nsqd.start()
        self.tcp.start()
        log.info("TCP: listening on %s:%d", *self.tcp.listener.getsockname()[:2])
        if self.http:
            self.http.start()
            log.info("HTTP: listening on %s:%d", *self.http.listener.getsockname()[:2])
        if self.https:
            self.https.start()
            log.info("HTTPS: listening on %s:%d", *self.https.listener.getsockname()[:2])

    def stop(self) -> None:
        """nsqd's Exit: listeners and client connections first, so nothing changes while topics and
        channels write what they hold to disk."""
        log.info("TCP: closing %s:%d", *self.tcp.listener.getsockname()[:2])
        self.tcp.close()
        for server in (self.http, self.https):
            if server:
                server.close()
        for client in self.nsqd.connected_clients():
            client.close_connection()
        self.nsqd.stop()


def main(argv: list[str] | None = None) -> int:
    options = parse_options(sys.argv[1:] if argv is None else argv)
    configure_logging(options.log_level, options.log_prefix)
    try:
        broker = Broker(options)
    except TLSConfigError as error:
        print(f"nsq-reference-broker: failed to build TLS config - {error}", file=sys.stderr)
        return 1
    except DataPathLocked as error:
        print(f"nsq-reference-broker: {error}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"nsq-reference-broker: listen failed: {error}", file=sys.stderr)
        return 1
    stopping = stop_signal()
    log.info("nsqd v1.3.0 (reference broker) starting, node-id %d", options.node_id)
    try:
        broker.start()
    except MetadataError as error:
        print(f"nsq-reference-broker: failed to load metadata - {error}", file=sys.stderr)
        return 1
    stopping.wait()
    broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
