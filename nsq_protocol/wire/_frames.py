"""Frames (server to client) and commands (client to server): the protocol's constants, the records, their
incremental decoders and their encoders."""

from __future__ import annotations

import functools
import json
import struct
from dataclasses import dataclass

MAGIC_V2 = b"  V2"  # C-01: 20 20 56 32

FRAME_RESPONSE, FRAME_ERROR, FRAME_MESSAGE = 0, 1, 2  # C-07
FRAME_TYPE_NAMES = {FRAME_RESPONSE: "response", FRAME_ERROR: "error", FRAME_MESSAGE: "message"}

HEARTBEAT = b"_heartbeat_"  # C-26

# C-18: these commands carry a 4-byte size and a body after the line.
BODY_COMMANDS = frozenset({b"IDENTIFY", b"AUTH", b"PUB", b"DPUB", b"MPUB"})

MESSAGE_HEADER_SIZE = 26  # C-09: 8 timestamp + 2 attempts + 16 id
MESSAGE_ID_SIZE = 16

# nsqd reads command lines through a 16 KiB bufio.Reader; a longer line cannot be a command (C-19).
DEFAULT_MAX_LINE = 16 * 1024
# Far above any configurable nsqd limit; only guards the decoders against garbage sizes.
DEFAULT_MAX_FRAME_SIZE = 256 * 1024 * 1024
DEFAULT_MAX_BODY_SIZE = 256 * 1024 * 1024

_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_FRAME_HEADER = struct.Struct(">Ii")
_MESSAGE_HEADER = struct.Struct(">qH16s")


class ProtocolViolation(ValueError):
    """Input that no conformant peer sends and that cannot be decoded further.

    ``frames`` (or ``commands``) holds what was decoded in the same ``feed`` call before the bad
    bytes, and ``offset`` is the stream offset of the bad bytes, so a caller can record both.
    The decoder that raised is finished: later ``feed`` calls raise again.
    """

    def __init__(self, reason: str, offset: int = 0, decoded: list | FrameSpans | CommandSpans | None = None):
        super().__init__(f"{reason} (at stream offset {offset})")
        self.reason = reason
        self.offset = offset
        self.decoded = decoded or []

    @property
    def frames(self) -> list[Frame]:
        return self.decoded.frames() if isinstance(self.decoded, FrameSpans) else self.decoded

    @property
    def commands(self) -> list[Command]:
        return self.decoded.commands() if isinstance(self.decoded, CommandSpans) else self.decoded


@dataclass(frozen=True, slots=True)
class Frame:
    """One server -> client frame (C-06)."""

    frame_type: int
    data: bytes

    @property
    def is_heartbeat(self) -> bool:
        return self.frame_type == FRAME_RESPONSE and self.data == HEARTBEAT

    @property
    def error_code(self) -> str | None:
        """The leading machine code of an error frame (C-08), e.g. ``E_INVALID``; None otherwise."""
        if self.frame_type != FRAME_ERROR:
            return None
        return self.data.split(b" ", 1)[0].decode("ascii", "replace")

    @property
    def error_text(self) -> str | None:
        """The human text after the code of an error frame (C-08); None for other frames."""
        if self.frame_type != FRAME_ERROR:
            return None
        parts = self.data.split(b" ", 1)
        return parts[1].decode("utf-8", "replace") if len(parts) == 2 else ""

    def _message_header(self) -> tuple[int, int, bytes]:
        if self.frame_type != FRAME_MESSAGE:
            raise AttributeError("only message frames have a message header")
        return _MESSAGE_HEADER.unpack_from(self.data)

    @property
    def timestamp(self) -> int:
        """Publish time in nanoseconds since the epoch (C-09)."""
        return self._message_header()[0]

    @property
    def attempts(self) -> int:
        return self._message_header()[1]

    @property
    def message_id(self) -> bytes:
        return self._message_header()[2]

    @property
    def body(self) -> bytes:
        if self.frame_type != FRAME_MESSAGE:
            raise AttributeError("only message frames have a body")
        return self.data[MESSAGE_HEADER_SIZE:]

    def encode(self) -> bytes:
        return encode_frame(self.frame_type, self.data)

    @property
    def id_text(self) -> str:
        """The message ID as a FIN, REQ or TOUCH line carries it back: any 16 bytes, nsqd's hex or not, survive the
        round trip (``encode_command`` encodes text the same way)."""
        return self.message_id.decode("utf-8", "surrogateescape")

    def describe(self) -> str:
        """One human line, as used in transcripts and reports."""
        if self.frame_type == FRAME_MESSAGE:
            return (f"MESSAGE id={repr(self.message_id)[2:-1]} attempts={self.attempts} "
                    f"ts={self.timestamp} body={_preview(self.body)}")
        name = FRAME_TYPE_NAMES.get(self.frame_type, f"type{self.frame_type}").upper()
        return f"{name} {_preview(self.data)}"


@dataclass(frozen=True, slots=True)
class FrameSpans:
    """Frames as spans of one bytes object, for a caller that reads their fields in bulk: frame ``i`` is of type
    ``types[i]`` and its data is ``data[starts[i]:ends[i]]``."""

    data: bytes
    types: list[int]
    starts: list[int]
    ends: list[int]

    def frames(self) -> list[Frame]:
        data = self.data
        return [Frame(frame_type, data[start:end])
                for frame_type, start, end in zip(self.types, self.starts, self.ends, strict=True)]


@dataclass(frozen=True, slots=True)
class CommandSpans:
    """Commands as spans of one bytes object, for a caller that reads them in bulk: command ``i``'s line is
    ``data[starts[i]:newlines[i]]``; it has a body when ``ends[i] > newlines[i] + 1``: ``data[newlines[i] + 5:ends[i]]``
    after its 4-byte size. ``decoder`` says what a line means (``commands()``)."""

    data: bytes
    starts: list[int]
    newlines: list[int]
    ends: list[int]
    decoder: CommandLineDecoder

    def command(self, index: int):
        data, newline, end = self.data, self.newlines[index], self.ends[index]
        return self.decoder.line_command(data[self.starts[index]:newline],
                                         data[newline + 5:end] if end > newline + 1 else None)

    def commands(self) -> list:
        return [self.command(index) for index in range(len(self.starts))]


@dataclass(frozen=True, slots=True)
class Command:
    """One client -> server command: the line split on single spaces (C-15) and an optional body."""

    name: bytes
    params: tuple[bytes, ...]
    body: bytes | None = None
    crlf: bool = False  # the line ended in CRLF, which nsqd reads as LF (C-14)

    @property
    def messages(self) -> list[bytes]:
        """The messages of an MPUB body (P-MPUB-02 framing: count, then size + bytes each)."""
        if self.name != b"MPUB" or self.body is None:
            raise AttributeError("only MPUB commands carry a message list")
        return parse_mpub_body(self.body)

    def encode(self) -> bytes:
        return encode_command(self.name, *self.params, body=self.body)

    def describe(self) -> str:
        line = b" ".join((self.name, *self.params)).decode("utf-8", "replace") or "(empty line)"
        if self.body is None:
            return line
        if self.name == b"MPUB":
            try:
                return f"{line} [{len(self.body)} bytes, {len(self.messages)} messages]"
            except ProtocolViolation:
                pass
        return f"{line} [{len(self.body)} bytes] {_preview(self.body)}"


def _preview(data: bytes, limit: int = 120) -> str:
    text = repr(data[:limit])[2:-1]
    return text + (f"... (+{len(data) - limit} bytes)" if len(data) > limit else "")


def upgrades(identify_json: bytes | dict | None, request: bool = False) -> tuple[str, ...]:
    """The layers an IDENTIFY body (``request``) asks for, or its JSON response agrees to (bytes, or already
    decoded), in the order they start (ID-30): ``tls_v1``, then ``snappy`` or ``deflate``. A body asks only with
    feature_negotiation, and its keys match case-insensitively, as Go's JSON decoding does. Not a JSON object,
    or none of them: ()."""
    fields = identify_json
    if not isinstance(fields, dict):
        try:
            fields = json.loads(identify_json or b"")
        except ValueError:
            return ()
        if not isinstance(fields, dict):
            return ()
    fields = {str(key).lower(): value for key, value in fields.items()}
    if request and fields.get("feature_negotiation") is not True:
        return ()
    return tuple(layer for layer in ("tls_v1", "snappy", "deflate") if fields.get(layer) is True)


class _StreamDecoder:
    """What both decoders share: the unconsumed bytes, the stream offset, failing for good, and pausing at the
    protocol switch (h11's PAUSED and trailing_data): with ``pause_at_upgrade`` the decoder stops right after
    the IDENTIFY (command) or its JSON response (frame) that names TLS or compression, because the bytes after
    it belong to the new layer. The caller takes them with ``take_trailing_data()`` and feeds back what the new
    layer makes of them (the bytes themselves, when the server declined)."""

    def __init__(self, pause_at_upgrade: bool = False):
        self._buffer = bytearray()
        self._consumed = 0
        # (reason, offset) of the violation that stopped it: not the exception, whose traceback holds this decoder
        self._failure: tuple[str, int] | None = None
        self._pause_at_upgrade = pause_at_upgrade
        self.paused = False  # stopped at a protocol switch; feed() only holds bytes until the caller decides

    def take_trailing_data(self) -> bytes:
        """Leave the pause at a switch: the bytes received after the switch point, which this decoder no longer
        holds (they are counted as consumed: the stream continues through the new layer, if any)."""
        data = bytes(self._buffer)
        del self._buffer[:]
        self._consumed += len(data)
        self.paused = False
        return data

    @property
    def pending(self) -> int:
        """Bytes held back because they do not yet form a whole frame or command."""
        return len(self._buffer)

    @property
    def offset(self) -> int:
        """Stream offset of the first byte not yet decoded."""
        return self._consumed

    def _check_not_failed(self) -> None:
        if self._failure is not None:
            reason, offset = self._failure
            raise ProtocolViolation(f"decoder already failed: {reason}", offset)

    def _fail(self, reason: str, position: int, decoded: list) -> ProtocolViolation:
        self._failure = (reason, self._consumed + position)
        return ProtocolViolation(reason, self._consumed + position, decoded)


class FrameDecoder(_StreamDecoder):
    """Incremental decoder of the server -> client stream (after the client's magic)."""

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, pause_at_upgrade: bool = False):
        super().__init__(pause_at_upgrade)
        self._max_frame_size = max_frame_size
        self._compression_after_ok = False  # TLS and compression agreed: the OK inside TLS is a switch point too

    def _switches_after(self, response: bytes) -> bool:
        """ID-30: the JSON response that agrees to a layer ends the plain stream; when it agrees to TLS and
        compression, the OK inside TLS ends the part before compression."""
        if self._compression_after_ok:
            self._compression_after_ok = False
            return response == b"OK"
        layers = upgrades(response) if response[:1] == b"{" else ()
        self._compression_after_ok = layers[:1] == ("tls_v1",) and len(layers) > 1
        return bool(layers)

    def feed(self, data: bytes) -> list[Frame]:
        return self.feed_spans(data).frames()

    def feed_spans(self, data: bytes) -> FrameSpans:
        """``feed``'s frames as spans of the bytes they were decoded from (a ProtocolViolation's ``decoded`` too)."""
        self._check_not_failed()
        buffer = self._buffer
        buffer += data
        types: list[int] = []
        starts: list[int] = []
        ends: list[int] = []
        if self.paused:
            return FrameSpans(b"", types, starts, ends)
        view = memoryview(buffer)
        end = len(buffer)
        position = 0
        unpack_header, max_frame_size, pause_at_upgrade = _FRAME_HEADER.unpack_from, self._max_frame_size, \
            self._pause_at_upgrade
        # a frame per turn, by the hundred thousand: what each turn calls is bound once
        known_types, add_type, add_start, add_end = FRAME_TYPE_NAMES, types.append, starts.append, ends.append
        try:
            while end - position >= 8:
                size, frame_type = unpack_header(view, position)
                if size < 4 or size > max_frame_size:  # C-06: size counts the type field
                    raise self._fail(f"frame size {size} out of range", position, self._spans(types, starts, ends))
                if frame_type not in known_types:  # C-07
                    raise self._fail(f"unknown frame type {frame_type}", position, self._spans(types, starts, ends))
                frame_end = position + 4 + size
                if frame_end > end:
                    break
                if frame_type == FRAME_MESSAGE and size < 4 + MESSAGE_HEADER_SIZE:  # C-09
                    raise self._fail(f"message frame of {size - 4} bytes < 26", position,
                                     self._spans(types, starts, ends))
                add_type(frame_type)
                add_start(position + 8)
                add_end(frame_end)
                position = frame_end
                if pause_at_upgrade and frame_type == FRAME_RESPONSE and \
                        self._switches_after(bytes(view[starts[-1]:frame_end])):
                    self.paused = True
                    break
            return self._spans(types, starts, ends)
        finally:
            view.release()
            del buffer[:position]
            self._consumed += position

    def _spans(self, types: list[int], starts: list[int], ends: list[int]) -> FrameSpans:
        """The frames decoded so far in this ``feed``, before the buffer gives up their bytes."""
        return FrameSpans(bytes(self._buffer[:ends[-1]]) if ends else b"", types, starts, ends)


class CommandLineDecoder(_StreamDecoder):
    """The walk both TCP protocols share on the client's side: a 4-byte magic, then commands as lines, some of them
    followed by a 4-byte int32 size and a body. Subclasses say the magic, which commands have a body, how a line
    splits into a name and parameters, and what a command is."""

    MAGIC = b""
    BODY_COMMANDS: frozenset[bytes] = frozenset()

    def __init__(self, max_line: int = DEFAULT_MAX_LINE, max_body_size: int = DEFAULT_MAX_BODY_SIZE,
                 pause_at_upgrade: bool = False):
        super().__init__(pause_at_upgrade)
        self.magic: bytes | None = None  # what the client sent first, whatever it was
        self._max_line = max_line
        self._max_body_size = max_body_size

    @property
    def partial_magic(self) -> bytes | None:
        """The first bytes of a magic not yet complete (at most three): where the stream ends here, the client ended
        it within the magic (C-03). None: no byte yet, or all four came."""
        return bytes(self._buffer) if self.magic is None and self._buffer else None

    def split(self, line: bytes) -> list[bytes]:
        raise NotImplementedError

    def command(self, name: bytes, params: tuple[bytes, ...], body: bytes | None):
        raise NotImplementedError

    def line_command(self, line: bytes, body: bytes | None):
        """The command of ``line`` (without its newline) and its body."""
        name, *params = self.split(line)
        return self.command(name, tuple(params), body)

    def body_end(self, buffer, name: bytes, start: int, size: int, end: int) -> int | None:
        """Where the body that starts at ``start`` ends, its size word said ``size``; None: not all there yet; -1:
        larger than the decoder's bound."""
        return start + size if end - start >= size else None

    def feed(self, data: bytes) -> list:
        return self.feed_spans(data).commands()

    def feed_spans(self, data: bytes) -> CommandSpans:
        """``feed``'s commands as spans of the bytes they were decoded from (a ProtocolViolation's ``decoded``
        too)."""
        self._check_not_failed()
        buffer = self._buffer
        buffer += data
        starts: list[int] = []
        newlines: list[int] = []
        ends: list[int] = []
        if self.paused:
            return CommandSpans(b"", starts, newlines, ends, self)
        position = 0
        # a line per turn, by the hundred thousand: what each turn calls is bound once
        body_first_bytes, max_line, find = self._body_first_bytes, self._max_line, buffer.find
        add_start, add_newline, add_end = starts.append, newlines.append, ends.append
        try:
            if self.magic is None:
                if len(buffer) < 4:
                    return CommandSpans(b"", starts, newlines, ends, self)
                self.magic = bytes(buffer[:4])
                position = 4
                if self.magic != self.MAGIC:  # C-02, C-05; L-TCP-03
                    raise self._fail(f"bad magic {self.magic!r}", 0, self._spans(starts, newlines, ends))
            end = len(buffer)
            while position < end:
                newline = find(b"\n", position, position + max_line)
                if newline < 0:
                    if end - position >= max_line:  # C-19
                        raise self._fail(f"command line longer than {max_line} bytes", position,
                                         self._spans(starts, newlines, ends))
                    break
                next_position = newline + 1
                name = None
                if buffer[position] in body_first_bytes:  # the line's name is read only where it may have a body
                    name = self.split(bytes(buffer[position:newline]))[0]
                    if name in self.BODY_COMMANDS:
                        if end - next_position < 4:
                            break
                        (size,) = _I32.unpack_from(buffer, next_position)
                        if size < 0 or size > self._max_body_size:
                            raise self._fail(f"{name.decode()} body size {size} out of range", next_position,
                                             self._spans(starts, newlines, ends))
                        body_end = self.body_end(buffer, name, next_position + 4, size, end)
                        if body_end is None:
                            break
                        if body_end < 0:  # more than the largest body the decoder holds
                            raise self._fail(f"{name.decode()} body beyond {self._max_body_size} bytes",
                                             next_position, self._spans(starts, newlines, ends))
                        next_position = body_end
                add_start(position)
                add_newline(newline)
                add_end(next_position)
                position = next_position
                if self._pause_at_upgrade and name == b"IDENTIFY" and \
                        upgrades(bytes(buffer[newline + 5:next_position]), request=True):
                    self.paused = True
                    break
            return self._spans(starts, newlines, ends)
        finally:
            del buffer[:position]
            self._consumed += position

    @functools.cached_property
    def _body_first_bytes(self) -> frozenset[int]:
        return frozenset(name[0] for name in self.BODY_COMMANDS)

    def _spans(self, starts: list[int], newlines: list[int], ends: list[int]) -> CommandSpans:
        """The commands decoded so far in this ``feed``, before the buffer gives up their bytes."""
        return CommandSpans(bytes(self._buffer[:ends[-1]]) if ends else b"", starts, newlines, ends, self)


class CommandDecoder(CommandLineDecoder):
    """Incremental decoder of the client -> server stream, starting with the 4-byte magic (C-01).

    One ``\\r`` right before ``\\n`` is stripped (C-14); parameters are split on single spaces, so
    two spaces give an empty parameter (C-15). A body command's 4-byte size is read as int32 (C-18).
    """

    MAGIC = MAGIC_V2
    BODY_COMMANDS = BODY_COMMANDS

    def split(self, line: bytes) -> list[bytes]:
        return (line[:-1] if line.endswith(b"\r") else line).split(b" ")

    def command(self, name: bytes, params: tuple[bytes, ...], body: bytes | None) -> Command:
        return Command(name, params, body)

    def line_command(self, line: bytes, body: bytes | None) -> Command:
        name, *params = self.split(line)
        return Command(name, tuple(params), body, line.endswith(b"\r"))

    def body_end(self, buffer, name: bytes, start: int, size: int, end: int) -> int | None:
        """P-MPUB-04: nsqd reads an MPUB body by its message count and each message's size, never by the outer
        size, which it only range-checks; a count or size it refuses ends the framing there (the error is fatal)."""
        if name != b"MPUB":
            return super().body_end(buffer, name, start, size, end)
        if end - start < 4:
            return None
        (count,) = _I32.unpack_from(buffer, start)
        position = start + 4
        for _ in range(max(count, 0)):
            if end - position < 4:
                return None
            (message_size,) = _I32.unpack_from(buffer, position)
            position += 4
            if message_size <= 0:
                return position
            if position + message_size - start > self._max_body_size:
                return -1
            if end - position < message_size:
                return None
            position += message_size
        return position


# ---- encoders (the suite builds valid input with these; invalid input is written by hand) ----------------

def _as_bytes(value: bytes | str | int) -> bytes:
    if isinstance(value, bytes):
        return value
    return str(value).encode("utf-8", "surrogateescape")  # Frame.id_text's bytes, whatever they were


def encode_command(name: bytes | str, *params: bytes | str | int, body: bytes | None = None) -> bytes:
    """``NAME p1 p2\\n`` (C-14, C-15), plus ``[4-byte BE size][body]`` when a body is given (C-18)."""
    line = b" ".join((_as_bytes(name), *(_as_bytes(param) for param in params))) + b"\n"
    if body is None:
        return line
    return line + _U32.pack(len(body)) + body


def encode_frame(frame_type: int, data: bytes) -> bytes:
    """``[size][type][data]`` with size = 4 + len(data) (C-06)."""
    return _FRAME_HEADER.pack(4 + len(data), frame_type) + data


def encode_message(timestamp: int, attempts: int, message_id: bytes, body: bytes) -> bytes:
    """The data of a message frame (C-09)."""
    return _MESSAGE_HEADER.pack(timestamp, attempts, message_id) + body


def mpub_body(messages: list[bytes]) -> bytes:
    """MPUB body: ``[4-byte count]`` then ``[4-byte size][bytes]`` per message (P-MPUB-02)."""
    parts = [_U32.pack(len(messages))]
    for message in messages:
        parts.append(_U32.pack(len(message)))
        parts.append(message)
    return b"".join(parts)


def identify_body(fields: dict) -> bytes:
    """The JSON body of IDENTIFY (section 3.1)."""
    return json.dumps(fields, separators=(",", ":")).encode()


def parse_mpub_body(body: bytes) -> list[bytes]:
    if len(body) < 4:
        raise ProtocolViolation("MPUB body shorter than its message count")
    (count,) = _I32.unpack_from(body, 0)
    if count < 0:
        raise ProtocolViolation(f"MPUB message count {count} is negative")
    messages = []
    position = 4
    for index in range(count):
        if len(body) - position < 4:
            raise ProtocolViolation(f"MPUB message({index}) size missing", position)
        (size,) = _I32.unpack_from(body, position)
        position += 4
        if size < 0 or len(body) - position < size:
            raise ProtocolViolation(f"MPUB message({index}) body size {size} out of range", position)
        messages.append(body[position:position + size])
        position += size
    return messages
