"""The catalogue of client faults: each breaks a good client's output (or what it is told) in one way, and names
the cases that must catch it (a FAIL, or a NON-STRICT for a SHOULD). The selftest (test_faults.py) runs the model
client through each fault's proxy and checks that every one of those cases does."""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from conformance.clients.selftest.proxy import FaultyLookupProxy, FaultyProxy
from nsq_protocol import wire


def _same(command: wire.Command) -> bytes:
    return command.encode()


@dataclass(frozen=True)
class Fault:
    name: str
    text: str
    kills: tuple[str, ...]  # the case IDs that must not PASS
    rewrite: Callable[[wire.Command], bytes] = _same  # a command as the broker gets it (b"" drops it)
    # the same, knowing what the connection's earlier commands left in ``state`` (a dict per connection)
    rewrite_after: Callable[[wire.Command, dict], bytes] | None = None
    late: Callable[[wire.Command], float] = lambda command: 0.0  # seconds to hold a command back
    # the same, knowing what the connection's earlier commands left in ``state`` (a dict per connection)
    late_after: Callable[[wire.Command, dict], float] | None = None
    magic_as: bytes | None = None
    tell: Callable[[wire.Frame], bytes | None] = lambda frame: frame.encode()  # a frame as the client gets it
    refuse_after: int = 0  # connections after this many are refused (0: none)
    hang_up_after: bytes | None = None  # the client's connection ends right after this command
    # the client's /lookup query as the lookupd gets it (None refuses it), knowing what the case's lookupd
    # proxies share: "queries" so far (this one included), "failed" (a query found its lookupd down), and which
    # lookupd this is ("lookupd": 0 for the first the client was given)
    lookup: Callable[[dict, str], str | None] = lambda shared, target: target
    lookup_stale: bool = False  # every /lookup is answered with the first answer (the client never re-reads it)
    lookup_copies: int = 1  # each /lookup reaches the lookupd this many times, at once (a client polling in a loop)
    # past an IDENTIFY that asks for a layer the proxy reads no more: the client's n-th chunk as the broker gets it
    upgraded: Callable[[int, bytes], bytes] = lambda number, data: data
    # what the broker gets from "the client" right after an IDENTIFY answer that turns a layer on
    after_answer: Callable[[bytes], bytes] = lambda answer: b""
    storm: int = 0  # when the broker closes a connection, this many connections to it at once (no backoff)
    selection: tuple[str, ...] = field(default=())  # cases to run; default: kills
    # whether the fault changes what reaches the nsqd (False: only the client's /lookup queries, or only what it
    # reads): the passive selftest (passive.py) scores the monitors on these
    nsqd_sees: bool = True

    def magic(self, magic: bytes) -> bytes:
        return self.magic_as if self.magic_as is not None else magic

    def command(self, command: wire.Command, state: dict) -> bytes:
        return self.rewrite_after(command, state) if self.rewrite_after else self.rewrite(command)

    def delay(self, command: wire.Command, state: dict) -> float:
        return self.late_after(command, state) if self.late_after else self.late(command)

    def frame(self, frame: wire.Frame) -> bytes | None:
        return self.tell(frame)

    def proxy(self, upstream: tuple[str, int], transcript, http: bool, shared: dict):
        return FaultyLookupProxy(upstream, transcript, self, shared) if http else FaultyProxy(upstream, transcript,
                                                                                               self)


def _only(name: bytes, change: Callable[[wire.Command], bytes]) -> Callable[[wire.Command], bytes]:
    return lambda command: change(command) if command.name == name else command.encode()


def _identify(change: Callable[[dict], dict]) -> Callable[[wire.Command], bytes]:
    return _only(b"IDENTIFY", lambda command: wire.encode_command(
        "IDENTIFY", body=wire.identify_body(change(json.loads(command.body)))))


def _without(*keys: str) -> Callable[[dict], dict]:
    return lambda fields: {key: value for key, value in fields.items() if key not in keys}


def _rdy_plus(command: wire.Command) -> bytes:
    return wire.encode_command("RDY", int(command.params[0]) + 10)


def _flip_last_byte(number: int, data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 0x01]) if number == 0 and data else data


def _identify_layers(fields: dict) -> dict:
    return {key: value for key, value in fields.items() if key not in ("tls_v1", "snappy", "deflate")}


def _never_leaves_backoff(command: wire.Command, state: dict) -> bytes:
    """Once an RDY 0 went out (a backoff), every later RDY is 0 too: the backoff never ends."""
    if command.name != b"RDY":
        return command.encode()
    state["backed_off"] = state.get("backed_off") or command.params == (b"0",)
    return wire.encode_command("RDY", 0) if state["backed_off"] else command.encode()


def _backoff_end_held(nth: int, seconds: float) -> Callable[[wire.Command, dict], float]:
    """The RDY that ends the client's ``nth`` backoff is held ``seconds``: that backoff lasts longer than the client
    made it (the first one outlasting the later ones, NSQC-RDY-007; the second one past a cap, NSQC-RDY-008)."""
    def late_after(command: wire.Command, state: dict) -> float:
        if command.name != b"RDY":
            return 0.0
        if command.params == (b"0",):
            state["backoffs"] = state.get("backoffs", 0) + 1
            return 0.0
        if state.get("backoffs") == nth and not state.get("held"):
            state["held"] = True
            return seconds
        return 0.0
    return late_after


def _mpub_count_plus_one(command: wire.Command) -> bytes:
    count = int.from_bytes(command.body[:4], "big")
    return wire.encode_command("MPUB", *command.params, body=(count + 1).to_bytes(4, "big") + command.body[4:])


def _other_id(message_id: bytes) -> bytes:
    return message_id[:-1] + (b"0" if message_id[-1:] != b"0" else b"1")


ALL_CASES = ("NSQC-CONN-001", "NSQC-CONN-002", "NSQC-HB-001", "NSQC-MSG-001", "NSQC-PUB-001", "NSQC-LOOKUP-003",
             "NSQC-NEG-002", "NSQC-NEG-003", "NSQC-NEG-005")

FAULTS = {fault.name: fault for fault in (
    Fault("faithful", "changes nothing: the proxy itself is transparent (every selected case PASSes)", (),
          selection=ALL_CASES),
    Fault("bad-magic", "the magic is '  V1'", ("NSQC-CONN-001",), magic_as=b"  V1"),
    Fault("identify-not-json", "IDENTIFY's body is not JSON", ("NSQC-CONN-002",),
          rewrite=_only(b"IDENTIFY", lambda command: wire.encode_command("IDENTIFY", body=b"client_id=x"))),
    Fault("identify-anonymous", "IDENTIFY without client_id, hostname, user_agent", ("NSQC-CONN-003",),
          rewrite=_identify(_without("client_id", "hostname", "user_agent"))),
    Fault("identify-no-negotiation", "IDENTIFY without feature_negotiation", ("NSQC-CONN-003",),
          rewrite=_identify(_without("feature_negotiation"))),
    Fault("identify-default-heartbeat", "IDENTIFY asks for 30 s heartbeats, not the configured 1 s",
          ("NSQC-CONN-004",), rewrite=_identify(lambda fields: {**fields, "heartbeat_interval": 30000})),
    Fault("sub-other-channel", "SUB names another channel", ("NSQC-CONN-005",),
          rewrite=_only(b"SUB", lambda command: wire.encode_command("SUB", command.params[0], b"elsewhere"))),
    Fault("nop-dropped", "heartbeats are never answered", ("NSQC-HB-001", "NSQC-HB-002"),
          rewrite=_only(b"NOP", lambda command: b"")),
    Fault("nop-late", "NOP comes 1.5 s after the heartbeat", ("NSQC-HB-001", "NSQC-HB-002"),
          late=lambda command: 1.5 if command.name == b"NOP" else 0.0),
    Fault("rdy-over-max-in-flight", "RDY asks 10 more than max_in_flight allows", ("NSQC-RDY-001", "NSQC-RDY-002",
                                                                                 "NSQC-RDY-004"),
          rewrite=_only(b"RDY", _rdy_plus)),
    Fault("no-backoff", "RDY 0 never goes out (no backoff, RDY never given up)", ("NSQC-RDY-003", "NSQC-RDY-004",
                                                                                  "NSQC-RDY-005"),
          rewrite=lambda command: b"" if command.name == b"RDY" and command.params == (b"0",) else command.encode()),
    Fault("fin-other-id", "FIN names another message", ("NSQC-MSG-001",),
          rewrite=_only(b"FIN", lambda command: wire.encode_command("FIN", _other_id(command.params[0])))),
    Fault("req-delay-changed", "REQ's delay is 1 ms off", ("NSQC-MSG-002",),
          rewrite=_only(b"REQ", lambda command: wire.encode_command("REQ", command.params[0],
                                                                     int(command.params[1]) + 1))),
    Fault("req-as-fin", "REQ goes out as FIN (a failed message is dropped)", ("NSQC-MSG-002", "NSQC-MSG-004"),
          rewrite=_only(b"REQ", lambda command: wire.encode_command("FIN", command.params[0]))),
    Fault("touch-dropped", "TOUCH never goes out", ("NSQC-MSG-003",), rewrite=_only(b"TOUCH", lambda command: b"")),
    Fault("discard-as-req", "a message over max_attempts is requeued, not finished", ("NSQC-MSG-005",),
          rewrite=_only(b"FIN", lambda command: wire.encode_command("REQ", command.params[0], 0))),
    Fault("close-on-fin-failed", "the client drops its connection on E_FIN_FAILED", ("NSQC-ERR-001",),
          tell=lambda frame: None if frame.error_code == "E_FIN_FAILED" else frame.encode()),
    Fault("close-on-req-failed", "the client drops its connection on E_REQ_FAILED", ("NSQC-ERR-002",),
          tell=lambda frame: None if frame.error_code == "E_REQ_FAILED" else frame.encode()),
    Fault("close-on-touch-failed", "the client drops its connection on E_TOUCH_FAILED", ("NSQC-ERR-003",),
          tell=lambda frame: None if frame.error_code == "E_TOUCH_FAILED" else frame.encode()),
    Fault("no-reconnect", "the client never reconnects (a second connection is refused)", ("NSQC-ERR-004",),
          refuse_after=1),
    Fault("cls-dropped", "CLS never goes out on stop", ("NSQC-CLS-001",), rewrite=_only(b"CLS", lambda command: b"")),
    Fault("close-before-close-wait", "the client closes right after CLS, before CLOSE_WAIT", ("NSQC-CLS-001",),
          hang_up_after=b"CLS"),
    Fault("pub-body-changed", "PUB's body loses its last byte", ("NSQC-PUB-001",),
          rewrite=_only(b"PUB", lambda command: wire.encode_command("PUB", *command.params, body=command.body[:-1]))),
    Fault("mpub-message-dropped", "MPUB loses its last message", ("NSQC-PUB-002",),
          rewrite=_only(b"MPUB", lambda command: wire.encode_command(
              "MPUB", *command.params, body=wire.mpub_body(command.messages[:-1])))),
    Fault("dpub-defer-changed", "DPUB's defer is 0", ("NSQC-PUB-003",),
          rewrite=_only(b"DPUB", lambda command: wire.encode_command("DPUB", command.params[0], 0,
                                                                      body=command.body))),
    Fault("pub-error-hidden", "an error answer to PUB reaches the client as OK", ("NSQC-PUB-004",),
          tell=lambda frame: wire.encode_frame(wire.FRAME_RESPONSE, b"OK") if frame.frame_type == wire.FRAME_ERROR
          else frame.encode(), nsqd_sees=False),
    Fault("lookup-other-topic", "/lookup asks for another topic", ("NSQC-LOOKUP-001",),
          lookup=lambda shared, target: target.replace("topic=", "topic=elsewhere-"), nsqd_sees=False),
    Fault("lookup-once", "/lookup is asked once, never polled", ("NSQC-LOOKUP-002", "NSQC-LOOKUP-003"),
          lookup=lambda shared, target: target if shared["queries"] == 1 else None, nsqd_sees=False),
    Fault("lookup-stale", "the first /lookup answer is used for ever", ("NSQC-LOOKUP-003", "NSQC-LOOKUP-004"),
          lookup_stale=True, nsqd_sees=False),
    Fault("lookup-first-only", "only the first lookupd is asked", ("NSQC-LOOKUP-005",),
          lookup=lambda shared, target: target if shared["lookupd"] == 0 else None, nsqd_sees=False),
    Fault("lookup-gives-up", "polling stops after a lookupd is found down", ("NSQC-LOOKUP-005", "NSQC-LOOKUP-006"),
          lookup=lambda shared, target: None if shared["failed"] else target, nsqd_sees=False),
    Fault("identify-asks-deflate", "IDENTIFY asks for deflate, which the client was not told to", ("NSQC-NEG-001",),
          rewrite=_identify(lambda fields: {**fields, "deflate": True})),
    Fault("follows-unasked-snappy", "the client speaks snappy after an answer turning it on unasked",
          ("NSQC-NEG-002",), after_answer=lambda answer: wire.SnappyStreamEncoder().encode(
              wire.encode_command("NOP")) if "snappy" in wire.upgrades(answer) else b""),
    Fault("identify-no-layers", "IDENTIFY asks for no layer, whatever the client was told",
          ("NSQC-NEG-003", "NSQC-NEG-004", "NSQC-NEG-005"), rewrite=_identify(_identify_layers)),
    Fault("layer-stream-corrupted", "the client's first bytes through TLS or compression have a bit flipped",
          ("NSQC-NEG-003", "NSQC-NEG-004", "NSQC-NEG-005"), upgraded=_flip_last_byte),
    Fault("reconnect-storm", "after the broker closes, 40 reconnects at once", ("NSQC-ERR-005",), storm=40),
    Fault("no-test-rdy", "a backoff ends with the full RDY 3, not RDY 1", ("NSQC-RDY-005",),
          rewrite=_only(b"RDY", lambda command: wire.encode_command("RDY", 3) if command.params == (b"1",)
                        else command.encode())),
    Fault("auth-dropped", "AUTH never goes out", ("NSQC-NEG-006",), rewrite=_only(b"AUTH", lambda command: b"")),
    # the kinds of issue 33: each one a MUST broken (FAIL without a baseline) unless its cases are SHOULDs
    Fault("heartbeat-in-seconds", "IDENTIFY asks for heartbeat_interval 1 (seconds, not ms): nsqd refuses it",
          ("NSQC-CONN-004", "NSQC-CONN-006", "NSQC-HB-001"),
          rewrite=_identify(lambda fields: {**fields, "heartbeat_interval": 1})),
    Fault("rdy-over-max-rdy-count", "RDY 5000, above nsqd's max_rdy_count 2500", ("NSQC-RDY-001",),
          rewrite=_only(b"RDY", lambda command: wire.encode_command("RDY", 5000))),
    Fault("mpub-count-wrong", "MPUB's message count is one more than the messages", ("NSQC-PUB-002",),
          rewrite=_only(b"MPUB", _mpub_count_plus_one)),
    Fault("req-delay-in-seconds", "REQ's delay is sent in seconds (1000 ms as 1)", ("NSQC-MSG-002", "NSQC-MSG-006"),
          rewrite=_only(b"REQ", lambda command: wire.encode_command("REQ", command.params[0],
                                                                     int(command.params[1]) // 1000))),
    Fault("backoff-never-left", "after the first RDY 0 every RDY is 0: the backoff never ends",
          ("NSQC-RDY-003", "NSQC-RDY-005", "NSQC-RDY-006"), rewrite_after=_never_leaves_backoff),
    Fault("lookup-twice", "/lookup is asked at start and once more, then never", ("NSQC-LOOKUP-002",
                                                                                 "NSQC-LOOKUP-003"),
          lookup=lambda shared, target: target if shared["queries"] <= 2 else None, nsqd_sees=False),
    Fault("backoff-shrinks", "the first backoff lasts 6 s, the later ones less (a backoff that does not grow)",
          ("NSQC-RDY-007",), late_after=_backoff_end_held(1, 6.0)),
    Fault("backoff-past-cap", "the second backoff lasts 6 s, past the 3 s the client was told is the longest",
          ("NSQC-RDY-008",), late_after=_backoff_end_held(2, 5.0)),
    Fault("reconnect-early", "after the broker closes, one reconnect at once (the client's delay is 0.5 s)",
          ("NSQC-ERR-006",), storm=1),
    Fault("lookup-hammered", "each /lookup poll is three queries at once (a poll loop without its interval)",
          ("NSQC-LOOKUP-002",), lookup_copies=3, nsqd_sees=False),
)}
