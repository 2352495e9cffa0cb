"""A connection's input: command lines and exact byte counts from the socket, through the negotiated
decompression layer, with nsqd's per-command read deadline (nsqd reads through a bufio.Reader)."""
from __future__ import annotations

import socket
import time

from .compression import StreamError

LINE_BUFFER_SIZE = 16 * 1024  # C-19: nsqd's bufio.Reader size bounds a command line
_RECV_SIZE = 64 * 1024
NO_DEADLINE_POLL = 3600.0  # seconds; a socket that has a timeout never blocks unboundedly


class ConnectionClosed(Exception):
    """EOF, a read deadline, an overlong line or a broken stream: nsqd closes without a frame (C-25)."""


class ConnectionReader:
    """Lines and exact byte counts from the socket, through the negotiated decompression, with nsqd's
    per-command read deadline (C-29). Sizes are checked by the caller before `read_exactly` (no
    allocation from a lying length), and each fill takes at most what the caller still needs or one
    receive's worth, whatever the peer compressed."""

    def __init__(self, sock: socket.socket):
        self._sock = sock
        self._buffer = bytearray()
        self._pos = 0
        self._decoder = None
        self.deadline: float | None = None

    def _recv(self, most: int = _RECV_SIZE) -> bytes:
        while True:
            if self.deadline is None:
                timeout = NO_DEADLINE_POLL
            else:
                timeout = self.deadline - time.monotonic()
                if timeout <= 0:
                    raise ConnectionClosed("read deadline")
            self._sock.settimeout(timeout)
            try:
                data = self._sock.recv(most)
            except TimeoutError:
                continue  # a poll, not an error: the loop checks the deadline again (which ends the read)
            except OSError as error:
                raise ConnectionClosed(str(error)) from None
            if not data:
                raise ConnectionClosed("EOF")
            return data

    def _fill(self, wanted: int) -> None:
        """Append at least one byte and at most ``wanted`` bytes from the socket, as nsqd's bufio.Reader reads:
        what it has not asked for stays in the kernel, so a close then resets the connection, as nsqd's does
        (C-19). Through a decoder, at most max(wanted, one receive)."""
        if self._decoder is None:
            data = self._recv(wanted)
        else:
            try:
                while not (data := self._decoder.read(max(wanted, _RECV_SIZE))):
                    self._decoder.feed(self._recv())
            except StreamError as error:
                raise ConnectionClosed(str(error)) from None
        if self._pos:
            del self._buffer[:self._pos]
            self._pos = 0
        self._buffer += data

    def readline(self) -> bytes:
        """One command line without its '\\n' (C-14)."""
        while True:
            end = self._buffer.find(b"\n", self._pos)
            if end >= 0:
                line = bytes(self._buffer[self._pos:end])
                self._pos = end + 1
                return line
            buffered = len(self._buffer) - self._pos
            if buffered >= LINE_BUFFER_SIZE:
                raise ConnectionClosed("line too long")  # C-19: bufio: buffer full
            self._fill(LINE_BUFFER_SIZE - buffered)  # the room left in bufio's buffer

    def read_exactly(self, size: int) -> bytes:
        while (buffered := len(self._buffer) - self._pos) < size:
            self._fill(max(size - buffered, LINE_BUFFER_SIZE))  # a body: bufio fills its buffer, or reads past it
        data = bytes(self._buffer[self._pos:self._pos + size])
        self._pos += size
        return data

    def upgrade(self, decoder) -> None:
        """From now on the socket's bytes go through `decoder` (tls.TLSStream, compression.DeflateReader or
        SnappyReader), inside the decoder already there (snappy or deflate inside TLS, T-02, T-03). nsqd's
        upgrades put a new bufio.Reader on the connection, so whatever the old one had already read past
        IDENTIFY's body is dropped, not decoded (ID-30)."""
        if self._decoder is not None:
            decoder = _Layered(decoder, self._decoder)
        self._buffer, self._pos, self._decoder = bytearray(), 0, decoder

    def parse_buffered(self, parse):
        """What `parse(buffer, start)` takes from the bytes already buffered, never reading the socket: it
        returns (result, end) and the bytes before `end` are consumed. Commands that arrive many to a read
        (MPUB members, pipelined FINs) are parsed in one pass instead of one read each. `parse` keeps no view
        of the buffer."""
        result, self._pos = parse(self._buffer, self._pos)
        return result


class _Layered:
    """A decoder whose input is another decoder's output (compression inside TLS)."""

    def __init__(self, outer, inner):
        self._outer = outer
        self._inner = inner

    def feed(self, data: bytes) -> None:
        self._inner.feed(data)

    def read(self, max_size: int) -> bytes:
        while not (data := self._outer.read(max_size)):
            decoded = self._inner.read(_RECV_SIZE)
            if not decoded:
                return b""
            self._outer.feed(decoded)
        return data
