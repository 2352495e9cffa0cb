"""What a monitor is told: one connection's traffic as events, the same whether they come from a live suite case
(the codec's ``Command`` and ``Frame`` records, ``from_command`` / ``from_frame``) or from a capture's decoded
rows (spark_analysis builds them from its columns). Times are seconds since the epoch, the capture's or the
suite's clock; a message's own timestamp (C-09) is the broker's."""

from __future__ import annotations

import json
import zlib
from typing import NamedTuple

from nsq_protocol import wire

CLIENT, BROKER = "client", "broker"  # who sent an event, and who broke a rule

COMMAND, RESPONSE, ERROR, MESSAGE, HEARTBEAT = "command", "response", "error", "message", "heartbeat"
JSON = "json"  # a response's name when its data is a JSON object (the IDENTIFY answer, ID-09)
# a frame's text when a capture shows it sent in plaintext where the TLS handshake belonged (ID-30); what goes
# through TLS a capture does not show
OUTSIDE_TLS = "in plaintext where TLS was negotiated"
# bytes from the client that are no V2 command: its ``name`` says where (MAGIC, a layer of UPGRADES' names, or
# STREAM for the plain command stream), its ``text`` what was wrong; nsqd ends the connection on them (C-02, C-21).
# SHORT_MAGIC: the client ended its side within the four magic bytes (its ``text``: those it sent), at its end (C-03)
UNREADABLE = "unreadable"
MAGIC, STREAM, SHORT_MAGIC = "magic", "stream", "short magic"
# nsqlookupd's bytes that are no [4-byte size][data] reply (L-TCP-02), nsqd's that are no [size][type][data] frame
# (C-06): its ``text`` says why
UNFRAMED = "unframed"
EVERY_KIND = frozenset({COMMAND, RESPONSE, ERROR, MESSAGE, HEARTBEAT, UNREADABLE, UNFRAMED})

# why a rule is not judged on a message the judge let go of (judge.MESSAGES_KEPT)
LET_GO = "the judge let go of what it knew of messages no longer in flight (its memory bound)"

# errors after which the connection stays usable; every other error is fatal (C-23)
NON_FATAL_ERRORS = frozenset({"E_FIN_FAILED", "E_REQ_FAILED", "E_TOUCH_FAILED"})


class Observed(NamedTuple):
    """One command (a ``COMMAND``, ``name`` its verb), one frame (``RESPONSE``, ``ERROR``, ``MESSAGE``,
    ``HEARTBEAT``) or the client's ``UNREADABLE`` bytes of a V2 connection."""

    ts: float
    kind: str
    name: str = ""  # the verb; a response's text (or JSON); an error's code
    text: str = ""  # an error's description; an unparsable parameter as sent
    msg_id: str | None = None  # message frames; FIN, REQ, TOUCH; the ID an E_FIN_FAILED, ... names
    attempts: int | None = None  # message frames (C-12)
    number: int | None = None  # RDY's count (P-RDY-05), REQ's and DPUB's delay in ms, MPUB's message count,
    # AUTH's body size
    topic: str | None = None  # SUB, PUB, MPUB, DPUB
    channel: str | None = None  # SUB
    bodies: tuple[int, ...] = ()  # body_hash of a message frame's body, of each body a publish carries
    fields: dict | None = None  # IDENTIFY's JSON body; the JSON answer (None: it is not all in the traffic)
    msg_ts_ns: int | None = None  # message frames: the publish time the broker wrote in them (C-09)
    params: int | None = None  # commands: the parameters on the line as nsqd splits it (C-17); None: not shown
    crlf: bool | None = None  # commands: the line ended in CRLF (C-14); None: not shown
    # MPUB: the size its 4-byte word declares where that is not the size of the body its count and sizes frame
    # (P-MPUB-04); None: they agree, or the traffic does not show the word (the codec's Command keeps no word)
    size: int | None = None

    @property
    def sender(self) -> str:
        return CLIENT if self.kind in (COMMAND, UNREADABLE) else BROKER

    def describe(self) -> str:
        """One line for a violation's evidence."""
        parts = [self.name if self.kind in (COMMAND, ERROR) else self.kind]
        if self.kind == UNREADABLE:
            parts.append(self.name)
        if self.kind == RESPONSE:
            parts.append(self.name[:60])
        for label, value in (("topic", self.topic), ("channel", self.channel), ("id", self.msg_id),
                             ("attempts", self.attempts), ("n", self.number), ("size", self.size)):
            if value is not None:
                parts.append(f"{label}={value}")
        if self.text:
            parts.append(self.text[:80])
        return f"{'>' if self.sender == CLIENT else '<'} " + " ".join(str(part) for part in parts)


# the runs a judge takes whole (Run.key): a connection's consecutive message frames, or its consecutive FINs
MESSAGES, FINS = MESSAGE, "FIN"


class Run(NamedTuple):
    """A capture's bulk at once: consecutive message frames (``MESSAGES``), or consecutive FINs (``FINS``), of one
    connection, no message ID twice among them. ``events()`` are the same events one by one; a monitor that takes
    runs (Monitor.RUNS) reads the columns, and judges them exactly as it would the events."""

    key: str  # MESSAGES or FINS
    ts: list[float]
    msg_ids: list[str]
    attempts: list[int | None]  # message frames (C-12); FINs: empty
    bodies: list[int]  # message frames: each one's body_hash; FINs: empty
    msg_ts_ns: list[int | None]  # message frames (C-09); FINs: empty
    params: int | None = None  # FINs: the parameters on each line (C-17), the same for all
    crlf: bool | None = None  # FINs: each line ended in CRLF (C-14), the same for all
    topic: str | None = None  # FINs: the topic the capture's decoder names for each (its subscription's), for all

    @classmethod
    def of(cls, events: list[Observed]) -> Run:
        """The run of ``events``: one connection's consecutive message frames, or FINs of one line shape and topic,
        no ID twice."""
        first = events[0]
        ts, ids = [event.ts for event in events], [event.msg_id for event in events]
        if first.kind == MESSAGE:
            return cls(MESSAGES, ts, ids, [event.attempts for event in events], [event.bodies[0] for event in events],
                       [event.msg_ts_ns for event in events])
        return cls(FINS, ts, ids, [], [], [], first.params, first.crlf, first.topic)

    def events(self):
        if self.key == FINS:
            return (Observed(ts, COMMAND, FINS, msg_id=msg_id, topic=self.topic, params=self.params, crlf=self.crlf)
                    for ts, msg_id in zip(self.ts, self.msg_ids, strict=True))
        return (Observed(ts, MESSAGE, msg_id=msg_id, attempts=attempts, msg_ts_ns=msg_ts_ns, bodies=(body,))
                for ts, msg_id, attempts, body, msg_ts_ns
                in zip(self.ts, self.msg_ids, self.attempts, self.bodies, self.msg_ts_ns, strict=True))


def failed_id(text: str) -> str | None:
    """The message ID an E_FIN_FAILED, E_REQ_FAILED or E_TOUCH_FAILED names: '<VERB> <id> failed ...' (P-FIN-04,
    P-REQ-06, P-TOUCH-03)."""
    parts = text.split(" ")
    return parts[1] if len(parts) > 2 else None


def body_hash(body: bytes) -> int:
    """crc32 and adler32 of a body in one signed 64-bit integer: what joins a publish with its deliveries (the
    trace analysis computes the same in bulk)."""
    value = (zlib.crc32(body) << 32) | zlib.adler32(body)
    return value - (1 << 64) if value >= 1 << 63 else value


def _text(value: bytes) -> str:
    return value.decode("utf-8", "surrogateescape")


def _unsigned(value: bytes) -> int | None:
    return int(value) if value.isdigit() else None


def _json_object(data: bytes | None) -> dict | None:
    try:
        value = json.loads(data) if data else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def from_command(ts: float, command: wire.Command) -> Observed:
    """``command`` as the monitors read it, with its line's shape: how many parameters, and whether it ended in CRLF
    (``_event`` reads the rest)."""
    return _event(ts, command)._replace(params=len(command.params), crlf=command.crlf)


def _event(ts: float, command: wire.Command) -> Observed:
    verb, params = _text(command.name), command.params
    first = _text(params[0]) if params else None
    if verb == "SUB":
        return Observed(ts, COMMAND, verb, topic=first, channel=_text(params[1]) if len(params) > 1 else None)
    if verb in ("FIN", "TOUCH"):
        return Observed(ts, COMMAND, verb, msg_id=first)
    if verb == "REQ":
        delay = params[1] if len(params) > 1 else None
        number = None if delay is None else 0 if delay == b"" else _unsigned(delay)  # P-REQ-04: empty is 0
        # an unparsable delay as sent (P-REQ-04); none at all is P-REQ-02's
        return Observed(ts, COMMAND, verb, msg_id=first, number=number,
                        text=_text(delay) if delay is not None and number is None else "")
    if verb == "RDY":
        # P-RDY-05: RDY alone means 1, "RDY " (an empty count) 0
        count = 1 if not params else (0 if params[0] == b"" else _unsigned(params[0]))
        return Observed(ts, COMMAND, verb, number=count, text="" if count is not None else first)
    if verb in ("PUB", "DPUB"):
        delay = _unsigned(params[1]) if verb == "DPUB" and len(params) > 1 else None
        bodies = (body_hash(command.body),) if command.body is not None else ()
        return Observed(ts, COMMAND, verb, topic=first, number=delay, bodies=bodies)
    if verb == "MPUB":
        try:
            messages = command.messages
        except (AttributeError, wire.ProtocolViolation):
            return Observed(ts, COMMAND, verb, topic=first)
        return Observed(ts, COMMAND, verb, topic=first, number=len(messages),
                        bodies=tuple(body_hash(message) for message in messages))
    if verb == "IDENTIFY":
        return Observed(ts, COMMAND, verb, fields=_json_object(command.body))
    if verb == "AUTH" and command.body is not None:  # P-AUTH-03: its body's size
        return Observed(ts, COMMAND, verb, number=len(command.body))
    return Observed(ts, COMMAND, verb)


def from_frame(ts: float, frame: wire.Frame) -> Observed:
    if frame.frame_type == wire.FRAME_MESSAGE:
        if len(frame.data) < wire.MESSAGE_HEADER_SIZE:  # C-09: too short to be a message
            return Observed(ts, MESSAGE, text=f"message frame of {len(frame.data)} bytes")
        return Observed(ts, MESSAGE, msg_id=frame.id_text, attempts=frame.attempts, msg_ts_ns=frame.timestamp,
                        bodies=(body_hash(frame.body),))
    if frame.frame_type == wire.FRAME_ERROR:
        code, text = frame.error_code or "", frame.error_text or ""
        return Observed(ts, ERROR, code, text, msg_id=failed_id(text) if code in NON_FATAL_ERRORS else None)
    if frame.is_heartbeat:
        return Observed(ts, HEARTBEAT)
    fields = _json_object(frame.data) if frame.data[:1] == b"{" else None
    if fields is not None:
        return Observed(ts, RESPONSE, JSON, fields=fields)
    return Observed(ts, RESPONSE, _text(frame.data))  # data that is no JSON object is no JSON answer
