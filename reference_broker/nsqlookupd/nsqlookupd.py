"""The running nsqlookupd (nsqlookupd/nsqlookupd.go): the registration database and its two listeners."""
from __future__ import annotations

import logging

from ..http_router import HTTPServer
from ..tcp_server import listen
from .http_api import ROUTES
from .lookup_protocol_v1 import LookupProtocolV1
from .options import Options
from .registration_db import RegistrationDB
from .tcp_server import TCPServer


class NSQLookupd:
    def __init__(self, options: Options):
        self.options = options
        self.log = logging.getLogger("nsqlookupd")
        self.db = RegistrationDB()
        tcp_listener = listen(options.tcp_address)
        http_listener = listen(options.http_address)
        protocol = LookupProtocolV1(self.db, options, tcp_listener.getsockname()[1], http_listener.getsockname()[1])
        self.tcp = TCPServer(tcp_listener, protocol)
        self.http = HTTPServer(http_listener, ROUTES, nsqlookupd=self)

    def start(self) -> None:
        self.tcp.start()
        self.log.info("TCP: listening on %s:%d", *self.tcp.listener.getsockname()[:2])
        self.http.start()
        self.log.info("HTTP: listening on %s:%d", *self.http.listener.getsockname()[:2])

    def stop(self) -> None:
        """nsqlookupd's Exit: the TCP listener and its connections, then HTTP. Nothing is kept (no data path)."""
        self.log.info("TCP: closing %s:%d", *self.tcp.listener.getsockname()[:2])
        self.tcp.close()
        self.http.close()
