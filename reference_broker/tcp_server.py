"""The TCP listener: accept loop, magic check, one thread per connection (nsqd/tcp.go, socketserver style)."""
from __future__ import annotations

import logging
import socket
import threading

from . import wire
from .client_v2 import ClientV2
from .protocol_v2 import ProtocolV2

log = logging.getLogger("nsqd")


class TCPServer:
    def __init__(self, nsqd, listener: socket.socket):
        self.nsqd = nsqd
        self.listener = listener
        self._thread = threading.Thread(target=self._serve, name="tcp-accept", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()

    def _serve(self) -> None:
        while True:
            try:
                conn, address = self.listener.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._handle, args=(conn, address), name=f"conn-{address[1]}",
                             daemon=True).start()

    def _handle(self, conn: socket.socket, address) -> None:
        try:
            if self._read_magic(conn) == wire.MAGIC_V2:
                self._serve_v2(conn)
        except OSError as error:
            log.info("TCP: client(%s:%d) error - %s", address[0], address[1], error)
        finally:
            conn.close()

    @staticmethod
    def _read_magic(conn: socket.socket) -> bytes | None:
        """C-01..C-05: exactly 4 bytes, no deadline; anything else gets E_BAD_PROTOCOL and a close."""
        magic = b""
        while len(magic) < 4:
            chunk = conn.recv(4 - len(magic))
            if not chunk:
                return None  # C-03: closed before 4 bytes, close silently
            magic += chunk
        if magic != wire.MAGIC_V2:
            conn.sendall(wire.frame(wire.FRAME_TYPE_ERROR, b"E_BAD_PROTOCOL"))
            return None
        return magic

    def _serve_v2(self, conn: socket.socket) -> None:
        client = ClientV2(self.nsqd, conn, self.nsqd.next_client_id())
        self.nsqd.add_client(client)
        client.start_pump()
        try:
            ProtocolV2(self.nsqd, client).io_loop()
        finally:
            if client.channel is not None:
                client.channel.remove_client(client)
            self.nsqd.remove_client(client)
            client.stop()
