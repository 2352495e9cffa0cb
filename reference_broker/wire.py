"""The broker's side of the wire: frames out, command lines in, name rules, and the two error classes.

Mirrors nsqd's `internal/protocol` package. The conformance suite has its own codec on purpose: if both
shared one, a codec bug would pass both.
"""
from __future__ import annotations

import re
import struct

MAGIC_V2 = b"  V2"

FRAME_TYPE_RESPONSE = 0
FRAME_TYPE_ERROR = 1
FRAME_TYPE_MESSAGE = 2

OK = b"OK"
HEARTBEAT = b"_heartbeat_"
CLOSE_WAIT = b"CLOSE_WAIT"

MESSAGE_ID_LENGTH = 16
MESSAGE_HEADER_LENGTH = 8 + 2 + MESSAGE_ID_LENGTH  # C-09: timestamp, attempts, id

_FRAME_HEADER = struct.Struct(">Ii")
_MESSAGE_FRAME_HEADER = struct.Struct(">IiqH%ds" % MESSAGE_ID_LENGTH)  # size, type, timestamp, attempts, id
_UINT32 = struct.Struct(">I")
_INT32 = struct.Struct(">i")

# FIN lines that parse_command_line splits into exactly FIN and one 16-byte ID (no CR before the LF), and
# the ID's place in each.
_FIN_RUN = re.compile(rb"(?:FIN [^ \r\n]{%d}\n)*" % MESSAGE_ID_LENGTH)
_FIN_LINE = struct.Struct("4x%dsx" % MESSAGE_ID_LENGTH)

# D-39: 1..64 characters including the optional "#ephemeral" suffix.
_NAME = re.compile(rb"[.a-zA-Z0-9_-]+(#ephemeral)?")
MAX_NAME_LENGTH = 64
EPHEMERAL_SUFFIX = "#ephemeral"


class ClientError(Exception):
    """A non-fatal error: the frame is sent and the connection stays open (C-23)."""

    fatal = False

    def __init__(self, code: str, description: str = ""):
        super().__init__(code, description)
        self.code = code
        self.description = description

    def __str__(self) -> str:
        return f"{self.code} {self.description}" if self.description else self.code


class FatalClientError(ClientError):
    """Everything but FIN/REQ/TOUCH's *_FAILED: the frame is sent, then the connection closes (C-23)."""

    fatal = True


def frame(frame_type: int, data: bytes) -> bytes:
    """C-06: [size = 4 + len(data)][type][data]."""
    return _FRAME_HEADER.pack(4 + len(data), frame_type) + data


def message_frame(timestamp: int, attempts: int, message_id: bytes, body: bytes) -> bytes:
    """C-09: one message frame, header and ID packed in one call."""
    return _MESSAGE_FRAME_HEADER.pack(4 + MESSAGE_HEADER_LENGTH + len(body), FRAME_TYPE_MESSAGE, timestamp, attempts,
                                      message_id) + body


def read_size(four_bytes: bytes) -> int:
    """C-18: a 4-byte BE length read as uint32 and cast to int32, so huge values come out negative."""
    (size,) = _UINT32.unpack(four_bytes)
    return size - (1 << 32) if size >= 1 << 31 else size


def buffered_members(limit: int, max_size: int, buffer: bytearray, start: int) -> tuple[list[bytes], int]:
    """Up to `limit` length-prefixed members ([4-byte BE size as int32][data]) wholly in `buffer` from `start`,
    and where they end. Stops before a member that is not wholly there or whose size is outside 1..max_size,
    for the caller to read and refuse with its own checks."""
    data = bytes(memoryview(buffer)[start:])  # one copy; each member is then one slice of it
    members, position = _equal_members(limit, max_size, data)
    unpack, end = _INT32.unpack_from, len(data)
    for _ in range(limit - len(members)):
        body = position + 4
        if body > end:
            break
        (size,) = unpack(data, position)
        if not 0 < size <= max_size or body + size > end:
            break
        members.append(data[body:body + size])
        position = body + size
    return members, start + position


def _equal_members(limit: int, max_size: int, data: bytes) -> tuple[list[bytes], int]:
    """The leading run of members that all have the first one's size, found with four strided compares of their
    size prefixes instead of one unpack each: publishers' batches are mostly of one size."""
    if len(data) < 4:
        return [], 0
    (size,) = _INT32.unpack_from(data)
    stride = size + 4
    count = min(limit, len(data) // stride) if 0 < size <= max_size else 0
    if count < 2:
        return [], 0
    run, prefix = data[:count * stride], data[:4]
    if any(run[k::stride] != prefix[k:k + 1] * count for k in range(4)):
        return [], 0  # sizes differ: the member loop takes them one at a time
    return [data[at + 4:at + stride] for at in range(0, count * stride, stride)], count * stride


def buffered_fins(buffer: bytearray, start: int) -> tuple[list[bytes], int]:
    """The IDs of the plain `FIN <16-byte ID>` lines wholly in `buffer` from `start`, up to the first other
    line, and where they end."""
    run = _FIN_RUN.match(buffer, start)
    return [message_id for (message_id,) in _FIN_LINE.iter_unpack(run.group())], run.end()


def parse_command_line(line: bytes) -> tuple[bytes, list[bytes]]:
    """C-14/C-15: strip one trailing CR, split on single spaces (two spaces make an empty param)."""
    if line.endswith(b"\r"):
        line = line[:-1]
    name, *params = line.split(b" ")
    return name, params


def is_valid_name(name: bytes) -> bool:
    """D-39 / X-18: the name rule for topics and channels."""
    return 1 <= len(name) <= MAX_NAME_LENGTH and _NAME.fullmatch(name) is not None


def is_ephemeral(name: str) -> bool:
    return name.endswith(EPHEMERAL_SUFFIX)


def go_quote(raw: bytes) -> str:
    """Go's %q of a string: how nsqd prints a rejected topic or channel name (P-SUB-04)."""
    out = ['"']
    text = raw.decode("utf-8", "surrogateescape")
    for char in text:
        code = ord(char)
        if 0xDC80 <= code <= 0xDCFF:  # a byte that is not UTF-8
            out.append("\\x%02x" % (code - 0xDC00))
        elif char in '"\\':
            out.append("\\" + char)
        elif char in _GO_ESCAPES:
            out.append(_GO_ESCAPES[char])
        elif code < 0x20 or code == 0x7F:
            out.append("\\x%02x" % code)
        elif not char.isprintable():
            out.append("\\u%04x" % code if code <= 0xFFFF else "\\U%08x" % code)
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}
