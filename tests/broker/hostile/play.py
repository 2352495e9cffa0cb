"""Playing one session against the broker, and what in it nsqd would never do."""
from __future__ import annotations

import json
import re
import socket
import struct
import time
from collections import deque
from dataclasses import dataclass, field

from nsq_protocol.wire import (
    DeflateStreamDecoder,
    DeflateStreamEncoder,
    ProtocolViolation,
    SnappyStreamDecoder,
    SnappyStreamEncoder,
)

from .session import (
    FOREIGN_ID,
    IN_FLIGHT_ID,
    MAX_MSG_SIZE,
    MESSAGE_WAIT,
    SESSION_TIMEOUT,
    AwaitMessage,
    AwaitUpgrade,
    Pause,
    Session,
    readable,
)

# -- Appendix A, every TCP error string; <n>-like placeholders are numbers, the others any text ---------------

ERROR_STRINGS = (
    "E_BAD_PROTOCOL",
    "E_INVALID invalid command <cmd>", "E_INVALID cannot <cmd> in current state (TLS required)",
    "E_INVALID cannot IDENTIFY in current state", "E_BAD_BODY IDENTIFY failed to read body size",
    "E_BAD_BODY IDENTIFY body too big <n> > <max>", "E_BAD_BODY IDENTIFY invalid body size <n>",
    "E_BAD_BODY IDENTIFY failed to read body", "E_BAD_BODY IDENTIFY failed to decode JSON body",
    "E_BAD_BODY IDENTIFY heartbeat interval (<n>) is invalid",
    "E_BAD_BODY IDENTIFY output buffer timeout (<n>) is invalid",
    "E_BAD_BODY IDENTIFY output buffer size (<n>) is invalid", "E_BAD_BODY IDENTIFY sample rate (<n>) is invalid",
    "E_BAD_BODY IDENTIFY msg timeout (<n>) is invalid",
    "E_IDENTIFY_FAILED cannot enable both deflate and snappy compression", "E_IDENTIFY_FAILED IDENTIFY failed <err>",
    "E_INVALID cannot AUTH in current state", "E_INVALID AUTH invalid number of parameters",
    "E_BAD_BODY AUTH failed to read body size", "E_BAD_BODY AUTH body too big <n> > <max>",
    "E_BAD_BODY AUTH invalid body size <n>", "E_BAD_BODY AUTH failed to read body", "E_INVALID AUTH already set",
    "E_AUTH_DISABLED AUTH disabled", "E_AUTH_FAILED AUTH failed", "E_UNAUTHORIZED AUTH no authorizations found",
    "E_AUTH_ERROR AUTH error <err>",
    "E_AUTH_FIRST AUTH required before <CMD>", 'E_UNAUTHORIZED AUTH failed for <CMD> on "<topic>" "<channel>"',
    "E_INVALID cannot SUB in current state", "E_INVALID cannot SUB with heartbeats disabled",
    "E_INVALID SUB insufficient number of parameters", 'E_BAD_TOPIC SUB topic name "<t>" is not valid',
    'E_BAD_CHANNEL SUB channel name "<c>" is not valid',
    "E_SUB_FAILED SUB failed consumers for <t>:<c> exceeds limit of <n>", "E_SUB_FAILED SUB failed exiting",
    "E_SUB_FAILED SUB failed to deleted topic/channel",
    "E_INVALID cannot RDY in current state", "E_INVALID RDY could not parse count <raw>",
    "E_INVALID RDY count <n> out of range 0-<max>",
    "E_INVALID cannot FIN in current state", "E_INVALID FIN insufficient number of params",
    "E_INVALID invalid message ID", "E_FIN_FAILED FIN <id> failed ID not in flight",
    "E_FIN_FAILED FIN <id> failed client does not own message",
    "E_INVALID cannot REQ in current state", "E_INVALID REQ insufficient number of params",
    "E_INVALID REQ could not parse timeout <raw>", "E_REQ_FAILED REQ <id> failed ID not in flight",
    "E_REQ_FAILED REQ <id> failed client does not own message", "E_REQ_FAILED REQ <id> failed exiting",
    "E_INVALID cannot TOUCH in current state", "E_INVALID TOUCH insufficient number of params",
    "E_TOUCH_FAILED TOUCH <id> failed ID not in flight",
    "E_TOUCH_FAILED TOUCH <id> failed client does not own message",
    "E_INVALID cannot CLS in current state",
    "E_INVALID PUB insufficient number of parameters", 'E_BAD_TOPIC PUB topic name "<t>" is not valid',
    "E_BAD_MESSAGE PUB failed to read message body size", "E_BAD_MESSAGE PUB invalid message body size <n>",
    "E_BAD_MESSAGE PUB message too big <n> > <max>", "E_BAD_MESSAGE PUB failed to read message body",
    "E_PUB_FAILED PUB failed <err>",
    "E_INVALID MPUB insufficient number of parameters",
    'E_BAD_TOPIC E_BAD_TOPIC MPUB topic name "<t>" is not valid',
    "E_BAD_BODY MPUB failed to read body size", "E_BAD_BODY MPUB invalid body size <n>",
    "E_BAD_BODY MPUB body too big <n> > <max>", "E_BAD_BODY MPUB failed to read message count",
    "E_BAD_BODY MPUB invalid message count <n>", "E_BAD_MESSAGE MPUB failed to read message(<i>) body size",
    "E_BAD_MESSAGE MPUB invalid message(<i>) body size <n>", "E_BAD_MESSAGE MPUB message too big <n> > <max>",
    "E_BAD_MESSAGE MPUB failed to read message body", "E_MPUB_FAILED MPUB failed <err>",
    "E_INVALID DPUB insufficient number of parameters", 'E_BAD_TOPIC DPUB topic name "<t>" is not valid',
    "E_INVALID DPUB could not parse timeout <raw>", "E_INVALID DPUB timeout <ms> out of range 0-<max_ms>",
    "E_BAD_MESSAGE DPUB failed to read message body size", "E_BAD_MESSAGE DPUB invalid message body size <n>",
    "E_BAD_MESSAGE DPUB message too big <n> > <max>", "E_BAD_MESSAGE DPUB failed to read message body",
    "E_DPUB_FAILED DPUB failed <err>",
)
_NUMBER_PLACEHOLDERS = {"<n>", "<max>", "<i>", "<ms>", "<max_ms>"}


def _error_pattern(template: str) -> str:
    parts = re.split(r"(<[a-zA-Z_]+>)", template)
    return "".join(r"-?\d+" if part in _NUMBER_PLACEHOLDERS else ".*" if part.startswith("<") else re.escape(part)
                   for part in parts)


ERROR_PATTERN = re.compile("|".join(f"(?:{_error_pattern(t)})" for t in ERROR_STRINGS).encode(), re.DOTALL)
NON_FATAL_CODES = {b"E_FIN_FAILED", b"E_REQ_FAILED", b"E_TOUCH_FAILED"}  # C-23
RESPONSES = {b"OK", b"CLOSE_WAIT", b"_heartbeat_"}
IDENTIFY_ANSWER_KEYS = {"max_rdy_count", "version", "max_msg_timeout", "msg_timeout", "tls_v1", "deflate",
                        "deflate_level", "max_deflate_level", "snappy", "sample_rate", "auth_required",
                        "output_buffer_size", "output_buffer_timeout", "topology_region", "topology_zone"}
MESSAGE_ID = re.compile(rb"[0-9a-f]{16}")
# Appendix B, plus the router's own answers (H-04).
HTTP_ERROR_MESSAGES = {"MSG_TOO_BIG", "MSG_EMPTY", "INVALID_REQUEST", "MISSING_ARG_TOPIC", "INVALID_TOPIC",
                       "INVALID_DEFER", "EXITING", "BODY_TOO_BIG", "BAD_BODY", "BAD_MESSAGE", "INTERNAL_ERROR",
                       "TOPIC_NOT_FOUND", "INVALID_ARG_TOPIC", "MISSING_ARG_CHANNEL", "INVALID_ARG_CHANNEL",
                       "CHANNEL_NOT_FOUND", "INVALID_OPTION", "INVALID_VALUE", "NOT_FOUND", "METHOD_NOT_ALLOWED"}


# -- playing a session --------------------------------------------------------------------------------------------

@dataclass
class Outcome:
    """What one session saw, and what in it nsqd would never do (`problems`)."""

    session: Session
    sent: list[bytes] = field(default_factory=list)  # each send, before compression
    frames: list[tuple[int, bytes]] = field(default_factory=list)
    http_statuses: list[int] = field(default_factory=list)
    http_messages: list[str] = field(default_factory=list)
    layer: str | None = None  # the compression the broker switched to
    closed_by_broker: bool = False
    reset: bool = False
    timed_out: bool = False
    problems: list[str] = field(default_factory=list)

    def describe(self) -> str:
        lines = [self.session.describe(), "  problems:"]
        lines += [f"    - {problem}" for problem in self.problems]
        lines.append(f"  sent, as it went out (before compression), {len(self.sent)} sends:")
        lines += [f"    {readable(data)}" for data in self.sent]
        lines.append(f"  received {len(self.frames)} frames"
                     + (" then the broker closed" if self.closed_by_broker else "")
                     + (" (reset)" if self.reset else "") + (" (timed out)" if self.timed_out else "") + ":")
        lines += [f"    {('response', 'error', 'message')[t] if t in (0, 1, 2) else t}: {readable(d, 200)}"
                  for t, d in self.frames[:40]]
        if self.http_statuses:
            lines.append(f"  HTTP statuses {self.http_statuses}, messages {self.http_messages}")
        return "\n".join(lines)


class InboundFrames:
    """The broker's bytes on one connection, decoded as they arrive: frames, through the compression layer the
    broker switches to right after IDENTIFY's answer says so (ID-30)."""

    def __init__(self, outcome: Outcome, seen_ids=None):
        self.outcome = outcome
        self.seen_ids = seen_ids  # a deque shared by the sessions of a run, for FOREIGN_ID
        self.buffer = bytearray()
        self.decoder = None
        self.layer: str | None = None
        self.messages_seen = 0
        self.last_message_id: bytes | None = None
        self.answered_identify = False  # the last frame was IDENTIFY's JSON answer
        self.fatal = False

    def feed(self, data: bytes) -> None:
        if self.decoder is not None:
            try:
                data = self.decoder.feed(data)
            except ProtocolViolation as error:
                self._problem(f"the broker's {self.layer} stream does not decode: {error}")
                return
        self.buffer += data
        self._parse()

    def _problem(self, text: str) -> None:
        self.outcome.problems.append(text)
        self.decoder = _Discard()

    def _parse(self) -> None:
        buffer, position = self.buffer, 0
        while len(buffer) - position >= 8:
            size, frame_type = struct.unpack_from(">Ii", buffer, position)
            if not 4 <= size <= 4 + 26 + MAX_MSG_SIZE:  # C-06: nothing nsqd sends here is bigger
                self._problem(f"frame size {size} out of range (C-06)")
                break
            if frame_type not in (0, 1, 2):
                self._problem(f"frame type {frame_type} (C-07)")
                break
            if len(buffer) - position < 4 + size:
                break
            data = bytes(buffer[position + 8:position + 4 + size])
            position += 4 + size
            self._frame(frame_type, data)
            if self.layer is None and self.answered_identify and self._upgrade_from(data):
                rest = bytes(buffer[position:])
                del buffer[:]
                self.feed(rest)
                return
        del buffer[:position]

    def _frame(self, frame_type: int, data: bytes) -> None:
        outcome = self.outcome
        if self.fatal and frame_type != 2:
            # Messages the pump flushed may race the close; a response or error never follows a fatal error.
            outcome.problems.append(f"a frame after a fatal error (C-23): {readable(data, 200)}")
        outcome.frames.append((frame_type, data))
        self.answered_identify = False
        if frame_type == 1:
            if not ERROR_PATTERN.fullmatch(data):
                outcome.problems.append(f"an error frame that is not in Appendix A: {readable(data, 300)}")
            if data.split(b" ", 1)[0] not in NON_FATAL_CODES:
                self.fatal = True
        elif frame_type == 2:
            if len(data) < 26 or not MESSAGE_ID.fullmatch(data[10:26]) or data[8:10] == b"\x00\x00":
                outcome.problems.append(f"a malformed message frame (C-09, C-10): {readable(data, 200)}")
            else:
                self.messages_seen += 1
                self.last_message_id = data[10:26]
                if self.seen_ids is not None:
                    self.seen_ids.append(self.last_message_id)
        elif data not in RESPONSES:
            try:
                answer = json.loads(data)
            except ValueError:
                answer = None
            if not isinstance(answer, dict) or set(answer) != IDENTIFY_ANSWER_KEYS:
                outcome.problems.append(f"a response that nsqd never sends (ID-20): {readable(data, 300)}")
            else:
                self.answered_identify = True

    def _upgrade_from(self, answer: bytes) -> bool:
        document = json.loads(answer)
        if document["snappy"]:
            self.layer, self.decoder = "snappy", SnappyStreamDecoder()
        elif document["deflate"]:
            self.layer, self.decoder = "deflate", DeflateStreamDecoder()
        self.outcome.layer = self.layer
        return self.layer is not None


class _Discard:
    """Stands in for a decoder once the broker's stream is known broken: the problem is already reported."""

    def feed(self, data: bytes) -> bytes:
        return b""


class _Connection:
    """One session's socket, with a deadline for everything, and its inbound decoding."""

    def __init__(self, address: tuple[str, int], outcome: Outcome, deadline: float):
        self.outcome = outcome
        self.deadline = deadline
        self.sock = socket.create_connection(address, timeout=max(0.1, deadline - time.monotonic()))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.closed = False  # EOF or reset from the broker
        self.broken_pipe = False

    def send(self, data: bytes) -> None:
        if self.closed or self.broken_pipe:
            return
        try:
            self.sock.settimeout(max(0.01, self.deadline - time.monotonic()))
            self.sock.sendall(data)
        except TimeoutError:
            self.outcome.timed_out = True
            self.outcome.problems.append(f"the broker did not read what the client sent for {SESSION_TIMEOUT} s")
            self.broken_pipe = True
        except OSError:
            self.broken_pipe = True  # the broker closed; what it said is still to be read

    def half_close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the broker closed it first

    def receive(self, sink, until=lambda: False, wait: float | None = None) -> None:
        """Feed what arrives to `sink` until `until()`, EOF or reset, `wait` seconds, or the deadline."""
        stop = self.deadline if wait is None else min(self.deadline, time.monotonic() + wait)
        while not self.closed and not until():
            left = stop - time.monotonic()
            if left <= 0:
                if wait is None:
                    self.outcome.timed_out = True
                return
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                self.closed = self.outcome.reset = True
                return
            if not data:
                self.closed = self.outcome.closed_by_broker = True
                return
            sink(data)

    def drain(self, sink) -> None:
        """Whatever already arrived, without waiting."""
        if self.closed:
            return
        self.sock.settimeout(0)
        try:
            while data := self.sock.recv(65536):
                sink(data)
        except BlockingIOError:
            return
        except OSError:
            self.closed = self.outcome.reset = True
            return
        if not self.closed:
            self.closed = self.outcome.closed_by_broker = True

    def end(self, ending: str) -> None:
        try:
            if ending == "reset":
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.sock.close()
        except OSError:
            pass


class _Layer:
    """The client's side of the negotiated compression: every write compressed and flushed at once."""

    def __init__(self, kind: str):
        self._encoder = SnappyStreamEncoder() if kind == "snappy" else DeflateStreamEncoder(6)

    def encode(self, data: bytes) -> bytes:
        return self._encoder.encode(data)


def play(session: Session, tcp_address: tuple[str, int], http_address: tuple[str, int],
         seen_ids: deque | None = None) -> Outcome:
    """Play one session against the broker and check what it answered. `seen_ids`: message IDs the sessions of
    a run received, newest last, shared between them (FOREIGN_ID takes the newest)."""
    outcome = Outcome(session)
    deadline = time.monotonic() + SESSION_TIMEOUT
    try:
        if session.protocol == "http":
            _play_http(session, http_address, outcome, deadline)
        else:
            _play_tcp(session, tcp_address, outcome, deadline, seen_ids)
    except ConnectionRefusedError as error:
        outcome.problems.append(f"the broker refused the connection: {error}")
    except TimeoutError:
        outcome.problems.append("could not connect before the session's deadline")
    return outcome


def _pieces(data: bytes, cuts: tuple[float, ...]) -> list[bytes]:
    points = [0, *sorted({int(cut * len(data)) for cut in cuts}), len(data)]
    return [data[a:b] for a, b in zip(points, points[1:], strict=False) if b > a]


def _play_tcp(session: Session, address, outcome: Outcome, deadline: float, seen_ids) -> None:
    connection = _Connection(address, outcome, deadline)
    inbound = InboundFrames(outcome, seen_ids)
    layer: _Layer | None = None
    try:
        for step in session.steps:
            if connection.closed or connection.broken_pipe or inbound.fatal:
                break
            if isinstance(step, AwaitUpgrade):
                # The broker answers IDENTIFY before it reads on, but may first have many pipelined commands to
                # serve: writing through the new layer before its answer came would be garbage to it.
                connection.receive(inbound.feed, until=lambda: inbound.layer is not None or inbound.fatal)
                if outcome.timed_out:
                    outcome.problems.append(f"no upgrade after an IDENTIFY that asked for compression, within the "
                                            f"session's {SESSION_TIMEOUT} s (ID-30)")
                    break
                if inbound.layer is not None:
                    layer = _Layer(inbound.layer)
            elif isinstance(step, Pause):
                time.sleep(step.seconds)
            elif isinstance(step, AwaitMessage):
                seen = inbound.messages_seen
                connection.receive(inbound.feed, until=lambda seen=seen: inbound.messages_seen > seen or inbound.fatal,
                                   wait=MESSAGE_WAIT)
            else:
                connection.drain(inbound.feed)
                data = step.data
                if IN_FLIGHT_ID in data and inbound.last_message_id is not None:
                    data = data.replace(IN_FLIGHT_ID, inbound.last_message_id)
                if FOREIGN_ID in data and seen_ids:
                    data = data.replace(FOREIGN_ID, seen_ids[-1])
                outcome.sent.append(data)
                if layer is not None and not step.raw:
                    data = layer.encode(data)
                    if step.corrupt:
                        mutable = bytearray(data)
                        for fraction in step.corrupt:
                            mutable[int(fraction * len(mutable))] ^= 0x55
                        data = bytes(mutable)
                for number, piece in enumerate(_pieces(data, step.cuts)):
                    if number and step.pause:
                        time.sleep(step.pause)
                    connection.send(piece)
        ending = session.ending
        connection.drain(inbound.feed)
        closed_before_the_end = connection.closed or connection.broken_pipe
        if inbound.fatal or session.wrong_magic or connection.broken_pipe:
            ending = "read to the end"  # the broker must close: read until it does
        if ending in ("half-close", "read to the end") and not outcome.timed_out:
            if ending == "half-close":
                connection.half_close()
            connection.receive(inbound.feed)
            if outcome.timed_out:
                outcome.problems.append("the broker did not close the connection: "
                                        + ("after a fatal error (C-23)" if inbound.fatal else
                                           "after a wrong magic (C-02)" if session.wrong_magic else
                                           "after the client's half-close"))
        connection.end(session.ending)
    finally:
        connection.sock.close()
    # A reset may have destroyed frames the broker wrote (closing with unread input discards its send queue), so
    # what is missing is only judged on a stream that ended with a clean EOF.
    if session.expect_open and closed_before_the_end and outcome.closed_by_broker and not inbound.fatal:
        outcome.problems.append("the broker closed a connection that sent nothing wrong, without an error frame, "
                                "before the client ended it")
    if session.expect_open and outcome.closed_by_broker and session.ending == "half-close" and not inbound.fatal:
        responses = [b"{" if data.startswith(b"{") else data for frame_type, data in outcome.frames
                     if frame_type == 0 and data != b"_heartbeat_"]
        if responses != session.expected_responses:
            outcome.problems.append(f"responses {responses} to a session that expected {session.expected_responses} "
                                    "(C-13, C-22: every command answered, in order)")
    expected_for_magic = [(1, b"E_BAD_PROTOCOL")]
    if session.wrong_magic and (outcome.frames != expected_for_magic if outcome.closed_by_broker
                                else outcome.frames not in ([], expected_for_magic)):
        outcome.problems.append(f"a wrong magic answered with {outcome.frames} instead of E_BAD_PROTOCOL (C-02)")
    if inbound.buffer and outcome.closed_by_broker and not outcome.problems:
        outcome.problems.append(f"the broker closed in the middle of a frame: {readable(bytes(inbound.buffer), 200)}")


_STATUS_LINE = re.compile(rb"HTTP/1\.[01] (\d{3}) [^\r\n]*")


def _play_http(session: Session, address, outcome: Outcome, deadline: float) -> None:
    connection = _Connection(address, outcome, deadline)
    received = bytearray()
    try:
        step = session.steps[0]
        outcome.sent.append(step.data)
        for piece in _pieces(step.data, step.cuts):
            connection.send(piece)
        if session.ending == "half-close":
            connection.half_close()
            connection.receive(received.extend)
            if outcome.timed_out:
                outcome.problems.append("the broker did not close the HTTP connection after the client's half-close")
        else:
            connection.drain(received.extend)
        connection.end(session.ending)
    finally:
        connection.sock.close()
    check_http_responses(bytes(received), session, outcome)


def check_http_responses(data: bytes, session: Session, outcome: Outcome) -> None:
    heads = session.steps[0].data.count(b"HEAD ")
    position = 0
    while position < len(data):
        head_end = data.find(b"\r\n\r\n", position)
        if head_end < 0:
            if outcome.closed_by_broker:
                outcome.problems.append(f"an HTTP response cut short: {readable(data[position:], 300)}")
            return
        lines = data[position:head_end].split(b"\r\n")
        status = _STATUS_LINE.fullmatch(lines[0])
        if status is None:
            outcome.problems.append(f"a malformed HTTP status line: {readable(lines[0], 200)}")
            return
        headers = {}
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon:
                outcome.problems.append(f"a malformed HTTP header: {readable(line, 200)}")
                return
            headers[name.strip().lower()] = value.strip()
        code = int(status.group(1))
        outcome.http_statuses.append(code)
        if b"content-length" not in headers:
            if heads:  # Go sends no length, and no body, for HEAD
                heads -= 1
                position = head_end + 4
                continue
            outcome.problems.append(f"an HTTP {code} response without Content-Length")
            return
        length = int(headers[b"content-length"])
        body = data[head_end + 4:head_end + 4 + length]
        if len(body) < length:
            if outcome.closed_by_broker:
                outcome.problems.append(f"an HTTP {code} body cut short")
            return
        position = head_end + 4 + length
        if headers.get(b"content-type", b"").startswith(b"application/json") and code >= 400:
            try:
                message = json.loads(body)["message"]
            except (ValueError, KeyError, TypeError):
                outcome.problems.append(f"an HTTP {code} JSON error without a message: {readable(body, 200)}")
                continue
            outcome.http_messages.append(message)
            if message not in HTTP_ERROR_MESSAGES:
                outcome.problems.append(f"an HTTP error message not in Appendix B: {message!r}")
            if code == 500 and message != "INTERNAL_ERROR":
                outcome.problems.append(f"HTTP 500 with {message!r}")
        elif code >= 500 and code not in (501, 505):
            outcome.problems.append(f"HTTP {code}: {readable(body, 200)}")
