"""Hostile sessions against a running broker: a seeded, grammar-aware generator of TCP and HTTP sessions, a
runner that plays many of them at once against one broker, and what nsqd keeps true whatever a peer sends.

Shared by tests/broker/test_fuzz.py (10,000 sessions in CI, plus a hypothesis test that shrinks) and
benchmarks/broker_fuzz.py (`tox -e fuzz`, 100,000 sessions). Session `i` of seed `s` is drawn from its own
`random.Random(f"{s}:{i}")`, so any one session is generated again alone, whatever ran beside it.

A TCP session is the magic (sometimes wrong or short), then commands drawn for the state the generator
expects the connection to be in (INIT, identified, upgraded to snappy or deflate, subscribed, closing), some
of them mutated (truncated, lying sizes, flipped bytes, overlong lines, garbage, bad names, huge numbers, odd
JSON), written pipelined or split at odd boundaries, through the negotiated compression once the broker says
it upgraded; it ends with a half-close, a close, or a reset (SO_LINGER 0). An HTTP session is one to three
requests, well-formed or not, against the nsqd HTTP API.

Per session, what nsqd always does (IDs are the behaviour catalogue's):
  - every frame is [size][type][data] with type 0, 1 or 2 and a sane size (C-06, C-07); a message frame has
    a 26-byte header and a 16-hex ID (C-09, C-10); the compressed stream decodes (ID-33, ID-34);
  - a response is OK, CLOSE_WAIT, _heartbeat_ or IDENTIFY's JSON document (ID-20);
  - every error frame is one of Appendix A's strings;
  - a fatal error frame is the last response or error frame, and the broker closes the connection (C-23);
  - a wrong magic gets exactly E_BAD_PROTOCOL and a close (C-02);
  - a half-closed connection is closed by the broker (EOF ends nsqd's I/O loop);
  - a session that gave nsqd none of its reasons to close silently (C-25) is not closed before it ends;
  - an HTTP response is well-formed, and an error carries one of Appendix B's messages.
And of the broker after all sessions (`check_health`): no traceback in its stderr, /ping answers within 1 s, a
fresh client can PUB, SUB, RDY, receive and FIN, the peak RSS is bounded, and its threads are back to the
baseline (no connection thread left, no pump of a deleted topic).
"""
from __future__ import annotations

import json
import random
import re
import socket
import struct
import threading
import time
import urllib.request
from collections import Counter, deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from conformance.wire import (
    DeflateStreamDecoder,
    DeflateStreamEncoder,
    ProtocolViolation,
    SnappyStreamDecoder,
    SnappyStreamEncoder,
)

# -- the broker under fuzz ------------------------------------------------------------------------------------

MAX_MSG_SIZE = 8192
MAX_BODY_SIZE = 65536
MAX_RDY_COUNT = 2500  # nsqd's default
# Small limits make "just under" and "just over" cheap to send; a small memory queue sends the backlog that
# sessions leave behind through the disk queue; a short message timeout requeues what gone consumers held (nsqd
# keeps it in flight until then, D-15) and redelivers it to later sessions. So the broker's memory stays flat.
BROKER_FLAGS = (f"--max-msg-size={MAX_MSG_SIZE}", f"--max-body-size={MAX_BODY_SIZE}", "--mem-queue-size=100",
                "--msg-timeout=5s")

# Seconds: a session that has not ended by then is reported. Sessions take milliseconds; a burst of 400 PUBs
# through the disk queue took over 5 s on a machine loaded far past its 2 cores.
SESSION_TIMEOUT = 10.0
MESSAGE_WAIT = 0.5  # for a message whose ID the next FIN/REQ/TOUCH uses

TOPICS = (b"fz0", b"fz1", b"fz.2", b"fz_3", b"fz4#ephemeral", b"..", b"n" * 64)
CHANNELS = (b"c0", b"c1", b"c-2", b"c3#ephemeral")
INVALID_NAMES = (b"", b"a" * 65, b"t*", b"t#ephemeral#ephemeral", b"#ephemeral", b"fz0#ephemeralx", b"\xff\xfe",
                 b"t\x00", b"t\t", b"caf\xc3\xa9", b"t/c", b"%41", b"t\r", b"fz0:c0")
# Parameters where a count or a duration goes: valid, boundary, negative, signed, hex, past int64 and uint64,
# and longer than int() converts at once.
NUMBERS = (b"0", b"1", b"1", b"2", b"5", b"100", b"2500", b"2501", b"1000", b"3600000", b"3600001", b"-1", b"",
           b"+1", b"1.5", b"0x10", b"1e3", b"4294967296", b"9223372036854775807", b"9223372036854775808",
           b"18446744073709551615", b"18446744073709551616", b"9" * 40, b"1234567890" * 500, b"\xff", b"\xd9\xa3")
# A 4-byte size that lies: zero, negative as int32, just past the limits, absurd.
LYING_SIZES = (0, 0xFFFFFFFF, 0x80000000, 0x7FFFFFFF, MAX_MSG_SIZE + 1, MAX_BODY_SIZE + 1, 1 << 30, 3)
IN_FLIGHT_ID = b"<<IN-FLIGHT-ID>>"  # 16 bytes: replaced by the ID of the last message received, when there is one
FOREIGN_ID = b"<<FOREIGN--ID>>>"  # 16 bytes: replaced by the ID of a message another session received lately
MADE_UP_IDS = (b"0000000000000000", b"ffffffffffffffff", b"0123456789abcdef", b"\x00" * 16, b"GGGGGGGGGGGGGGGG")

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

# -- sessions ---------------------------------------------------------------------------------------------------


@dataclass
class Write:
    """Bytes for the broker, through the connection's current compression layer unless `raw`. `cuts` split
    them into separate sends (fractions of the length, so they also apply to the compressed form); `corrupt`
    flips the compressed bytes at these fractions."""

    data: bytes
    note: str
    cuts: tuple[float, ...] = ()
    pause: float = 0.0  # between the pieces
    raw: bool = False
    corrupt: tuple[float, ...] = ()


@dataclass
class AwaitUpgrade:
    """Read until IDENTIFY's answer, then write through the layer it names (ID-30)."""

    note: str = "await IDENTIFY's answer"


@dataclass
class AwaitMessage:
    """Read until a message arrives (bounded); its ID replaces IN_FLIGHT_ID in later writes."""

    note: str = "await a message"


@dataclass
class Pause:
    """Nothing sent for a while: past a 1 s heartbeat interval, past its 2 s read deadline (C-29)."""

    seconds: float

    @property
    def note(self) -> str:
        return f"pause {self.seconds} s"


@dataclass
class Session:
    seed: int | str
    index: int
    protocol: str  # "tcp" or "http"
    steps: list = field(default_factory=list)
    ending: str = "half-close"  # or "close", "reset"
    wrong_magic: bool = False
    # Nothing in the session lets nsqd close the connection without a fatal error frame before the client ends
    # it: no desynchronising mutation, overlong line, broken compressed stream, pause past a read deadline, and
    # no topic that HTTP sessions delete (C-25 lists nsqd's reasons to close silently).
    expect_open: bool = False
    # When expect_open: the responses, in order, to a session the broker serves to the end without a fatal error
    # (OK, CLOSE_WAIT, and "{" for IDENTIFY's JSON; heartbeats aside). Nothing a client sent goes unanswered.
    expected_responses: list[bytes] = field(default_factory=list)

    def describe(self) -> str:
        lines = [f"session {self.index} of seed {self.seed}: {self.protocol}, ending {self.ending}"]
        for step in self.steps:
            if isinstance(step, Write):
                extras = [f"cuts={[round(c, 3) for c in step.cuts]}"] if step.cuts else []
                extras += ["raw (not through the compression layer)"] if step.raw else []
                extras += [f"compressed bytes flipped at {[round(c, 3) for c in step.corrupt]}"] if step.corrupt else []
                extra = f" ({', '.join(extras)})" if extras else ""
                lines.append(f"  write {len(step.data)} bytes: {step.note}{extra}")
                lines.append(f"    {readable(step.data)}")
            else:
                lines.append(f"  {step.note}")
        return "\n".join(lines)


def readable(data: bytes, limit: int = 600) -> str:
    """Bytes as a Python literal, long runs of one byte folded, cut at `limit` characters."""
    text = repr(data)
    text = re.sub(r"((\\x[0-9a-f]{2}|[^\\])\2{15,})", lambda m: f"{m.group(2)}<x{len(m.group(1)) // len(m.group(2))}>",
                  text)
    return text if len(text) <= limit else text[:limit] + f"... ({len(data)} bytes)"


# -- the generator ------------------------------------------------------------------------------------------------
#
# `rng` is a random.Random, or anything with its randint/choice/random/randbytes (test_fuzz.py's hypothesis
# adapter), so one grammar serves both the seeded runs and the shrinking test.

def session_rng(seed: int | str, index: int) -> random.Random:
    return random.Random(f"{seed}:{index}")


def generate_session(rng, seed: int | str = "", index: int = 0) -> Session:
    if _chance(rng, 0.12):
        return _http_session(rng, Session(seed, index, "http"))
    return _TCPSessionBuilder(rng, Session(seed, index, "tcp")).build()


def _chance(rng, probability: float) -> bool:
    """True with `probability`. Drawn from the top of random()'s range, so that hypothesis, which favours and
    shrinks towards 0.0, draws the common case (tests/broker/test_fuzz.py)."""
    return rng.random() >= 1 - probability


def _weighted(rng, table: dict):
    """A key of `table`, chosen with the weights its values give."""
    point = rng.random() * sum(table.values())
    for key, weight in table.items():
        point -= weight
        if point < 0:
            return key
    return key


def _size(value: int) -> bytes:
    return struct.pack(">I", value & 0xFFFFFFFF)


def _command(verb: bytes, *params: bytes, body: bytes | None = None) -> bytes:
    line = b" ".join((verb, *params)) + b"\n"
    return line if body is None else line + _size(len(body)) + body


def _mpub_body(bodies: list[bytes]) -> bytes:
    return _size(len(bodies)) + b"".join(_size(len(body)) + body for body in bodies)


class _TCPSessionBuilder:
    """Draws commands for the state the connection should be in after the ones before (nsqd's state machine,
    section 2.13); the broker may disagree (a mutation, a topic deleted over HTTP), which is fine: every
    answer is checked against what nsqd always does, not against this guess."""

    def __init__(self, rng, session: Session):
        self.rng = rng
        self.session = session
        self.state = "init"  # "init", "subscribed", "closing", or "gone" once a fatal error or desync is sure
        self.upgraded = False  # asked for compression once: later IDENTIFYs never ask again
        self.compressed = False  # writes go through the layer
        self.topic = rng.choice(TOPICS)
        self.channel = rng.choice(CHANNELS)
        self.pending: list[tuple[bytes, str]] = []  # commands for the next write
        self.silent_close_possible = self.topic in HTTP_TOPICS
        self.expected: list[bytes] = []

    def build(self) -> Session:
        rng, session = self.rng, self.session
        magic = b"  V2"
        if _chance(rng, 0.03):
            magic = rng.choice((b"  V1", b"GET ", b"V2  ", b"  v2", b"\x00\x00\x00\x00", rng.randbytes(4)))
            session.wrong_magic = magic != b"  V2"
        elif _chance(rng, 0.01):
            magic = b"  V2"[:rng.randint(0, 3)]  # closed before the magic is complete (C-03)
            self.state = "gone"
            self.silent_close_possible = True
        self.pending.append((magic, "magic"))
        for _ in range(rng.randint(1, 10)):
            if self.state == "gone":
                break
            self._next_command()
            if _chance(rng, 0.003):
                self._await(Pause(rng.choice((0.3, 1.2, 2.5))))
                self.silent_close_possible = True
        self._flush_pending()
        session.expect_open = not (self.silent_close_possible or session.wrong_magic)
        session.expected_responses = self.expected
        session.ending = _weighted(rng, {"half-close": 0.65, "close": 0.15, "reset": 0.2})
        return session

    # -- writes -------------------------------------------------------------------------------------------------

    def _add(self, data: bytes, note: str) -> None:
        self.pending.append((data, note))
        if _chance(self.rng, 0.35):  # otherwise pipelined with the next command
            self._flush_pending()

    def _flush_pending(self) -> None:
        if not self.pending:
            return
        rng = self.rng
        data = b"".join(d for d, _ in self.pending)
        note = "; ".join(n for _, n in self.pending)
        self.pending = []
        cuts, pause = (), 0.0
        if _chance(rng, 0.25):
            cuts = tuple(sorted(rng.random() for _ in range(rng.randint(1, 5))))
            pause = rng.choice((0.0, 0.0, 0.001, 0.005))
        self.session.steps.append(Write(data, note, cuts, pause))

    def _await(self, step) -> None:
        self._flush_pending()
        self.session.steps.append(step)

    # -- commands -----------------------------------------------------------------------------------------------

    def _next_command(self) -> None:
        if self.compressed and _chance(self.rng, 0.04):
            self._broken_compressed_stream()
            return
        verbs = {
            "init": {"identify": 5, "sub": 5, "pub": 4, "mpub": 2, "dpub": 2, "nop": 1, "auth": 0.3,
                     "rdy": 0.5, "fin": 0.3, "cls": 0.3, "unknown": 0.8, "burst": 0.5},
            "subscribed": {"rdy": 4, "pub": 3, "consume": 4, "fin": 1, "req": 1, "touch": 1, "nop": 1,
                           "cls": 1, "identify": 0.3, "sub": 0.3, "unknown": 0.3, "burst": 0.4, "mpub": 1},
            "closing": {"rdy": 1, "fin": 1, "req": 1, "touch": 1, "nop": 1, "pub": 1, "cls": 0.3},
        }[self.state]
        verb = _weighted(self.rng, verbs)
        getattr(self, f"_{verb}")()

    def _mutated(self, data: bytes, note: str, body_at: int | None = None) -> None:
        """`data` as is (most of the time) or mutated; a mutation that desynchronises the stream ends the
        session's commands, since what follows is garbage to the broker anyway."""
        rng = self.rng
        if not _chance(rng, 0.15):
            self._add(data, note)
            return
        kinds = {"truncate": 3, "flip": 3, "garbage": 1, "overlong line": 0.4, "crlf": 1, "double space": 1}
        if body_at is not None:
            kinds["lying size"] = 4
        kind = _weighted(rng, kinds)
        self.silent_close_possible |= kind != "crlf"
        if kind == "truncate":
            data = data[:rng.randint(0, len(data) - 1)]
            self.state = "gone"
        elif kind == "flip":
            mutable = bytearray(data)
            for _ in range(rng.randint(1, 3)):
                mutable[rng.randrange(len(mutable))] ^= 1 << rng.randint(0, 7)
            data = bytes(mutable)
            self.state = "gone"
        elif kind == "garbage":
            position = rng.randint(0, len(data))
            data = data[:position] + rng.randbytes(rng.randint(1, 32)) + data[position:]
            self.state = "gone"
        elif kind == "overlong line":  # C-19: no newline within 16 KiB
            data = data.split(b"\n")[0] + bytes([rng.choice(b"AZ 0")]) * rng.randint(16384, 17000)
            self.state = "gone"
        elif kind == "crlf":  # C-14: a valid line still
            data = data.replace(b"\n", b"\r\n", 1)
        elif kind == "double space":  # C-15: an empty parameter
            data = data.replace(b" ", b"  ", 1)
            self.state = "gone"
        else:
            data = data[:body_at] + _size(rng.choice(LYING_SIZES)) + data[body_at + 4:]
            self.state = "gone"
        self._add(data, f"{note} [{kind}]")

    def _body(self) -> bytes:
        rng = self.rng
        size = _weighted(rng, {1: 2, 8: 3, 64: 3, 500: 1, MAX_MSG_SIZE: 0.2, MAX_MSG_SIZE + 1: 0.2})
        return rng.randbytes(size) if size <= 64 else bytes([rng.randint(0, 255)]) * size

    def _topic_name(self) -> bytes:
        return self.rng.choice(INVALID_NAMES) if _chance(self.rng, 0.08) else self.topic

    def _identify(self) -> None:
        rng = self.rng
        fields: dict = {}
        for name, values in _IDENTIFY_VALUES.items():
            if _chance(rng, 0.25):
                fields[name] = rng.choice(values)
        negotiation = _chance(rng, 0.6)
        if negotiation:
            fields["feature_negotiation"] = True
        ask = _weighted(rng, {None: 4, "snappy": 3, "deflate": 3, "both": 0.3}) if negotiation else None
        if self.upgraded:
            ask = None
        if ask in ("snappy", "both"):
            fields["snappy"] = True
        if ask in ("deflate", "both"):
            fields["deflate"] = True
            fields["deflate_level"] = rng.randint(-1, 10)
        body = _odd_json(rng) if _chance(rng, 0.1) and not ask else json.dumps(fields).encode()
        note = f"IDENTIFY {readable(body, 120)}"
        data = _command(b"IDENTIFY", body=body)
        if ask is None:
            self._mutated(data, note, body_at=len(b"IDENTIFY\n"))
            self.expected.append(b"{" if negotiation and body == json.dumps(fields).encode() else b"OK")  # ID-09
            if self.state == "subscribed":
                self.state = "gone"  # P-ID-01
            return
        self.upgraded = True
        if ask == "both":  # ID-12
            self._add(data, note)
            self.state = "gone"
        elif _chance(rng, 0.05):  # ID-30: bytes pipelined behind an upgrading IDENTIFY are dropped
            self.pending.append((data, note))
            self._flush_pending()
            self.silent_close_possible = True
        else:
            self.pending.append((data, note))
            self._await(AwaitUpgrade())
            self.compressed = self.state == "init"
            self.expected += [b"{", b"OK"]  # ID-30: the OK comes through the new layer

    def _sub(self) -> None:
        rng = self.rng
        topic = self._topic_name()
        channel = rng.choice(INVALID_NAMES) if _chance(rng, 0.08) else self.channel
        params = [topic, channel][:_weighted(rng, {2: 20, 1: 1, 0: 1})]
        if _chance(rng, 0.1):
            params.append(b"extra")  # C-17
        self._mutated(_command(b"SUB", *params), "SUB")
        self.expected.append(b"OK")
        self.state = "subscribed" if self.state == "init" else "gone"

    def _pub(self) -> None:
        params = [self._topic_name()][:_weighted(self.rng, {1: 30, 0: 1})]
        line = b" ".join((b"PUB", *params)) + b"\n"
        self._mutated(_command(b"PUB", *params, body=self._body()), "PUB", body_at=len(line))
        self.expected.append(b"OK")

    def _dpub(self) -> None:
        rng = self.rng
        delay = rng.choice(NUMBERS) if _chance(rng, 0.3) else rng.choice((b"0", b"10", b"500", b"2000"))
        params = [self._topic_name(), delay]
        line = b" ".join((b"DPUB", *params)) + b"\n"
        self._mutated(_command(b"DPUB", *params, body=self._body()), "DPUB", body_at=len(line))
        self.expected.append(b"OK")

    def _mpub(self) -> None:
        rng = self.rng
        if _chance(rng, 0.02):  # at and just past --max-body-size (P-MPUB-01)
            bodies = [b"m" * (MAX_MSG_SIZE - rng.randint(0, 5))] * 8
        else:
            bodies = [self._body()[:100] or b"x" for _ in range(rng.randint(1, 8))]
        body = _mpub_body(bodies)
        if _chance(rng, 0.1):  # P-MPUB-03: a lying count or member size inside a truthful outer size
            at = rng.choice([0] + [4 + sum(4 + len(b) for b in bodies[:i]) for i in range(len(bodies))])
            body = body[:at] + _size(rng.choice(LYING_SIZES)) + body[at + 4:]
            self.state = "gone"
            self.silent_close_possible = True
        line = b"MPUB " + self._topic_name() + b"\n"
        self._mutated(line + _size(len(body)) + body, "MPUB", body_at=len(line))
        self.expected.append(b"OK")

    def _rdy(self) -> None:
        rng = self.rng
        if _chance(rng, 0.2):
            count = rng.choice(NUMBERS)
        else:
            count = _weighted(rng, {b"1": 6, b"0": 1, b"2": 1, b"10": 1, b"2500": 0.5})
        params = [] if _chance(rng, 0.05) else [count]  # P-RDY-05: no parameter means 1
        self._mutated(_command(b"RDY", *params), "RDY")
        if self.state == "init":
            self.state = "gone"

    def _message_id(self) -> bytes:
        rng = self.rng
        kind = _weighted(rng, {"in flight": 6, "made up": 3, "another client's": 1.5, "wrong length": 1})
        if kind == "in flight":
            return IN_FLIGHT_ID
        if kind == "another client's":  # P-FIN-05: "client does not own message", or a race with its owner
            return FOREIGN_ID
        if kind == "made up":
            return rng.choice(MADE_UP_IDS)
        return rng.choice((b"", b"0" * 15, b"0" * 17, rng.randbytes(16).replace(b"\n", b"n").replace(b" ", b"_")))

    def _settle(self, verb: bytes) -> None:
        message_id = self._message_id()
        params = [message_id]
        if verb == b"REQ":
            params.append(self.rng.choice(NUMBERS) if _chance(self.rng, 0.3)
                          else self.rng.choice((b"0", b"100", b"5000")))
        self._mutated(_command(verb, *params), verb.decode())
        if self.state == "init" or len(message_id) != 16:
            self.state = "gone"

    def _fin(self) -> None:
        self._settle(b"FIN")

    def _req(self) -> None:
        self._settle(b"REQ")

    def _touch(self) -> None:
        self._settle(b"TOUCH")

    def _consume(self) -> None:
        """Publish to our own topic, make room, wait for a message, settle it by its real ID."""
        rng = self.rng
        self.pending.append((_command(b"PUB", self.topic, body=self._body()[:64] or b"x"), "PUB (to consume)"))
        self.expected.append(b"OK")
        if not _chance(rng, 0.3):  # otherwise the RDY count set before
            self.pending.append((b"RDY 1\n", "RDY 1"))
        self._await(AwaitMessage())
        self._settle(rng.choice((b"FIN", b"FIN", b"REQ", b"TOUCH")))

    def _cls(self) -> None:
        self._mutated(b"CLS\n", "CLS")
        self.expected.append(b"CLOSE_WAIT")
        self.state = "closing" if self.state == "subscribed" else "gone"

    def _nop(self) -> None:
        self._mutated(b"NOP\n", "NOP")

    def _auth(self) -> None:
        self._mutated(_command(b"AUTH", body=b"secret"), "AUTH", body_at=len(b"AUTH\n"))
        self.state = "gone"  # E_AUTH_DISABLED, or E_INVALID after SUB

    def _unknown(self) -> None:
        rng = self.rng
        line = rng.choice((b"", b"nop", b"PING", b"GET / HTTP/1.1", b"SUB\x00", b"\r", b"IDENTIFY\xff",
                           rng.randbytes(rng.randint(1, 40)).replace(b"\n", b"")))
        self._add(line + b"\n", "unknown command")
        self.state = "gone"  # C-20, C-21

    def _burst(self) -> None:
        """Many commands in one write (C-22)."""
        rng = self.rng
        count = rng.randint(10, 200)
        verb = rng.choice((b"NOP", b"PUB", b"FIN"))
        if verb == b"PUB":
            data = _command(b"PUB", self.topic, body=b"burst") * count
            self.expected += [b"OK"] * count
        elif verb == b"FIN":
            data = b"".join(_command(b"FIN", rng.choice(MADE_UP_IDS)) for _ in range(count))
            self.state = "gone" if self.state == "init" else self.state
        else:
            data = b"NOP\n" * count
        self._add(data, f"{count} x {verb.decode()}")

    def _broken_compressed_stream(self) -> None:
        """Garbage after the upgrade: plain text, flipped compressed bytes, or a chunk the layer refuses."""
        rng = self.rng
        kind = rng.choice(("plain", "flipped", "raw garbage"))
        data = _command(b"PUB", self.topic, body=b"after upgrade")
        self._flush_pending()
        if kind == "plain":
            self.session.steps.append(Write(data, "plain bytes after the upgrade", raw=True))
        elif kind == "flipped":
            self.session.steps.append(Write(data, "compressed bytes flipped", corrupt=(rng.random(),)))
        else:
            garbage = rng.choice((b"\x02\x00\x00\x00", b"\x00\xff\xff\xff", b"\xff\x06\x00\x00sNaPpX",
                                  rng.randbytes(rng.randint(1, 64))))
            self.session.steps.append(Write(garbage, "raw garbage after the upgrade", raw=True))
        self.state = "gone"
        self.silent_close_possible = True


_IDENTIFY_VALUES = {
    "client_id": ("fuzz", "", "\u00e9\u20ac", "x" * 300),
    "hostname": ("h", "\ud800"),
    "user_agent": ("fuzz/1.0", 5),
    "heartbeat_interval": (-1, 0, 1000, 30000, 60000, 60001, 999, -2, 2**63, "1000", 1.5),
    "output_buffer_size": (-1, 0, 64, 16384, 65536, 65537, 63, 2**31),
    "output_buffer_timeout": (-1, 0, 25, 250, 30000, 24, 30001),
    "msg_timeout": (0, 1000, 60000, 900000, 900001, 999, -1),
    "sample_rate": (0, 1, 50, 99, 100, -1, 2**31),
    "deflate_level": (-5, 0, 1, 6, 9, 10),
    "tls_v1": (False, True),
    "topology_zone": ("z", None),
    "MSG_TIMEOUT": (2000,),
    "unknown": ([1, {"a": None}], "x"),
}


def _odd_json(rng) -> bytes:
    """Bodies Go's encoding/json rejects or that stretch it: nesting, huge numbers, wrong types, not JSON."""
    depth = rng.choice((10, 100, 1000, 10001))
    return rng.choice((
        b"", b"null", b"[]", b"{}", b"\"str\"", b"{\"heartbeat_interval\":1e3}", b"{\"sample_rate\":-0}",
        b"{\"msg_timeout\":" + b"9" * rng.choice((20, 400, 5000)) + b"}",
        b"{\"x\":" + b"[" * depth + b"]" * depth + b"}", b"{\"x\":" + b"[" * depth + b"}",
        b"\xef\xbb\xbf{}", b"{\"feature_negotiation\":\"yes\"}", b"{\"client_id\":\"\\ud800\\udc00\xff\"}",
        b"{\"heartbeat_interval\":NaN}", b"{,}", b"{\"a\":1}{\"b\":2}", rng.randbytes(rng.randint(1, 64)),
    ))


# -- HTTP sessions ------------------------------------------------------------------------------------------------

_HTTP_ROUTES = (
    (b"GET", b"/ping"), (b"GET", b"/info"), (b"POST", b"/pub"), (b"POST", b"/pub"), (b"POST", b"/mpub"),
    (b"POST", b"/mpub"), (b"GET", b"/stats"), (b"GET", b"/stats"), (b"POST", b"/topic/create"),
    (b"POST", b"/topic/delete"), (b"POST", b"/topic/empty"), (b"POST", b"/topic/pause"),
    (b"POST", b"/topic/unpause"), (b"POST", b"/topic/unpause"), (b"POST", b"/channel/create"),
    (b"POST", b"/channel/delete"), (b"POST", b"/channel/empty"), (b"POST", b"/channel/pause"),
    (b"POST", b"/channel/unpause"), (b"POST", b"/channel/unpause"), (b"GET", b"/config/nsqlookupd_tcp_addresses"),
    (b"PUT", b"/config/nsqlookupd_tcp_addresses"), (b"PUT", b"/config/log_level"), (b"GET", b"/config/bogus"),
    (b"PUT", b"/debug/setblockrate"), (b"POST", b"/debug/freememory"), (b"GET", b"/debug/pprof/"),
)
_ODD_METHODS = (b"get", b"HEAD", b"OPTIONS", b"DELETE", b"BREW", b"PUT", b"POST", b"")
_ODD_PATHS = (b"/", b"/PING", b"/ping/", b"//ping", b"/topic/../ping", b"/%70ing", b"/pub%2F", b"/config/",
              b"/config/a/b", b"/debug/pprof/heap", b"*", b"ping", b"http://host/stats", b"/%zz", b"/\xff",
              b"/channel", b"/stats?format=json#frag")
HTTP_TOPICS = (b"fz0", b"fz1", b"fz4#ephemeral")  # the topics of _QUERY_PIECES, deleted now and then
_QUERY_PIECES = (b"topic=fz0", b"topic=fz1", b"topic=fz4%23ephemeral", b"topic=bad*", b"topic=", b"topic=%zz",
                 b"channel=c0", b"channel=c3%23ephemeral", b"channel=bad*", b"defer=100", b"defer=-1",
                 b"defer=99999999999999999999", b"defer=x", b"binary=true", b"binary=false", b"binary=2",
                 b"format=json", b"format=text", b"include_clients=false", b"include_mem=false", b"rate=1",
                 b"a;b", b"=", b"&", b"topic=fz0&topic=bad*", b"topic=" + b"t" * 65)
# Log levels that keep the broker's stderr as it is: the run reads tracebacks from it.
_CONFIG_BODIES = (b"[]", b"null", b"[\"127.0.0.1:4160\"]", b"[null]", b"{}", b"x", b"info", b"INFO", b"warn",
                  b"verbose", b"", b"[1]")


def _http_session(rng, session: Session) -> Session:
    requests = []
    for index in range(_weighted(rng, {1: 6, 2: 2, 3: 1})):
        method, path = rng.choice(_HTTP_ROUTES)
        if _chance(rng, 0.15):
            method = rng.choice(_ODD_METHODS)
        if _chance(rng, 0.1):
            path = rng.choice(_ODD_PATHS)
        query = b"&".join(rng.choice(_QUERY_PIECES) for _ in range(_weighted(rng, {0: 1, 1: 4, 2: 3, 3: 1})))
        if path == b"/config/log_level" or path.startswith(b"/config/nsqlookupd"):
            body = rng.choice(_CONFIG_BODIES)
        elif path == b"/mpub" and b"binary=true" in query:
            body = _mpub_body([rng.randbytes(rng.randint(1, 20)) for _ in range(rng.randint(1, 5))])
            if _chance(rng, 0.3):
                at = rng.choice(range(0, len(body) - 3))
                body = body[:at] + _size(rng.choice(LYING_SIZES)) + body[at + 4:]
        else:
            body = _weighted(rng, {b"": 2, b"hello": 3, b"a\nb\n\nc": 2, b"x" * MAX_MSG_SIZE: 0.2,
                                   b"x" * (MAX_MSG_SIZE + 1): 0.2, rng.randbytes(32): 1})
        version = rng.choice((b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.x", b"")) if _chance(rng, 0.08) else b"HTTP/1.1"
        target = path + (b"?" + query if query else b"")
        headers = [b"Host: fuzz"]
        framing = _weighted(rng, {"length": 10, "none": 1, "longer": 1, "shorter": 1, "bad length": 1,
                                  "two lengths": 0.5, "chunked": 1, "bad chunked": 0.7})
        if framing == "length":
            headers.append(b"Content-Length: %d" % len(body))
        elif framing == "longer":  # the body breaks off at the half-close: INTERNAL_ERROR, as nsqd
            headers.append(b"Content-Length: %d" % (len(body) + rng.randint(1, 100)))
        elif framing == "shorter":  # the rest is read as the next request
            headers.append(b"Content-Length: %d" % max(0, len(body) - rng.randint(1, 5)))
        elif framing == "bad length":
            headers.append(b"Content-Length: " + rng.choice((b"-1", b"abc", b"1e3", b"99999999999999999999", b"")))
        elif framing == "two lengths":
            headers += [b"Content-Length: %d" % len(body), b"Content-Length: %d" % (len(body) + 1)]
        elif framing in ("chunked", "bad chunked"):
            headers.append(b"Transfer-Encoding: chunked")
            body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body) if body else b"0\r\n\r\n"
            if framing == "bad chunked":
                body = rng.choice((b"zz\r\n", b"5\r\nab", b"3\r\nabcdef\r\n", b"-1\r\n", b"ffffffffffffffffff\r\n"))
        if _chance(rng, 0.05):
            headers.append(rng.choice((b"X-Bad header", b"\x00: x", b"A: " + b"b" * 70000, b": empty")))
        last = index == 2 or _chance(rng, 0.5)
        if last:
            headers.append(b"Connection: close")
        request = b" ".join(part for part in (method, target, version) if part) + b"\r\n"
        request += b"".join(h + b"\r\n" for h in headers) + b"\r\n" + body
        requests.append(request)
        if last:
            break
    data = b"".join(requests)
    cuts = tuple(sorted(rng.random() for _ in range(rng.randint(1, 4)))) if _chance(rng, 0.2) else ()
    session.steps.append(Write(data, f"{len(requests)} HTTP request(s)", cuts))
    session.ending = _weighted(rng, {"half-close": 0.85, "reset": 0.15})
    return session


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
                try:
                    connection.sock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
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
            try:
                connection.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
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


# -- running many at once -------------------------------------------------------------------------------------

@dataclass
class RunReport:
    seed: int | str
    sessions: int = 0
    seconds: float = 0.0
    frames: Counter = field(default_factory=Counter)  # by type name
    error_codes: Counter = field(default_factory=Counter)
    http_statuses: Counter = field(default_factory=Counter)
    endings: Counter = field(default_factory=Counter)
    layers: Counter = field(default_factory=Counter)  # sessions the broker upgraded, by their compression
    timed_out: int = 0
    not_run: int = 0  # sessions left out when the run's time budget ran out
    failures: list[Outcome] = field(default_factory=list)
    failed_sessions: int = 0

    def add(self, outcome: Outcome, keep_failures: int) -> None:
        self.sessions += 1
        for frame_type, data in outcome.frames:
            self.frames[("response", "error", "message")[frame_type]] += 1
            if frame_type == 1:
                self.error_codes[data.split(b" ", 1)[0].decode("ascii", "replace")] += 1
        self.http_statuses.update(outcome.http_statuses)
        self.endings[outcome.session.ending] += 1
        if outcome.layer is not None:
            self.layers[outcome.layer] += 1
        self.timed_out += outcome.timed_out
        if outcome.problems:
            self.failed_sessions += 1
            if len(self.failures) < keep_failures:
                self.failures.append(outcome)

    def describe_failures(self) -> str:
        return "\n\n".join(outcome.describe() for outcome in self.failures)


def run_sessions(tcp_address, http_address, seed: int | str, indices, workers: int = 32, keep_failures: int = 10,
                 budget_seconds: float = float("inf"), progress=None) -> RunReport:
    """Play sessions `indices` of `seed`, `workers` at a time, against one broker; none starts after
    `budget_seconds` (they count as `not_run`). `progress(report)` is called every 1000 sessions."""
    report = RunReport(seed)
    lock = threading.Lock()
    started = time.monotonic()
    seen_ids = deque(maxlen=64)

    def one(index: int) -> None:
        if time.monotonic() - started > budget_seconds:
            with lock:
                report.not_run += 1
            return
        session = generate_session(session_rng(seed, index), seed, index)
        outcome = play(session, tcp_address, http_address, seen_ids)
        with lock:
            report.add(outcome, keep_failures)
            if progress is not None and report.sessions % 1000 == 0:
                report.seconds = time.monotonic() - started
                progress(report)

    with ThreadPoolExecutor(workers) as pool:
        for future in [pool.submit(one, index) for index in indices]:
            future.result()
    report.seconds = time.monotonic() - started
    return report


# -- the broker afterwards --------------------------------------------------------------------------------------

TRACEBACK_MARKERS = ("Traceback (most recent call last)", "Exception in thread",
                     "Exception occurred during processing of request")


def tracebacks(log_lines: list[str]) -> list[str]:
    """The lines of the broker's stderr that show a Python traceback or an uncaught exception."""
    return [line for line in log_lines if any(marker in line for marker in TRACEBACK_MARKERS)]


def process_status(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status") as status:
        return dict(line.rstrip("\n").split(":\t", 1) for line in status if ":\t" in line)


def peak_rss_bytes(pid: int) -> int:
    return int(process_status(pid)["VmHWM"].split()[0]) * 1024


def ping_seconds(http_address) -> float:
    """How long /ping takes to answer OK; AssertionError when it does not within 1 s."""
    started = time.monotonic()
    try:
        with urllib.request.urlopen(f"http://{http_address[0]}:{http_address[1]}/ping", timeout=1) as response:
            status, body = response.status, response.read()
    except OSError as error:
        raise AssertionError(f"/ping did not answer within 1 s: {error}") from None
    if status != 200 or body != b"OK":
        raise AssertionError(f"/ping answered {status} {body!r}")
    return time.monotonic() - started


def thread_names(http_address) -> list[str]:
    """The names of the broker's threads, from its /debug/pprof/goroutine thread dump, less the one serving
    this request."""
    url = f"http://{http_address[0]}:{http_address[1]}/debug/pprof/goroutine"
    with urllib.request.urlopen(url, timeout=5) as response:
        dump = response.read().decode()
    names = re.findall(r"^thread (.*):$", dump, re.MULTILINE)
    requests = [name for name in names if "process_request" in name]
    names.remove(requests[0])
    return names


def topic_names(http_address) -> list[str]:
    url = f"http://{http_address[0]}:{http_address[1]}/stats?format=json&include_clients=false&include_mem=false"
    with urllib.request.urlopen(url, timeout=5) as response:
        return [topic["topic_name"] for topic in json.load(response)["topics"] or []]


def leftover_threads(http_address, baseline: list[str]) -> list[str]:
    """Threads beyond the broker's baseline: the ones it started with, plus one pump per existing topic.
    Connection threads (conn-*, pump-*), HTTP request threads and pumps of deleted topics are all leftovers."""
    names = Counter(thread_names(http_address))
    names.subtract(baseline)
    names.subtract(f"topic-{name}" for name in topic_names(http_address))
    return sorted(names.elements())


def wait_for_baseline_threads(http_address, baseline: list[str], seconds: float = 5.0) -> list[str]:
    """The leftover threads still there after up to `seconds` (an empty list once back to the baseline)."""
    stop = time.monotonic() + seconds
    while (left := leftover_threads(http_address, baseline)) and time.monotonic() < stop:
        time.sleep(0.1)
    return left


def publish_and_consume(tcp_address, topic: str, body: bytes, timeout: float = 5.0) -> None:
    """A fresh, well-behaved client: PUB, SUB, RDY, receive the message, FIN it, and see the FIN taken: a TOUCH
    of it after the FIN finds it no longer in flight (C-22, P-TOUCH-03). Raises AssertionError when a step fails."""
    with socket.create_connection(tcp_address, timeout=timeout) as sock:
        inbound = InboundFrames(Outcome(Session("health", 0, "tcp")))
        frames = inbound.outcome.frames

        def expect(predicate, what: str) -> None:
            stop = time.monotonic() + timeout
            while not predicate():
                if time.monotonic() > stop:
                    raise AssertionError(f"no {what} within {timeout} s; frames: {frames}")
                data = sock.recv(65536)
                if not data:
                    raise AssertionError(f"the broker closed before {what}; frames: {frames}")
                inbound.feed(data)
            if inbound.outcome.problems:
                raise AssertionError(f"{inbound.outcome.problems} {frames}")

        sock.sendall(b"  V2" + _command(b"PUB", topic.encode(), body=body) + _command(b"SUB", topic.encode(), b"c"))
        expect(lambda: frames.count((0, b"OK")) == 2, "OK to PUB and SUB")
        sock.sendall(b"RDY 1\n")
        expect(lambda: inbound.messages_seen == 1, "message")
        message_id = inbound.last_message_id
        if frames[-1][1][26:] != body:
            raise AssertionError(f"received {frames[-1]!r}, published {body!r}")
        sock.sendall(_command(b"FIN", message_id) + _command(b"TOUCH", message_id))
        not_in_flight = (1, b"E_TOUCH_FAILED TOUCH " + message_id + b" failed ID not in flight")
        expect(lambda: len(frames) > 3, "an answer to TOUCH after FIN")
        if frames[3:] != [not_in_flight]:
            raise AssertionError(f"after FIN and TOUCH: {frames[3:]}, expected {not_in_flight}")


@dataclass
class Health:
    ping_seconds: float
    peak_rss_bytes: int
    threads: int
    leftover_threads: list[str]
    traceback_lines: list[str]


def check_health(broker, rss_limit_bytes: int, baseline_threads: list[str]) -> Health:
    """The broker after the sessions (`baseline_threads`: `thread_names` before them); raises AssertionError
    with what is wrong."""
    pid = broker.process.pid
    http_address = (broker.host, broker.http_port)
    if broker.process.poll() is not None:
        raise AssertionError(f"the broker exited with {broker.process.returncode}:\n{''.join(broker.log[-50:])}")
    ping = ping_seconds(http_address)
    try:
        publish_and_consume(broker.tcp_address, f"fz-health-{time.time_ns()}", b"still healthy")
    except OSError as error:
        raise AssertionError(f"a fresh client could not publish and consume: {error}") from None
    left = wait_for_baseline_threads(http_address, baseline_threads)
    health = Health(ping, peak_rss_bytes(pid), int(process_status(pid)["Threads"]), left, tracebacks(broker.log))
    problems = []
    if health.traceback_lines:
        problems.append("tracebacks in the broker's stderr:\n" + _log_around_tracebacks(broker.log))
    if left:
        problems.append(f"threads beyond the baseline 5 s after the last session: {left[:20]}")
    if health.peak_rss_bytes > rss_limit_bytes:
        problems.append(f"peak RSS {health.peak_rss_bytes >> 20} MiB > {rss_limit_bytes >> 20} MiB")
    if problems:
        raise AssertionError("\n".join(problems))
    return health


def _log_around_tracebacks(log: list[str], limit: int = 200) -> str:
    first = next(i for i, line in enumerate(log) if any(marker in line for marker in TRACEBACK_MARKERS))
    return "".join(log[max(0, first - 5):first + limit])

