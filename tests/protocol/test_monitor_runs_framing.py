"""Runs (events.Run) judged whole by the framing, heartbeat, buffering, unreadable-bytes and SUB-refusal monitors,
and by the command readers that take FINs, exactly as their events one by one, on traffic that makes those rules
fire within a run: fatal and non-fatal errors, the broker's closes, heartbeat gaps, a message's copies in two
channels, RDY windows that fill, unreadable bytes, refused SUBs, TLS refusals, a connection seen from its middle,
and the judge letting go of its messages."""

from __future__ import annotations

import json
from unittest import mock

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from nsq_protocol import monitors, wire
from nsq_protocol.http import HttpExchange, Request, Response
from nsq_protocol.monitors import judge as judge_module
from nsq_protocol.monitors.buffering import FlushedAtOnce
from nsq_protocol.monitors.events import (
    BROKER,
    CLIENT,
    MAGIC,
    STREAM,
    UNREADABLE,
)
from tests.protocol.test_monitor_runs import ANSWER, NS, T0, Feeder, _command, _frame, _id, verdicts

# A, B, C consume topic t (A and B on channels of their own, C on A's or B's); M is seen from its middle; U sends
# nothing before its unreadable bytes; T only identifies before its FINs; P publishes
CONSUMERS = ("A", "B", "C")
CONNECTIONS = (*CONSUMERS, "M", "U", "T")
ACTIONS = ("messages", "messages", "messages", "fins", "fins", "heartbeat", "nop", "rdy", "fatal", "fin_failed",
           "close_broker", "close_client", "publish", "unreadable", "sub_refused", "tls_refused", "delete", "copies",
           "copies", "delivered", "delivered", "answered_close", "failed_close")

# the monitors of these files alone: with no other monitor's tick due within a run, the judge hands over every run
ALONE = tuple(monitor for monitor in monitors.MONITORS if monitor.__module__.rsplit(".", 1)[1] in (
    "framing", "heartbeats", "buffering", "unreadable", "sub_failed", "ephemeral_kept", "stats_restart", "stats_text",
    "ephemeral_gone", "identify_values", "tls"))
setups = st.fixed_dictionaries({"heartbeat": st.sampled_from((None, 1000, -1)), "unbuffered": st.booleans(),
                                "rdy": st.sampled_from((1, 2, 6)), "c_channel": st.sampled_from(("c1", "c2")),
                                "mid": st.booleans(), "keep": st.sampled_from((None, 10))})
gaps = st.one_of(st.floats(0.0, 0.002), st.floats(0.05, 1.5), st.floats(20.0, 60.0))
plans = st.lists(st.tuples(gaps, st.sampled_from(CONNECTIONS), st.sampled_from(ACTIONS), st.integers(1, 8),
                           st.integers(0, 30)), min_size=1, max_size=40)


class Traffic:
    """A plan's traffic as the judge is fed it: ("event", connection, Observed), ("close", connection, ts, side),
    ("http", HttpExchange), in time order; each event a microsecond after the one before."""

    def __init__(self, setup: dict):
        self.setup, self.ts, self.items = setup, T0, []
        self.opened = [name for name in (*CONNECTIONS, "P") if name != "M" or setup["mid"]]
        self.closed: set[str] = set()
        self.held: dict[str, list[bytes]] = {name: [] for name in CONNECTIONS}

    def event(self, conn: str, event: monitors.Observed) -> None:
        self.items.append(("event", conn, event))

    def command(self, conn: str, name: bytes, *params: bytes, body: bytes | None = None) -> None:
        self.ts += 1e-6
        self.event(conn, _command(self.ts, name, *params, body=body))

    def frame(self, conn: str, frame_type: int, data: bytes) -> None:
        self.ts += 1e-6
        self.event(conn, _frame(self.ts, frame_type, data))

    def subscribe(self, conn: str, channel: str, identify: dict | None) -> None:
        if identify is not None:
            self.command(conn, b"IDENTIFY", body=json.dumps(identify).encode())
            unbuffered = {"output_buffer_size": -1, "output_buffer_timeout": 0}
            self.frame(conn, wire.FRAME_RESPONSE, json.dumps(
                ANSWER | (unbuffered if "output_buffer_size" in identify else {})).encode())
        self.command(conn, b"SUB", b"t", channel.encode())
        self.frame(conn, wire.FRAME_RESPONSE, b"OK")
        self.command(conn, b"RDY", b"%d" % self.setup["rdy"])


def traffic(setup: dict, plan) -> Traffic:
    seen = Traffic(setup)
    identify = {"feature_negotiation": True, "msg_timeout": 1000}
    if setup["heartbeat"] is not None:
        identify["heartbeat_interval"] = setup["heartbeat"]
    if setup["unbuffered"]:
        identify["output_buffer_size"] = -1
    seen.subscribe("A", "c1", identify)
    seen.subscribe("B", "c2", {"feature_negotiation": True, "msg_timeout": 1000})
    seen.subscribe("C", setup["c_channel"], None)
    seen.command("T", b"IDENTIFY", body=b"{}")
    seen.frame("T", wire.FRAME_RESPONSE, b"OK")
    for gap, conn, action, count, number in plan:
        seen.ts += gap
        _step(seen, conn, action, count, number)
    return seen


def _step(seen: Traffic, conn: str, action: str, count: int, number: int) -> None:
    if conn in seen.closed or conn not in seen.opened:
        return
    if action == "messages":
        for offset in range(count):
            seen.ts += 0.4 if number % 2 else 0.0  # a run long enough for a heartbeat's deadline to pass in it
            msg_id = _id(number + offset)  # the three channels' copies share IDs
            seen.held[conn].append(msg_id)
            body = b"other" if number % 7 == 3 else b"body %d" % (number + offset)  # C-11 broken
            stamp = int(T0 * NS) + number + offset + (number % 7 == 4)  # so is its stamp
            seen.frame(conn, wire.FRAME_MESSAGE, wire.encode_message(stamp, 2 if number % 5 == 0 else 1, msg_id, body))
    elif action == "copies":  # the IDs in the other channel, right after
        _step(seen, conn, "messages", count, number)
        _step(seen, "B" if conn != "B" else "A", "messages", count, number + (number % 7 in (3, 4)))
    elif action == "delivered":  # the first deliveries of what was just published, on A (D-40, ID-04)
        _step(seen, conn, "publish", count, number)
        seen.ts += 0.3
        if number % 3 == 0:  # A's FINs just before: its last event, and room in its window
            _step(seen, "A", "fins", count, number)
        _step(seen, "A", "messages", count, number)
    elif action == "fins":
        ids = seen.held[conn][:count] or [_id(number)]
        del seen.held[conn][:count]
        for msg_id in ids:
            seen.command(conn, b"FIN", msg_id)
    elif action in ("answered_close", "failed_close"):
        # the broker's close of a connection that kept the rules, then messages on another: no shutdown, or later
        _step(seen, conn, "heartbeat" if action == "answered_close" else "fin_failed", count, number)
        _step(seen, conn, "fins", count, number)
        seen.ts += 0.1
        _step(seen, conn, "close_broker", count, number)
        seen.ts += 0.2 * (number % 8)
        _step(seen, "B" if conn != "B" else "A", "messages", count, number)
    elif action == "heartbeat":
        seen.frame(conn, wire.FRAME_RESPONSE, wire.HEARTBEAT)
    elif action in ("nop", "rdy"):
        seen.command(conn, *((b"NOP",) if action == "nop" else (b"RDY", b"%d" % (number % 7))))
    elif action in ("fatal", "fin_failed", "tls_refused"):
        seen.frame(conn, wire.FRAME_ERROR, {"fatal": b"E_INVALID invalid command",
                                            "fin_failed": b"E_FIN_FAILED FIN %s failed ID not in flight" % _id(number),
                                            "tls_refused": b"E_INVALID cannot SUB in current state (TLS required)"}
                   [action])
    elif action in ("close_broker", "close_client"):
        seen.closed.add(conn)
        seen.ts += 1e-6
        seen.items.append(("close", conn, seen.ts, BROKER if action == "close_broker" else CLIENT))
    elif action == "publish":
        seen.command("P", b"MPUB", b"t", body=wire.mpub_body([b"body %d" % (number + offset)
                                                              for offset in range(count)]))
        seen.frame("P", wire.FRAME_RESPONSE, b"OK")
    elif action == "unreadable":
        seen.ts += 1e-6
        seen.event(conn, monitors.Observed(seen.ts, UNREADABLE, *((MAGIC, "  V3") if number % 2 else
                                                                 (STREAM, "command line longer than 16384"))))
    elif action == "sub_refused":
        seen.command(conn, b"SUB", b"t", b"c#ephemeral")
        seen.ts += 0.2
        seen.frame(conn, wire.FRAME_ERROR, b"E_SUB_FAILED SUB failed exiting")
    elif action == "delete":
        seen.ts += 1e-6
        seen.items.append(("http", HttpExchange(seen.ts, Request("POST", "/channel/delete?topic=t&channel=c1", b""),
                                                Response(200, b""), seen.ts + 1e-4)))


def judged(seen: Traffic, runs: bool, chosen: tuple) -> monitors.Judge:
    """``seen`` through a judge of the ``chosen`` monitors: with ``runs``, each connection's consecutive message
    frames or FINs as runs."""
    judge = monitors.Judge([monitor() for monitor in chosen], timing=True, http_seen=True, release=(1, 3, 0),
                           runs=runs)
    for conn in seen.opened:
        judge.open(conn, T0 - 0.001, conn != "M")
    feeder = Feeder(judge)
    for item in seen.items:
        if item[0] != "event":
            feeder.hand_over()
            if item[0] == "close":
                judge.close(item[1], item[2], item[3])
            else:
                judge.http_exchange(item[1])
                judge.http(monitors.http_action(item[1].ts, item[1].request, item[1].response.status))
            continue
        feeder.observe(item[1], item[2])
    feeder.hand_over()
    judge.finish(seen.ts + 100.0)
    return judge


def judged_both(seen: Traffic, chosen: tuple) -> tuple:
    with mock.patch.object(judge_module, "MESSAGES_KEPT", seen.setup["keep"] or judge_module.MESSAGES_KEPT):
        return verdicts(judged(seen, True, chosen)), verdicts(judged(seen, False, chosen))


def _setup(**changes) -> dict:
    return {"heartbeat": 1000, "unbuffered": False, "rdy": 1, "c_channel": "c2", "mid": False, "keep": None} | changes


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setups, plans)
# rare at random: A's FINs between a publish and its late first delivery; a first delivery late that fills RDY 1;
# a heartbeat's deadline passing within a run; the broker's close of a connection that answered a heartbeat with a
# FIN, or got E_FIN_FAILED, then messages on another; a message again in its channel, then in another
@example(_setup(unbuffered=True), [(0.001, "A", "delivered", 2, 6)])
@example(_setup(), [(0.001, "A", "delivered", 1, 11)])
@example(_setup(), [(0.001, "A", "messages", 8, 1)])
@example(_setup(), [(0.001, "A", "answered_close", 2, 0)])
@example(_setup(), [(0.001, "A", "failed_close", 2, 1)])
@example(_setup(), [(0.001, "A", "messages", 2, 3), (0.001, "A", "messages", 1, 4), (0.001, "B", "messages", 1, 4)])
def test_runs_are_judged_as_their_events_one_by_one(setup, plan):
    seen = traffic(setup, plan)
    for chosen in (monitors.MONITORS, ALONE):
        whole, one_by_one = judged_both(seen, chosen)
        assert whole == one_by_one


def test_a_body_published_twice_by_one_mpub_or_two_is_not_judged_id04():
    """FlushedAtOnce takes an MPUB's bodies at once: one published again, within the MPUB or by another, may have
    been the other's delivery."""
    def found(*publishes: list[bytes]) -> list[str]:
        seen = traffic(_setup(unbuffered=True), [])
        for bodies in publishes:
            seen.command("P", b"MPUB", b"t", body=wire.mpub_body(bodies))
            seen.frame("P", wire.FRAME_RESPONSE, b"OK")
        seen.ts += 0.3
        seen.frame("A", wire.FRAME_MESSAGE, wire.encode_message(int(T0 * NS), 1, _id(1), b"x"))
        flushing = next(monitor for monitor in judged(seen, True, ALONE).monitors
                        if isinstance(monitor, FlushedAtOnce))
        return [violation.item for violation in flushing.violations]
    assert found([b"x", b"y"]) == ["ID-04"]
    assert found([b"x", b"y", b"x"]) == []
    assert found([b"x"], [b"y", b"x"]) == []
