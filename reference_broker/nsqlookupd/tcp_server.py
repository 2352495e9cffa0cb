"""nsqlookupd's TCP listener (nsqlookupd/tcp.go, internal/protocol/tcp_server.go): accept loop, the magic,
one thread per connection. Connections share nothing but the registration database, whose lock is never held
across a socket read or write, so a slow or stuck client delays only itself."""
from __future__ import annotations

import logging
import socket
import threading

from ..tcp_server import accept, close_listener
from .lookup_protocol_v1 import MAGIC_V1, ClientV1, LookupProtocolV1, send_response

log = logging.getLogger("nsqlookupd")


class TCPServer:
    def __init__(self, listener: socket.socket, protocol: LookupProtocolV1):
        self.listener = listener
        self._protocol = protocol
        self._closing = False
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, name="tcp-accept", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """nsqlookupd's Exit: the listener, then every client connection, without waiting for them (L-TCP-22)."""
        self._closing = True
        close_listener(self.listener)
        with self._connections_lock:
            connections = list(self._connections)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed by its peer; the next one is still shut

    def _serve(self) -> None:
        while True:
            try:
                conn, address = accept(self.listener, lambda: self._closing)
            except OSError as error:
                if not self._closing:
                    log.critical("listener.Accept() error - %s", error)
                return
            threading.Thread(target=self._handle, args=(conn, f"{address[0]}:{address[1]}"),
                             name=f"lookup-conn-{address[1]}", daemon=True).start()

    def _handle(self, conn: socket.socket, address: str) -> None:
        log.info("TCP: new client(%s)", address)
        with self._connections_lock:
            self._connections.add(conn)
        try:
            client = ClientV1(conn, address)
            magic = client.reader.read(4)  # L-TCP-01: no deadline
            if len(magic) < 4:
                log.error("failed to read protocol version - EOF")
                return
            log.info("CLIENT(%s): desired protocol magic '%s'", address, magic.decode("latin-1"))
            if magic != MAGIC_V1:
                send_response(conn, b"E_BAD_PROTOCOL")  # L-TCP-03
                log.error("client(%s) bad protocol magic '%s'", address, magic.decode("latin-1"))
                return
            self._protocol.io_loop(client)
        except OSError as error:
            log.info("client(%s) - %s", address, error)
        finally:
            with self._connections_lock:
                self._connections.discard(conn)
            conn.close()
