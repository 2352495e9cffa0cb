"""The generator: a seeded session drawn for the state the connection is expected to be in (TCP), or
one to three HTTP requests."""
from __future__ import annotations

import json
import random
import struct

from .session import (
    CHANNELS,
    FOREIGN_ID,
    IN_FLIGHT_ID,
    INVALID_NAMES,
    LYING_SIZES,
    MADE_UP_IDS,
    MAX_MSG_SIZE,
    NUMBERS,
    TOPICS,
    AwaitMessage,
    AwaitUpgrade,
    Pause,
    Session,
    Write,
    readable,
)

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


def encoded_command(verb: bytes, *params: bytes, body: bytes | None = None) -> bytes:
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
        data = encoded_command(b"IDENTIFY", body=body)
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
        self._mutated(encoded_command(b"SUB", *params), "SUB")
        self.expected.append(b"OK")
        self.state = "subscribed" if self.state == "init" else "gone"

    def _pub(self) -> None:
        params = [self._topic_name()][:_weighted(self.rng, {1: 30, 0: 1})]
        line = b" ".join((b"PUB", *params)) + b"\n"
        self._mutated(encoded_command(b"PUB", *params, body=self._body()), "PUB", body_at=len(line))
        self.expected.append(b"OK")

    def _dpub(self) -> None:
        rng = self.rng
        delay = rng.choice(NUMBERS) if _chance(rng, 0.3) else rng.choice((b"0", b"10", b"500", b"2000"))
        params = [self._topic_name(), delay]
        line = b" ".join((b"DPUB", *params)) + b"\n"
        self._mutated(encoded_command(b"DPUB", *params, body=self._body()), "DPUB", body_at=len(line))
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
        self._mutated(encoded_command(b"RDY", *params), "RDY")
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
        self._mutated(encoded_command(verb, *params), verb.decode())
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
        self.pending.append((encoded_command(b"PUB", self.topic, body=self._body()[:64] or b"x"), "PUB (to consume)"))
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
        self._mutated(encoded_command(b"AUTH", body=b"secret"), "AUTH", body_at=len(b"AUTH\n"))
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
            data = encoded_command(b"PUB", self.topic, body=b"burst") * count
            self.expected += [b"OK"] * count
        elif verb == b"FIN":
            data = b"".join(encoded_command(b"FIN", rng.choice(MADE_UP_IDS)) for _ in range(count))
            self.state = "gone" if self.state == "init" else self.state
        else:
            data = b"NOP\n" * count
        self._add(data, f"{count} x {verb.decode()}")

    def _broken_compressed_stream(self) -> None:
        """Garbage after the upgrade: plain text, flipped compressed bytes, or a chunk the layer refuses."""
        rng = self.rng
        kind = rng.choice(("plain", "flipped", "raw garbage"))
        data = encoded_command(b"PUB", self.topic, body=b"after upgrade")
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
