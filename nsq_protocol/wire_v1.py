"""nsqlookupd's TCP protocol "  V1" (conformance/spec/nsqlookupd.toml, L-TCP-*) as pure codecs over bytes, beside
``wire``'s V2: what nsqd sends its lookupds (IDENTIFY, REGISTER, UNREGISTER, PING) and the replies. The suite's
V1 test connection, its fake nsqlookupd and the trace decoder all read V1 through this module.

Behaviour IDs (``L-TCP-02`` ...) are items of ``conformance/spec/nsqlookupd.toml``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from nsq_protocol.wire import DEFAULT_MAX_BODY_SIZE, CommandLineDecoder
from nsq_protocol.wire._frames import _StreamDecoder

MAGIC_V1 = b"  V1"  # L-TCP-01
_SIZE = struct.Struct(">i")


@dataclass(frozen=True)
class V1Command:
    name: bytes
    params: tuple[bytes, ...]
    body: bytes | None = None  # IDENTIFY's JSON (L-TCP-04)

    def describe(self) -> str:
        words = b" ".join((self.name, *self.params)).decode("utf-8", "replace")
        return words + (f" [{len(self.body)} bytes] {self.body[:120]!r}" if self.body is not None else "")


class V1CommandDecoder(CommandLineDecoder):
    """Incremental decoder of the client -> nsqlookupd stream, starting with the magic (L-TCP-01). A line is
    trimmed of white space and split on single spaces (L-TCP-20); IDENTIFY reads a 4-byte size and its body
    (L-TCP-04). ``magic`` is what the client sent first, whatever it was (L-TCP-03 answers any other)."""

    MAGIC = MAGIC_V1
    BODY_COMMANDS = frozenset({b"IDENTIFY"})

    def split(self, line: bytes) -> list[bytes]:
        return line.strip().split(b" ")

    def command(self, name: bytes, params: tuple[bytes, ...], body: bytes | None) -> V1Command:
        return V1Command(name, params, body)


class V1ReplyDecoder(_StreamDecoder):
    """Incremental decoder of nsqlookupd's replies: ``[4-byte big-endian size][data]``, no frame type; an error
    is told apart by its text, ``E_...`` (L-TCP-02)."""

    def __init__(self, max_reply_size: int = DEFAULT_MAX_BODY_SIZE):
        super().__init__()
        self._max_reply_size = max_reply_size

    def feed(self, data: bytes) -> list[bytes]:
        self._check_not_failed()
        buffer = self._buffer
        buffer += data
        position = 0
        replies: list[bytes] = []
        try:
            while len(buffer) - position >= 4:
                (size,) = _SIZE.unpack_from(buffer, position)
                if size < 0 or size > self._max_reply_size:
                    raise self._fail(f"reply size {size} out of range", position, replies)
                if len(buffer) - position - 4 < size:
                    break
                replies.append(bytes(buffer[position + 4:position + 4 + size]))
                position += 4 + size
        finally:
            del buffer[:position]
            self._consumed += position
        return replies


def is_error(reply: bytes) -> bool:
    """Every V1 error is fatal and starts with its code (L-TCP-21)."""
    return reply.startswith(b"E_")


def encode_command(name: bytes | str, *params: bytes | str, body: bytes | None = None) -> bytes:
    line = b" ".join(part.encode() if isinstance(part, str) else part for part in (name, *params)) + b"\n"
    return line if body is None else line + _SIZE.pack(len(body)) + body


def encode_reply(data: bytes) -> bytes:
    return _SIZE.pack(len(data)) + data
