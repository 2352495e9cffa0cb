"""The monitors that read the judge's ledger (delivery.py, window.py, scan.py, settling.py, late_settles.py,
requeues.py) judge a run (events.Run) as its events one by one where their rules fire inside it: a few IDs
delivered again and again under a small RDY, a connection's commands past what RdyWindow keeps, an owner's FIN
refused, FINs long after their messages timed out."""

from __future__ import annotations

import json
from heapq import heapify, heappop, heappush
from itertools import count
from unittest import mock

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from nsq_protocol import monitors, wire
from nsq_protocol.monitors import window
from nsq_protocol.monitors.events import COMMAND, FINS, MESSAGE
from nsq_protocol.monitors.waits import Waits
from tests.protocol.test_monitor_runs import ANSWER, CONSUMERS, T0, _command, _frame, _id, judged, traffic, verdicts

NS = 1_000_000_000

crowded = st.lists(st.tuples(
    st.one_of(st.floats(0.0, 0.002), st.floats(0.3, 1.5), st.floats(1.5, 7.0)), st.sampled_from(CONSUMERS),
    st.sampled_from(("messages", "messages", "messages", "fins", "fins", "req", "touch", "rdy", "fin_failed")),
    st.integers(1, 8), st.integers(0, 6)), min_size=1, max_size=40)


def _items(judge) -> set[str]:
    return {violation.item for violation in judge.violations}


def _same(events) -> set[str]:
    """``events`` judged with runs and one by one alike; the items found."""
    with_runs = judged(events, runs=True)
    assert verdicts(with_runs) == verdicts(judged(events, runs=False))
    return _items(with_runs)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(crowded)
def test_a_few_messages_again_and_again_under_a_small_rdy(plan):
    """IDs from a small pool (redeliveries inside runs), RDYs up to 6, FINs seconds after their timeout,
    RdyWindow keeping 4 commands and the judge letting go past 6 messages: runs judged as their events one by
    one."""
    with mock.patch.object(window, "KEPT_COMMANDS", 4), mock.patch.object(monitors.judge, "MESSAGES_KEPT", 6):
        _same(traffic(plan))


def _longest_run(events) -> float:
    """How long the longest of ``events``' runs (a connection's consecutive message frames, or FINs) lasts."""
    longest, first, last = 0.0, None, None
    for conn, event in events:
        bulk = (conn, event.kind) if event.kind == MESSAGE or event.kind == COMMAND and event.name == FINS else None
        if bulk is None or first is None or bulk != first[0]:
            first = (bulk, event.ts) if bulk is not None else None
        last = event.ts
        longest = max(longest, last - first[1]) if first is not None else longest
    return longest


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(crowded)
def test_runs_that_no_monitor_takes_one_by_one(plan):
    """The monitors that take runs alone, so that the ledger takes each run at once (judge.observe_run), on runs
    shorter than any wait they start (a tick within a run is the judge's to give, event by event)."""
    with mock.patch.object(window, "KEPT_COMMANDS", 4):
        events = traffic(plan)
        assume(_longest_run(events) < 0.5)
        taking = tuple(monitor for monitor in monitors.MONITORS if monitor.RUNS)
        assert verdicts(judged(events, True, taking)) == verdicts(judged(events, False, taking))


def _consumer(conn: str, ts: float, rdy: int) -> list:
    return [(conn, _command(ts, b"IDENTIFY", body=json.dumps({"feature_negotiation": True,
                                                                "msg_timeout": 1000}).encode())),
            (conn, _frame(ts + 0.0001, wire.FRAME_RESPONSE, json.dumps(ANSWER).encode())),
            (conn, _command(ts + 0.0002, b"SUB", b"t", b"c")),
            (conn, _frame(ts + 0.0003, wire.FRAME_RESPONSE, b"OK")),
            (conn, _command(ts + 0.0004, b"RDY", b"%d" % rdy))]


def _messages(conn: str, ts: float, numbers, attempts: int = 1) -> list:
    return [(conn, _frame(ts + offset * 1e-6, wire.FRAME_MESSAGE,
                          wire.encode_message(int((T0 - 1) * NS), attempts, _id(number), b"body %d" % number)))
            for offset, number in enumerate(numbers)]


def _fins(conn: str, ts: float, numbers) -> list:
    return [(conn, _command(ts + offset * 1e-6, b"FIN", _id(number))) for offset, number in enumerate(numbers)]


def _fin_failed(conn: str, ts: float, number: int, why: bytes) -> tuple:
    return conn, _frame(ts, wire.FRAME_ERROR, b"E_FIN_FAILED FIN %s failed %s" % (_id(number), why))


def test_deliveries_past_the_rdy_inside_a_run():
    """D-01 at the first message of a run under RDY 2 with two in flight, one of which the run brings again (what
    was in flight at each delivery counts the run's earlier messages and the deliveries its later ones replace:
    RdyWindow judges the run once the ledger holds it)."""
    events = [*_consumer("A", T0, 2), *_messages("A", T0 + 0.01, (1, 2)), ("A", _command(T0 + 0.02, b"NOP")),
              *_messages("A", T0 + 0.03, (3, 1, 4), attempts=2)]
    assert "D-01" in _same(events)


def test_a_run_longer_than_its_messages_timeout():
    """D-11, D-14: a run whose first message times out before its last comes, neither delivered again (the NOP:
    no other monitor's tick is due within the run, which the judge would give event by event)."""
    events = [*_consumer("A", T0, 10), ("A", _command(T0 + 2.5, b"NOP")), *_messages("A", T0 + 3.0, (1,)),
              *_messages("A", T0 + 11.0, (2,)), ("A", _command(T0 + 30.0, b"NOP"))]
    assert {"D-11", "D-14"} <= _same(events)


def test_a_message_requeued_for_longer_comes_back_inside_a_run():
    """D-21: REQ 5000, the message back 480 ms later among others."""
    events = [*_consumer("A", T0, 10), *_messages("A", T0 + 0.01, (1, 2)),
              ("A", _command(T0 + 0.02, b"REQ", _id(1), b"5000")), *_messages("A", T0 + 0.5, (3, 1))]
    assert "D-21" in _same(events)


def test_commands_let_go_as_each_came():
    """Past KEPT_COMMANDS, each command lets go of those before its grace: a FIN run whose first one let an RDY go
    while its last one would have let go of more (the lowered RDY it keeps names D-01, not D-04)."""
    events = [*_consumer("A", T0, 10), ("A", _command(T0 + 0.9, b"RDY", b"1")), ("A", _command(T0 + 1.02, b"NOP")),
              *_messages("A", T0 + 1.5, (1,)), *_fins("A", T0 + 2.0, (1,)), *_fins("A", T0 + 2.05, (9,)),
              *_messages("A", T0 + 2.1, (2, 3, 4))]
    with mock.patch.object(window, "KEPT_COMMANDS", 4):
        assert "D-01" in _same(events)


def test_an_owners_fin_refused_inside_a_run():
    """D-10: the owner's FINs of its messages in flight, one refused as if it were another's; one refused a second
    after, past SETTLED_S (its FIN surely worked), is no violation."""
    events = [*_consumer("A", T0, 10), *_messages("A", T0 + 0.01, (1, 2, 3)), *_fins("A", T0 + 0.02, (1, 2, 3)),
              _fin_failed("A", T0 + 0.03, 2, b"client does not own message"),
              *_messages("A", T0 + 1.0, (4, 5, 6)), *_fins("A", T0 + 1.05, (4, 5, 6)),
              _fin_failed("A", T0 + 1.1, 3, b"client does not own message")]
    assert [violation.ts for violation in judged(events, runs=True).violations if violation.item == "D-10"] == \
        [T0 + 0.03]
    assert "D-10" in _same(events)


def test_fins_after_their_messages_timed_out():
    """D-12: FINs long after their messages' msg_timeout (the channel made 6 s before), accepted."""
    events = [*_consumer("A", T0, 10), *_messages("A", T0 + 6.0, (1, 2, 3)), *_fins("A", T0 + 9.0, (1, 2, 3))]
    assert "D-12" in _same(events)


def test_a_run_of_fins_of_another_consumers_messages():
    """D-10 and P-FIN-05: B's FINs of messages in flight to A, accepted."""
    events = [*_consumer("A", T0, 10), *_consumer("B", T0, 10), *_messages("A", T0 + 0.01, (1, 2, 3)),
              *_fins("B", T0 + 0.02, (1, 2, 3)), *_fins("A", T0 + 0.03, (1, 2, 3))]
    assert "P-FIN-05" in _same(events)


waits_plan = st.lists(st.one_of(
    st.tuples(st.just("add"), st.lists(st.floats(0.0, 10.0), min_size=1, max_size=6)),
    st.tuples(st.just("due_by"), st.floats(0.0, 12.0)),
    st.tuples(st.just("keep"), st.integers(2, 3))), max_size=30)


@settings(max_examples=300, deadline=None)
@given(waits_plan)
def test_waits_come_in_the_order_of_a_heap_of_each(plan):
    """waits.Waits gives what a heap of (due, arrival) gives, one entry per message: a run's added at once (its
    dues in any order), taken out by a time (adding meanwhile, as a tick that waits again), kept by key."""
    waits, heap, numbers = Waits(), [], count()  # heap: (due, arrival, key, delivered at)
    for action, value in plan:
        if action == "add":
            keys = [next(numbers) for _ in value]
            waits.add(value, keys, [due - 1.0 for due in value])
            for due, key in zip(value, keys, strict=True):
                heappush(heap, (due, next(numbers), key, due - 1.0))
        elif action == "due_by":
            taken, expected = [], []
            for due, key, delivered in waits.due_by(value):
                taken.append((due, key, delivered))
                if key % 5 == 0:  # waits again, later
                    waits.add([value + 1.0], [key + 1], [delivered])
            while heap and heap[0][0] <= value:
                due, _, key, delivered = heappop(heap)
                expected.append((due, key, delivered))
                if key % 5 == 0:
                    heappush(heap, (value + 1.0, next(numbers), key + 1, delivered))
            assert taken == expected
        else:
            waits.keep(lambda key, divisor=value: key % divisor != 0)
            heap = [entry for entry in heap if entry[2] % value != 0]
            heapify(heap)
        assert waits.first == (heap[0][0] if heap else float("inf"))
