"""The TCP listener: accept loop, magic check, one thread per connection (nsqd/tcp.go and
internal/protocol/tcp_server.go, socketserver style), and the two threads all connections share: the OutputLoop
(their timed output) and the departures thread, which ends the connections whose I/O loop returned."""
from __future__ import annotations

import errno
import logging
import queue
import socket
import threading
import time
from collections.abc import Callable

from . import wire
from .client_v2 import ClientV2, OutputLoop
from .protocol_v2 import ProtocolV2

log = logging.getLogger("nsqd")

# What Go's Accept reports as Temporary() (syscall.Errno.Temporary): nsqd logs it and accepts again, so a broker
# out of file descriptors serves the connections waiting in the listen backlog as soon as some are free.
TEMPORARY_ACCEPT_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.EAGAIN, errno.ETIMEDOUT})
# nsqd retries at once (runtime.Gosched), thousands of times a second; a short sleep costs a waiting client at
# most this much and leaves the CPU to the connections that are being served.
ACCEPT_RETRY_DELAY = 0.005  # seconds


def listen(address: str) -> socket.socket:
    """A listener on `HOST:PORT` (an empty host is every address, as Go's net.Listen takes it)."""
    host, _, port = address.rpartition(":")
    return socket.create_server((host.strip("[]") or "0.0.0.0", int(port)), backlog=1024)


def accept(listener: socket.socket, closing: Callable[[], bool]) -> tuple[socket.socket, tuple]:
    """The next connection (nsqd's and nsqlookupd's internal/protocol TCPServer): temporary failures are retried,
    logged once per run of them; any other failure, or one while `closing()`, is raised."""
    failing = False
    while True:
        try:
            return listener.accept()
        except ConnectionAbortedError:
            continue  # closed while in the backlog: Go's poller retries it without a word
        except OSError as error:
            if closing() or error.errno not in TEMPORARY_ACCEPT_ERRORS:
                raise
            if not failing:
                log.warning("temporary Accept() failure - %s", error)
                failing = True
            time.sleep(ACCEPT_RETRY_DELAY)


def close_listener(listener: socket.socket) -> None:
    """Wake the accept loop, then close: Go's listener.Close() ends a blocked Accept the same way."""
    try:
        listener.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # not listening any more (already shut): close it all the same
    listener.close()


class TCPServer:
    def __init__(self, nsqd, listener: socket.socket, on_fatal_error: Callable[[], None] | None = None):
        """`on_fatal_error`: called when accepting fails for good; nsqd then exits (Main returns the error)."""
        self.nsqd = nsqd
        self.listener = listener
        self._on_fatal_error = on_fatal_error
        self.output_loop = OutputLoop()
        self._closing = False
        self._departed: queue.SimpleQueue[ClientV2] = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._serve, name="tcp-accept", daemon=True),
                         threading.Thread(target=self._see_off_departed, name="tcp-departures", daemon=True)]

    def start(self) -> None:
        self.output_loop.start()
        for thread in self._threads:
            thread.start()

    def close(self) -> None:
        self._closing = True
        close_listener(self.listener)

    def _serve(self) -> None:
        while True:
            try:
                conn, address = accept(self.listener, lambda: self._closing)
            except OSError as error:
                if not self._closing:
                    log.critical("listener.Accept() error - %s", error)
                    if self._on_fatal_error is not None:
                        self._on_fatal_error()
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._handle, args=(conn, address), name=f"conn-{address[1]}",
                             daemon=True).start()

    def _handle(self, conn: socket.socket, address) -> None:
        client = None
        try:
            if self._read_magic(conn) == wire.MAGIC_V2:
                client = ClientV2(self.nsqd, conn, self.nsqd.next_client_id(), self.output_loop)
                self.nsqd.add_client(client)
                client.start_pump()
                ProtocolV2(self.nsqd, client).io_loop()
        except OSError as error:
            log.info("TCP: client(%s:%d) error - %s", address[0], address[1], error)
        finally:
            if client is None:
                conn.close()
            else:
                self._departed.put(client)

    @staticmethod
    def _read_magic(conn: socket.socket) -> bytes | None:
        """C-01, C-02, C-03, C-04, C-05: exactly 4 bytes, no deadline; anything else gets E_BAD_PROTOCOL and a close."""
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

    def _see_off_departed(self) -> None:
        """The end of every V2 connection, one at a time: its output stops, it leaves its channel and the
        client list, and its socket closes (in that order: no write reaches a descriptor number reused since).
        Connection threads only hand their client over and end: when a crowd closed at once and each did this
        itself, they queued on the channel's lock while its holder waited its turn for the GIL (0.3 s after 3,000
        consumers closed, 1,738 threads were still waiting there)."""
        while True:
            client = self._departed.get()
            client.stop()
            if client.channel is not None:
                client.channel.remove_client(client)
            self.nsqd.remove_client(client)
            client.sock.close()
