"""One connection from nsqd to one nsqlookupd (nsqd/lookup_peer.go): connected lazily by the first command,
and again by the first command after any failure; every command is a round trip that waits for the reply.

The commands are go-nsq's (`IDENTIFY`, `REGISTER`, `UNREGISTER`, `PING`); nsqlookupd's replies are V1 frames,
a 4-byte big-endian size and the data, with no frame type (L-TCP-02).
"""
from __future__ import annotations

import dataclasses
import logging
import socket
import struct
from collections.abc import Callable

log = logging.getLogger("nsqd")

MAGIC_V1 = b"  V1"
# Go's net.DialTimeout(addr, time.Second), and the deadline lookupPeer sets before every read and write.
TIMEOUT = 1.0  # seconds
_SIZE = struct.Struct(">i")


class LookupPeerError(Exception):
    """A failed round trip, with the text of the Go error nsqd logs for it."""


@dataclasses.dataclass(frozen=True)
class Command:
    """go-nsq's Command: `NAME params...\\n`, then a 4-byte size and the body when there is one."""
    name: str
    params: tuple[str, ...] = ()
    body: bytes | None = None

    def __str__(self) -> str:
        return " ".join((self.name, *self.params))  # go-nsq's Command.String: the body is not shown

    def to_bytes(self) -> bytes:
        line = f"{self}\n".encode("utf-8", "surrogateescape")
        return line if self.body is None else line + _SIZE.pack(len(self.body)) + self.body


def register(topic: str, channel: str = "") -> Command:
    """go-nsq's Register: no channel parameter for the topic alone."""
    return Command("REGISTER", (topic, channel) if channel else (topic,))


def unregister(topic: str, channel: str = "") -> Command:
    return Command("UNREGISTER", (topic, channel) if channel else (topic,))


PING = Command("PING")


class LookupPeer:
    """Not thread-safe: only the lookup loop's thread uses it (and `close` from the same thread)."""

    def __init__(self, address: str, max_body_size: int, connect_callback: Callable[[LookupPeer], None]):
        self.address = address
        self._max_body_size = max_body_size
        self._connect_callback = connect_callback
        self._sock: socket.socket | None = None
        self.connected = False
        # peerInfo: what the lookupd's IDENTIFY reply said; kept across reconnections, as Go's json.Unmarshal
        # into the same struct keeps the fields a later reply leaves out.
        self.info = {"tcp_port": 0, "http_port": 0, "version": "", "broadcast_address": ""}

    def __str__(self) -> str:
        return self.address

    def close(self) -> None:
        self.connected = False
        if self._sock is not None:
            self._sock.close()

    def command(self, command: Command | None) -> bytes | None:
        """The reply to `command`, connecting first if need be (magic, then the connect callback: IDENTIFY and
        the REGISTERs, R-09, R-10); `None` only connects. Raises LookupPeerError; a failure after the connection
        was made closes it, and the next command connects again."""
        if not self.connected:
            self._connect()
            self.connected = True
            try:
                self._write(MAGIC_V1)
            except LookupPeerError:
                self.close()
                raise
            self._connect_callback(self)
            if not self.connected:
                raise LookupPeerError("lookupPeer connectCallback() failed")
        if command is None:
            return None
        try:
            self._write(command.to_bytes())
            return self._read_response()
        except LookupPeerError:
            self.close()
            raise

    def _connect(self) -> None:
        log.info("LOOKUP connecting to %s", self.address)
        host, port = _split_host_port(self.address)
        try:
            self._sock = socket.create_connection((host, port), timeout=TIMEOUT)
        except TimeoutError:
            raise LookupPeerError(f"dial tcp {self.address}: i/o timeout") from None
        except socket.gaierror as error:
            raise LookupPeerError(f"dial tcp: lookup {host}: {error.strerror}") from None
        except OSError as error:
            raise LookupPeerError(f"dial tcp {self.address}: connect: {_reason(error)}") from None

    def _write(self, data: bytes) -> None:
        try:
            self._sock.sendall(data)
        except TimeoutError:
            raise LookupPeerError(f"write tcp {self._endpoints()}: i/o timeout") from None
        except OSError as error:
            raise LookupPeerError(f"write tcp {self._endpoints()}: {_reason(error)}") from None

    def _read_response(self) -> bytes:
        """readResponseBounded: the size, then exactly that much, each read with its own deadline."""
        (size,) = _SIZE.unpack(self._read_exactly(_SIZE.size))
        if size > self._max_body_size:
            raise LookupPeerError(f"response body size ({size}) is greater than limit ({self._max_body_size})")
        if size < 0:
            # Go's make([]byte, size) panics here and takes nsqd down with it; the connection is closed instead.
            raise LookupPeerError(f"response body size ({size}) is negative")
        return self._read_exactly(size)

    def _read_exactly(self, count: int) -> bytes:
        data = bytearray()
        while len(data) < count:
            try:
                chunk = self._sock.recv(count - len(data))
            except TimeoutError:
                raise LookupPeerError(f"read tcp {self._endpoints()}: i/o timeout") from None
            except OSError as error:
                raise LookupPeerError(f"read tcp {self._endpoints()}: {_reason(error)}") from None
            if not chunk:
                raise LookupPeerError("unexpected EOF" if data else "EOF")  # io.ReadFull's two errors
            data += chunk
        return bytes(data)

    def _endpoints(self) -> str:
        try:
            local, remote = self._sock.getsockname(), self._sock.getpeername()
        except OSError:
            return self.address  # a log label for a socket already closed: its configured address will do
        return f"{_join_host_port(*local[:2])}->{_join_host_port(*remote[:2])}"


def _split_host_port(address: str) -> tuple[str, int]:
    """Go's net.SplitHostPort, then the port as a number."""
    if not address:
        raise LookupPeerError("dial tcp: missing address")
    host, colon, port = address.rpartition(":")
    if not colon:
        raise LookupPeerError(f"dial tcp: address {address}: missing port in address")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise LookupPeerError(f"dial tcp: address {address}: too many colons in address")
    if not (port.isascii() and port.isdigit()) or int(port) > 65535:
        raise LookupPeerError(f"dial tcp: lookup tcp/{port}: unknown port")
    return host or "localhost", int(port)  # Go dials the local system for an empty host


def _join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _reason(error: OSError) -> str:
    return (error.strerror or str(error)).lower()
