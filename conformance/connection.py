"""The suite's test connection: send bytes, expect frames with deadlines, record a transcript.

Every expectation goes through the case's :class:`~conformance.client.Verifier` and names the behaviour items it
judges (the error code is C-08's, a close after a fatal error C-23's): a difference raises
:class:`~conformance.client.Mismatch`, graded at those items' level; nsqd's wording of an error text after a correct
code is recorded and the case goes on (SHOULD, see ``plugin/verdicts.py``). A close or a silence where an answer was
due names the command sent and the answer expected.
"""

from __future__ import annotations

import json
import re
import socket
import ssl
import time
from collections import deque
from collections.abc import Callable

from conformance.client import Mismatch, TlsClient, Unsupported, Verifier, open_test_socket, setup_step
from conformance.transcript import CLIENT_TO_SERVER, SERVER_TO_CLIENT, Transcript
from nsq_protocol import monitors, wire
from nsq_protocol.monitors.events import MAGIC, SHORT_MAGIC, STREAM, UNFRAMED, UNREADABLE


class Closed(Exception):
    """The server closed the connection (EOF or reset)."""


class Connection:
    """One TCP connection to the target, speaking V2 with deadlines.

    Heartbeats are answered with NOP and skipped unless a case reads raw frames; message frames
    that arrive while a response is awaited are kept for later ``expect_message`` calls (C-13).
    """

    def __init__(self, name: str, address: tuple[str, int], transcript: Transcript, verifier: Verifier,
                 time_scale: float, send_magic: bool = True, tls: TlsClient = TlsClient(),
                 sections_under_test: frozenset[str] | None = None, unsupported_commands: dict[str, str] | None = None,
                 lowest_deflate_level: Callable[[], int] = lambda: 1):
        self.name = name
        # ID-11: a negotiated level is 1..9; before 1.1.0 (ID-44) a requested one is answered 0, stored blocks. Asked
        # only when deflate is negotiated: the case's release is asked about ID-11 then (Case.has), not on every connect
        self.lowest_deflate_level = lowest_deflate_level
        self.sections_under_test = sections_under_test  # None: every step is what the caller checks
        self.unsupported_commands = unsupported_commands or {}  # verb -> why the target lacks it (the profile)
        self.last_verb = "the magic"  # the last command sent, for a failure's cause
        self.last_command = "the magic"  # the same, as the transcript shows it, for a failure's message
        self._unanswered: deque[str] = deque()  # sent commands nsqd answers, oldest first (C-13: in order)
        self._answers: dict[int, str] = {}  # id(response or error frame) -> the command it answers
        self.tls = tls
        self.transcript = transcript
        self.verify = verifier
        self.time_scale = time_scale
        self.sock = open_test_socket(name, address, transcript, time_scale)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transcript.note(f"connected {self.sock.getsockname()[1]} -> {address[1]}", name)
        self.frames = wire.FrameDecoder(pause_at_upgrade=True)
        self.commands = wire.CommandDecoder()
        self.unreadable_sent = False  # the client's bytes became ones nsqd cannot read (the monitors were told)
        self.inbox: deque[wire.Frame] = deque()  # frames read but not yet consumed
        self.heartbeats = 0
        self.closed = False
        self._encoder = None
        self._decoder = None
        # An AUTH to send once TLS is up: a target that requires TLS refuses AUTH before it (T-07)
        self.auth_after_tls = b""
        if send_magic:
            self.send(wire.MAGIC_V2)

    # ---- sending -------------------------------------------------------------------------------
    def send(self, data: bytes) -> None:
        started = _COMMAND_START.findall(data)  # also the verb of a command sent a few bytes at a time
        for verb in started:
            if verb.decode("ascii") in self.unsupported_commands:
                raise Unsupported(self.unsupported_commands[verb.decode("ascii")])
        lines, commands, unreadable = self._describe_sent(data)
        described = [line for line in lines if not line.startswith(("(+", "MAGIC", "raw "))]
        if described:
            self.last_command = described[-1][:100]
        elif started:  # a command sent a few bytes at a time, or cut short
            self.last_command = f"{started[-1].decode('ascii')} ... {lines[-1][:80]}"
        verbs = [line.split(" ", 1)[0] for line in described] or [verb.decode("ascii") for verb in started[-1:]]
        self._unanswered.extend(verb for verb in verbs if verb in _ANSWERED)
        if verbs:
            self.last_verb = verbs[-1]
        on_wire = self._encoder.encode(data) if self._encoder else data
        at = self.transcript.wall_started + self.transcript.now()
        observed = [monitors.from_command(at, command) for command in commands]
        if unreadable is not None:
            observed.append(monitors.Observed(at, UNREADABLE, *unreadable))
        self.transcript.record(self.name, CLIENT_TO_SERVER, lines, on_wire, observed=tuple(observed))
        try:
            self.sock.sendall(on_wire)
        except OSError as exc:
            raise Mismatch("the connection accepts the client's bytes", "write succeeds",
                           f"write failed: {exc}") from exc

    def command(self, name: str, *params, body: bytes | None = None) -> None:
        self.send(wire.encode_command(name, *params, body=body))

    def _describe_sent(self, data: bytes) -> tuple[list[str], list[wire.Command], tuple[str, str] | None]:
        """The transcript's lines for ``data``, the commands it completed, and where and why its bytes are ones nsqd
        cannot read (the first time only: the monitors' UNREADABLE event, C-02, C-19)."""
        try:
            commands = self.commands.feed(data)
        except wire.ProtocolViolation as exc:
            unreadable = None
            if not self.unreadable_sent:
                self.unreadable_sent = True
                bad_magic = self.commands.magic != wire.MAGIC_V2
                unreadable = (MAGIC, repr(self.commands.magic)) if bad_magic else (STREAM, exc.reason)
            return [f"raw {data[:80]!r}{'...' if len(data) > 80 else ''} ({exc.reason})"], exc.commands or [], \
                unreadable
        lines = [command.describe() for command in commands]
        if self.commands.magic is not None and self.commands.offset <= 4 and data[:4] == self.commands.magic:
            lines.insert(0, f"MAGIC {self.commands.magic!r}")
        if self.commands.pending:
            lines.append(f"(+{self.commands.pending} bytes of an unfinished command)")
        return lines or [f"raw {data[:80]!r}"], commands, None

    def shutdown_write(self) -> None:
        self._ended()
        self.transcript.note("client half-closes (SHUT_WR)", self.name)
        self.sock.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        if not self.closed:
            self._ended()
            self.closed = True
            self.transcript.endpoints[self.name].closed_by_client = True
            self.transcript.note("client closes", self.name)
        self.sock.close()

    def _ended(self) -> None:
        """The client ends its side: within the magic, the monitors' SHORT_MAGIC event (C-03)."""
        cut = self.commands.partial_magic
        if cut is not None and not self.unreadable_sent:
            self.unreadable_sent = True
            at = self.transcript.wall_started + self.transcript.now()
            self.transcript.record(self.name, CLIENT_TO_SERVER, [f"MAGIC cut short {cut!r}"],
                                   observed=(monitors.Observed(at, UNREADABLE, SHORT_MAGIC, repr(cut)),))

    def start_tls(self, timeout: float) -> None:
        """Client side of the TLS upgrade right after the IDENTIFY response (ID-31), as ``self.tls`` says."""
        self.sock.settimeout(timeout * self.time_scale)
        try:
            self.sock = self.tls.context().wrap_socket(self.sock)
        except OSError as exc:  # ssl.SSLError included
            raise Mismatch("the TLS handshake after IDENTIFY succeeds (ID-31)", "a TLS session", str(exc)) from exc
        self.transcript.note(f"TLS established ({self.sock.version()})", self.name)

    def expect_tls_refused(self, what: str, timeout: float = 3.0) -> None:
        """The server refuses this side of the TLS upgrade (its certificate, its version): the handshake fails or,
        in TLS 1.3, where the client finishes its handshake before the server has judged its certificate, the
        first read does; either way the connection ends without the upgrade's OK (T-12, T-15, T-17)."""
        self.sock.settimeout(timeout * self.time_scale)
        try:
            self.sock = self.tls.context().wrap_socket(self.sock)
        except OSError as exc:  # ssl.SSLError included
            self._mark_closed(f"TLS handshake refused: {exc}")
            return
        self.transcript.note(f"client's side of the TLS handshake done ({self.sock.version()})", self.name)
        self.expect_close(timeout, what)

    def upgrade(self, kind: str, level: int = 6) -> None:
        """Switch both directions to deflate or snappy right after the IDENTIFY response (ID-30)."""
        if kind == "deflate":
            self._encoder, self._decoder = wire.DeflateStreamEncoder(level), wire.DeflateStreamDecoder()
        elif kind == "snappy":
            self._encoder = wire.SnappyStreamEncoder()
            self._decoder = wire.SnappyStreamDecoder(verify_checksums=True)
        else:
            raise ValueError(kind)
        self.transcript.note(f"upgrade to {kind}", self.name)

    # ---- receiving -----------------------------------------------------------------------------
    def _read_more(self, deadline: float) -> None:
        """Read once from the socket and decode; raises Closed on EOF/reset, TimeoutError at deadline."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(262144)
        except TimeoutError:
            raise TimeoutError from None
        except OSError as exc:  # reset counts as a close (C-19: "reset or EOF")
            self._mark_closed(f"connection reset ({exc.__class__.__name__})")
            raise Closed from exc
        if not data:
            self._mark_closed("server closed the connection (EOF)")
            raise Closed
        self._decode(data, data)

    def _decode(self, data: bytes, on_wire: bytes) -> None:
        """Frames from ``data`` (through the compression layer, if any) into the inbox; ``on_wire`` is what the
        transcript keeps of it (nothing for the bytes after a switch point: recorded when they arrived)."""
        try:
            plain = self._decoder.feed(data) if self._decoder else data
        except wire.ProtocolViolation as exc:  # ID-33, ID-34: what the agreed layer carries must decode
            self.transcript.record(self.name, SERVER_TO_CLIENT, [f"UNDECODABLE in the compression layer: {exc}"],
                                   on_wire)
            raise Mismatch("the server's bytes decode in the agreed compression layer (ID-33, ID-34)",
                           "a valid deflate or snappy stream", str(exc), f"undecodable compression after "
                           f"{self.last_verb}") from exc
        try:
            frames = self.frames.feed(plain)
        except wire.ProtocolViolation as exc:
            at = self.transcript.wall_started + self.transcript.now()
            # the monitors read the frames before it, then why the rest is no frame (C-06)
            observed = (*(monitors.from_frame(at, frame) for frame in exc.frames),
                        monitors.Observed(at, UNFRAMED, text=exc.reason))
            self.transcript.record(self.name, SERVER_TO_CLIENT,
                                   [frame.describe() for frame in exc.frames] + [f"UNDECODABLE: {exc}"], on_wire,
                                   observed=observed)
            raise Mismatch("every frame is [size][type][data] with a known type (C-06, C-07)",
                           "decodable frames", str(exc)) from exc
        lines = [frame.describe() for frame in frames] or [f"({len(plain)} bytes of a partial frame)"]
        if self.frames.paused:
            lines.append("(protocol switch: the bytes after it belong to the new layer)")
        json_data = {index: frame.data for index, frame in enumerate(frames)
                     if frame.frame_type == wire.FRAME_RESPONSE and frame.data[:1] == b"{"}
        at = self.transcript.wall_started + self.transcript.now()
        self.transcript.record(self.name, SERVER_TO_CLIENT, lines, on_wire, json_data,
                               tuple(monitors.from_frame(at, frame) for frame in frames))
        for frame in frames:
            if frame.is_heartbeat:
                self.heartbeats += 1
            elif frame.frame_type in (wire.FRAME_RESPONSE, wire.FRAME_ERROR) and self._unanswered:
                self._answers[id(frame)] = self._unanswered.popleft()
        self.inbox.extend(frames)

    def _mark_closed(self, how: str) -> None:
        if not self.closed:
            self.closed = True
            self.transcript.endpoints[self.name].closed_by_server = True
            self.transcript.note(how, self.name)

    def raw_frame(self, timeout: float = 3.0) -> wire.Frame:
        """The next frame of any kind, heartbeats included."""
        deadline = time.monotonic() + timeout * self.time_scale
        while not self.inbox:
            try:
                self._read_more(deadline)
            except (TimeoutError, Closed) as ended:
                raise self._no_answer(ended, "a frame", timeout) from None
        return self.inbox.popleft()

    def next_frame(self, timeout: float = 3.0, kinds=(wire.FRAME_RESPONSE, wire.FRAME_ERROR),
                   expected: str = "") -> wire.Frame:
        """The next frame of one of ``kinds``, answering heartbeats with NOP; other frames stay queued. A close or
        a silence instead is a Mismatch naming the command sent and the ``expected`` answer (default: the kinds)."""
        deadline = time.monotonic() + timeout * self.time_scale
        while True:
            for frame in list(self.inbox):
                if frame.is_heartbeat:
                    self.inbox.remove(frame)
                    self.command("NOP")
                elif frame.frame_type in kinds:
                    self.inbox.remove(frame)
                    return frame
            try:
                self._read_more(deadline)
            except (TimeoutError, Closed) as ended:
                wanted = "/".join(wire.FRAME_TYPE_NAMES[kind] for kind in kinds)
                raise self._no_answer(ended, expected or f"a {wanted} frame", timeout, kinds) from None

    def _no_answer(self, ended: Exception, expected: str, timeout: float, kinds=(wire.FRAME_RESPONSE,
                                                                                   wire.FRAME_ERROR)) -> Mismatch:
        """The server closed the connection, or stayed silent, where ``expected`` was due: what was sent last, what
        was expected, what came."""
        if isinstance(ended, Closed):
            return Mismatch(f"{expected} after {self.last_command}", expected, "the server closed the connection",
                            self._closed_cause())
        return Mismatch(f"{expected} after {self.last_command}", f"{expected} within {timeout * self.time_scale:.1f} s",
                        "nothing arrived", self._silent(kinds))

    def _cause(self, frame: wire.Frame, due: str) -> str:
        """An unexpected frame as a failure's cause: what it is, and what it answered. An E_TOPIC_NOT_EXIST reads
        as what it means, from the answer ``due`` instead: where an OK was due the broker does not create topics,
        where another error was, it looks the topic up before that check (E_BAD_TOPIC: before the name's)."""
        answered = self._answers.get(id(frame), self.last_verb)
        if frame.frame_type == wire.FRAME_ERROR and frame.error_code == "E_TOPIC_NOT_EXIST" and \
                answered in _NAMES_A_TOPIC:
            if due.startswith("ERROR E_BAD_TOPIC"):
                return f"{answered} does not check topic names (E_TOPIC_NOT_EXIST where E_BAD_TOPIC was due)"
            if due.startswith("ERROR"):
                return f"{answered} looks the topic up first (E_TOPIC_NOT_EXIST where {due.split()[1]} was due)"
            if due.startswith(("RESPONSE", "MESSAGE")):
                return f"{answered} does not create topics (E_TOPIC_NOT_EXIST)"
        if frame.frame_type == wire.FRAME_ERROR:
            what = frame.error_code or "an error frame without a code"
        elif frame.frame_type == wire.FRAME_RESPONSE:
            what = f"RESPONSE {_preview_text(frame.data)}"
        else:
            what = wire.FRAME_TYPE_NAMES.get(frame.frame_type, f"frame type {frame.frame_type}").upper()
        return f"{what} on {answered}"

    def _silent(self, kinds=(wire.FRAME_RESPONSE, wire.FRAME_ERROR)) -> str:
        if wire.FRAME_MESSAGE in kinds:
            return f"no message after {self.last_verb}"
        return f"no answer to {self._unanswered[0] if self._unanswered else self.last_verb}"

    def _closed_cause(self) -> str:
        return f"connection closed after {self.last_verb}"

    def expect_response(self, data: bytes, timeout: float = 3.0) -> None:
        due = _summary(wire.Frame(wire.FRAME_RESPONSE, data))
        frame = self.next_frame(timeout, expected=due)
        if frame.frame_type != wire.FRAME_RESPONSE or frame.data != data:
            raise Mismatch("response frame", due, _summary(frame), self._cause(frame, due))

    def expect_json_response(self, timeout: float = 3.0) -> dict:
        frame = self.next_frame(timeout, expected="RESPONSE {...}")
        if frame.frame_type != wire.FRAME_RESPONSE or not frame.data.startswith(b"{"):
            raise Mismatch("response frame with a JSON object", "RESPONSE {...}", _summary(frame),
                           self._cause(frame, "RESPONSE {...}"))
        try:
            return json.loads(frame.data)
        except ValueError as exc:
            raise Mismatch("the response is valid JSON", "JSON", f"{frame.data!r}: {exc}",
                           f"invalid JSON on {self.last_verb}") from exc

    def expect_error(self, code: str, text: str | None = None, fatal: bool = True, timeout: float = 3.0,
                     judges: str = "") -> None:
        """An error frame with ``code`` (C-08); ``text`` is nsqd's exact wording (SHOULD, soft), unless it tells
        which check failed, when the case names the items that text ``judges`` (ID-08: which field IDENTIFY
        validates first); fatal errors are followed by a close with no further frame (C-23)."""
        due = f"ERROR {code} {text or '...'}"
        frame = self.next_frame(timeout, expected=due)
        if frame.frame_type != wire.FRAME_ERROR or frame.error_code != code:
            raise Mismatch(f"error frame with the right code after {self.last_command}", f"ERROR {code} ...",
                           _summary(frame), self._cause(frame, due), judges="C-08")
        if text is not None and judges:
            self.verify.soft_equal("error text: the check that failed", f"{code} {text}",
                                   frame.data.decode("utf-8", "replace"), judges)
        elif text is not None:
            self.verify.wording("error text as nsqd words it", f"{code} {text}", frame.data.decode("utf-8", "replace"))
        if fatal:
            self.expect_close(what="a fatal error is followed by a close", judges="C-23")
        else:
            self.expect_open()

    def expect_message(self, body: bytes | None = None, attempts: int | None = None,
                       timeout: float = 3.0) -> wire.Frame:
        frame = self.next_frame(timeout, kinds=(wire.FRAME_MESSAGE, wire.FRAME_ERROR),
                                expected="MESSAGE" + (f" body={body[:40]!r}" if body is not None else ""))
        if frame.frame_type != wire.FRAME_MESSAGE:
            raise Mismatch("a message frame arrives", "MESSAGE", _summary(frame), self._cause(frame, "MESSAGE"))
        if body is not None:
            self.verify.equal("message body", body, frame.body)
        if attempts is not None:
            self.verify.equal("message attempts (C-12)", attempts, frame.attempts)
        return frame

    def expect_messages(self, count: int, timeout: float = 3.0) -> list[wire.Frame]:
        return [self.expect_message(timeout=timeout) for _ in range(count)]

    def expect_close(self, within: float = 3.0, what: str = "the server closes the connection",
                     judges: str = "") -> None:
        deadline = time.monotonic() + within * self.time_scale
        while True:
            unexpected = [frame for frame in self.inbox if not frame.is_heartbeat]
            if unexpected:
                raise Mismatch(what + " with no further frame (C-25)", "close", _summary(unexpected[0]),
                               self._cause(unexpected[0], "a close"), judges)
            self.inbox.clear()
            try:
                self._read_more(deadline)
            except Closed:
                return
            except TimeoutError:
                raise Mismatch(f"{what} after {self.last_command}", f"close within {within * self.time_scale:.1f} s",
                               "connection still open", f"connection left open after {self.last_verb}",
                               judges) from None

    def expect_silence(self, seconds: float, what: str = "nothing arrives and the connection stays open",
                       judges: str = "") -> None:
        """No response, error or message frame for ``seconds``; heartbeats are answered."""
        deadline = time.monotonic() + seconds * self.time_scale
        while True:
            for frame in list(self.inbox):
                if frame.is_heartbeat:
                    self.inbox.remove(frame)
                    self.command("NOP")
                else:
                    raise Mismatch(what, "silence", _summary(frame), self._cause(frame, "silence"), judges)
            try:
                self._read_more(deadline)
            except TimeoutError:
                return
            except Closed:
                raise Mismatch(what, "connection open", f"the server closed the connection after {self.last_command}",
                               self._closed_cause(), judges) from None

    def poll(self, seconds: float) -> list[wire.Frame]:
        """Whatever response/error/message frames arrive within ``seconds`` (heartbeats answered);
        raises Mismatch if the server closes the connection."""
        deadline = time.monotonic() + seconds * self.time_scale
        while not any(not frame.is_heartbeat for frame in self.inbox):
            try:
                self._read_more(deadline)
            except TimeoutError:
                break
            except Closed:
                raise Mismatch("the connection stays open", "open",
                               f"the server closed the connection after {self.last_command}",
                               self._closed_cause()) from None
        frames = []
        for frame in list(self.inbox):
            self.inbox.remove(frame)
            if frame.is_heartbeat:
                self.command("NOP")
            else:
                frames.append(frame)
        return frames

    def expect_open(self) -> None:
        """Prove the connection is still usable: NOP is silent (P-NOP-01), so a round trip of an
        invalid-free command is needed; a FIN of an unknown ID answers non-fatally only when
        subscribed, so the probe is a silence window instead."""
        self.expect_silence(0.2, what="the connection stays open after a non-fatal error", judges="C-23")

    # ---- compound helpers ----------------------------------------------------------------------
    def identify(self, fields: dict, timeout: float = 3.0, upgrade: bool = True) -> dict | None:
        """IDENTIFY; with feature_negotiation returns the JSON response and, when the server agreed to TLS,
        deflate or snappy, switches this connection to it and expects the upgrade's OK (ID-30), unless
        ``upgrade`` is False (the case then checks the upgrade itself). A setup step in cases that do not
        check IDENTIFY itself."""
        with setup_step("IDENTIFY", self.sections_under_test):
            return self._identify(fields, timeout, upgrade)

    def _identify(self, fields: dict, timeout: float, upgrade: bool) -> dict | None:
        body = wire.identify_body(fields)
        self.command("IDENTIFY", body=body)
        if not {key.lower(): value for key, value in fields.items()}.get("feature_negotiation"):
            self.expect_response(b"OK", timeout)  # keys match case-insensitively, as in Go
            return None
        response = self.expect_json_response(timeout)  # the frame decoder pauses right after it (ID-30)
        if not upgrade or not self.frames.paused:  # not paused: the server agreed to no layer
            return response
        for layer in wire.upgrades(response):  # TLS first, then compression, an OK after each
            trailing = self.frames.take_trailing_data()
            if layer == "tls_v1":
                self.verify.equal("bytes between the IDENTIFY response and the client's TLS handshake (ID-31)",
                                  b"", trailing)
                self.start_tls(timeout)
            else:
                level = negotiated_deflate_level(response, self.lowest_deflate_level()) if layer == "deflate" else 6
                self.upgrade(layer, level)
                self._decode(trailing, b"")
            self.expect_response(b"OK", timeout)
        if self.auth_after_tls and isinstance(self.sock, ssl.SSLSocket):
            with setup_step("AUTH", self.sections_under_test):
                self.send(self.auth_after_tls)
                self.expect_json_response(timeout)
            self.auth_after_tls = b""
        return response

    def subscribe(self, topic: str, channel: str, ready: int | None = None) -> None:
        with setup_step("SUB", self.sections_under_test):
            self.command("SUB", topic, channel)
            self.expect_response(b"OK")
        if ready is not None:
            self.command("RDY", ready)

    def publish(self, topic: str, body: bytes) -> None:
        with setup_step("PUB", self.sections_under_test):
            self.command("PUB", topic, body=body)
            self.expect_response(b"OK")


def negotiated_deflate_level(response: dict, lowest: int = 1) -> int:
    """The deflate level an IDENTIFY response agreed to (ID-11: ``lowest``..9, 6 when absent), checked before the
    connection's compressor takes it: anything else is the broker's answer that is wrong."""
    level = response.get("deflate_level", 6)
    if type(level) is not int or not lowest <= level <= 9:
        raise Mismatch("the IDENTIFY response's deflate_level is a level the stream can use (ID-11)",
                       f"an integer {lowest}..9", repr(level), f"deflate_level {level!r} in the IDENTIFY response")
    return level


# What nsqd answers with a frame of its own (a RESPONSE or an ERROR) in command order; the rest answer only an error.
_ANSWERED = frozenset({"IDENTIFY", "AUTH", "SUB", "PUB", "MPUB", "DPUB", "CLS"})
_NAMES_A_TOPIC = frozenset({"PUB", "MPUB", "DPUB", "SUB"})  # the verbs whose E_TOPIC_NOT_EXIST says what it means
_COMMAND_START = re.compile(rb"(?:^|\n)([A-Z_]{2,16})(?=[ \n])")


def _summary(frame: wire.Frame) -> str:
    return frame.describe()


def _preview_text(data: bytes, limit: int = 24) -> str:
    text = data[:limit].decode("utf-8", "replace")
    return repr(text + ("..." if len(data) > limit else ""))
