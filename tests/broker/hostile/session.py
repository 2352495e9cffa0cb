"""A hostile session: the broker it is played against (limits, flags, names), and its steps."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

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
