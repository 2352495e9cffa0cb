"""Runs (events.Run) judged whole by the monitors of publishing, pausing, emptying, sampling, the /stats counters and
feeding (ReadyConsumerFed) exactly as one by one, on traffic that makes their rules fire inside runs: DPUBs and
publishes over HTTP, pauses, empties and /stats answers among the bulk, a channel made after a topic got messages,
a consumer that samples."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nsq_protocol import monitors, wire
from nsq_protocol.http import HttpExchange, Request, Response
from nsq_protocol.monitors.events import MESSAGE
from tests.protocol.test_monitor_runs import ANSWER, NS, T0, Feeder, _command, _frame, _id, verdicts

HTTP = "HTTP"
ADDRESSES = {"P": "127.0.0.1:40000", "A": "127.0.0.1:40001", "B": "127.0.0.1:40002"}
MONITORS = ("ReadyConsumerFed", "DeferredWaits", "DeliveredAsPublished", "PublishedIsDelivered",
            "FirstChannelGetsHeld", "LaterChannelGetsLater", "PausedHoldsBack", "EmptiedStaysEmpty", "SampledShare",
            "CountersNeverBehind", "CountedByLocality", "ClientsAsConnected")
ITEMS = frozenset(item for monitor in monitors.MONITORS if monitor.__name__ in MONITORS for item in monitor.ITEMS)


def _ok(ts: float) -> monitors.Observed:
    return _frame(ts, wire.FRAME_RESPONSE, b"OK")


def _consumer(conn: str, ts: float, channel: bytes, sample_rate: int) -> list:
    sampling = {"sample_rate": sample_rate} if sample_rate else {}
    identify = {"feature_negotiation": True, "msg_timeout": 5000, **sampling}
    answer = json.dumps(ANSWER | {"sample_rate": sample_rate, "msg_timeout": 5000}).encode()
    return [(conn, _command(ts, b"IDENTIFY", body=json.dumps(identify).encode())),
            (conn, _frame(ts + 0.0001, wire.FRAME_RESPONSE, answer)),
            (conn, _command(ts + 0.0002, b"SUB", b"t", channel)),
            (conn, _ok(ts + 0.0003)),
            (conn, _command(ts + 0.0004, b"RDY", b"4"))]


def _stats(number: int, delivered: int) -> bytes:
    """A /stats answer whose counts are about ``delivered``: some below what the traffic proved, some above."""
    count = max(0, delivered + number % 5 - 2)
    clients = [{"client_id": "c", "hostname": "h", "version": "V2", "remote_address": ADDRESSES[conn], "state": 3,
                "message_count": count} for conn in ("A", "B")]
    channel = {"channel_name": "c", "paused": False, "message_count": count, "requeue_count": 0,
               "timeout_count": number % 3, "in_flight_count": number % 4, "global_msg_count": count + number % 7,
               "clients": clients}
    return json.dumps({"version": "1.3.0", "start_time": int(T0) - 5, "producers": [], "topics": [
        {"topic_name": "t", "paused": False, "message_count": count, "channels": [channel]}]}).encode()


gaps = st.one_of(st.floats(0.0, 0.002), st.floats(0.002, 0.3), st.floats(0.5, 3.0))
ACTIONS = ("messages", "messages", "messages", "fins", "fins", "req", "rdy", "publish", "dpub", "http_pub", "http_mpub",
           "pause", "unpause", "topic_pause", "empty", "topic_empty", "stats", "sub_b", "sub_b")
steps = st.lists(st.tuples(gaps, st.sampled_from(("A", "B")), st.sampled_from(ACTIONS), st.integers(1, 12),
                           st.integers(0, 40)), min_size=1, max_size=40)


def traffic(plan, sample_rate: int) -> list[tuple[str, object]]:
    """``plan``'s events in time order: a publisher P, whose first MPUB and DPUB come before any channel of the
    topic; consumer A of t/c (sampling at ``sample_rate``), B subscribing to t/d once a step says so; bursts of
    message frames (IDs from a pool, bodies published or not, stamped during the traffic or before it) and FINs;
    HTTP publishes, pauses, empties and /stats answers (HTTP: (target, status, answer body))."""
    ts = T0
    events = [("P", _command(ts, b"MPUB", b"t", body=wire.mpub_body([b"body 1", b"body 2"]))), ("P", _ok(ts + 0.0001)),
              ("P", _command(ts + 0.0002, b"DPUB", b"t", b"500", body=b"body 3")), ("P", _ok(ts + 0.0003))]
    ts += 0.001
    events += _consumer("A", ts, b"c", sample_rate)
    ts += 0.001
    held: dict[str, list] = {"A": [], "B": []}
    deliveries: dict[bytes, int] = {}
    b_subscribed = False
    for gap, conn, action, count, number in plan:
        ts += gap
        if action == "messages" and (conn == "A" or b_subscribed):
            for offset in range(count):
                msg_id = _id(number + offset)
                held[conn].append(msg_id)
                stamp = int((ts - 0.0005) * NS) if number % 5 else int((T0 - 10) * NS)
                deliveries[msg_id] = deliveries.get(msg_id, 0) + 1
                attempts = deliveries[msg_id] if number % 7 != 3 else 1  # C-12 broken now and then
                data = wire.encode_message(stamp, attempts, msg_id, b"body %d" % (number + offset))
                events.append((conn, _frame(ts + offset * 1e-6, wire.FRAME_MESSAGE, data)))
        elif action == "fins":
            ids = held[conn][:count] or [_id(number)]
            del held[conn][:count]
            # a capture's decoder names a FIN's topic: its subscription's
            events += [(conn, _command(ts + offset * 1e-6, b"FIN", msg_id)._replace(topic="t"))
                       for offset, msg_id in enumerate(ids)]
        elif action == "req" and held[conn]:
            events.append((conn, _command(ts, b"REQ", held[conn].pop(0), b"%d" % (number % 2))))
        elif action == "rdy":
            events.append((conn, _command(ts, b"RDY", b"%d" % number)))
        elif action == "publish":
            bodies = [b"body %d" % (number + offset) for offset in range(count)]
            answer = _ok(ts + 0.0001) if number % 7 else _frame(ts + 0.0001, wire.FRAME_ERROR, b"E_BAD_BODY no")
            events += [("P", _command(ts, b"MPUB", b"t", body=wire.mpub_body(bodies))), ("P", answer)]
        elif action == "dpub":
            events += [("P", _command(ts, b"DPUB", b"t", b"%d" % (number * 150), body=b"body %d" % number)),
                       ("P", _ok(ts + 0.0001))]
        elif action == "http_pub":
            defer = f"&defer={number * 100}" if number % 2 else ""
            events.append((HTTP, (ts, f"/pub?topic=t{defer}", 200, b"body %d" % number, b"OK")))
        elif action == "http_mpub":  # its bodies, one a line, are not taken apart: the topic's publishes unknown
            events.append((HTTP, (ts, "/mpub?topic=t", 200, b"body %d\nbody %d" % (number, number + 1), b"OK")))
        elif action in ("pause", "unpause", "empty"):
            events.append((HTTP, (ts, f"/channel/{action}?topic=t&channel={'c' if conn == 'A' else 'd'}", 200, b"",
                                  b"")))
        elif action in ("topic_pause", "topic_empty"):
            events.append((HTTP, (ts, f"/topic/{action[6:]}?topic=t", 200, b"", b"")))
        elif action == "stats":
            delivered = sum(1 for _, event in events if isinstance(event, monitors.Observed) and event.kind == MESSAGE)
            events.append((HTTP, (ts, "/stats?format=json", 200, b"", _stats(number, delivered))))
        elif action == "sub_b" and not b_subscribed:
            b_subscribed = True
            events += _consumer("B", ts, b"d", 0)
    return events


def judged(events, runs: bool, whole: bool = True) -> monitors.Judge:
    """``events`` through a judge (the topic's whole life in them), each connection's consecutive message frames or
    FINs as runs where ``runs``; HTTP requests as a capture's feeder gives them. Not ``whole``: P's start is not in
    the traffic, so what some rules need may be missing."""
    judge = monitors.new_judge(timing=True, http_seen=True, release=(1, 3, 0), runs=runs, fresh=lambda topic: True)
    for conn, address in ADDRESSES.items():
        judge.open(conn, T0 - 0.001, whole or conn != "P", client=address, server="127.0.0.1:4150")
    feeder = Feeder(judge)
    for conn, event in events:
        if conn == HTTP:
            feeder.hand_over()
            ts, target, status, body, answer = event
            request = Request("GET" if target.startswith("/stats") else "POST", target, body)
            judge.http_exchange(HttpExchange(ts, request, Response(status, answer), ts + 0.002))
            action = monitors.http_action(ts, request, status)
            if action is not None:
                judge.http(action)
            continue
        feeder.observe(conn, event)
    feeder.hand_over()
    judge.finish(max(event.ts if isinstance(event, monitors.Observed) else event[0] for _, event in events) + 5.0)
    return judge


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps, st.sampled_from((0, 10)), st.booleans())
def test_runs_are_judged_as_their_events_one_by_one(plan, sample_rate, whole):
    events = traffic(plan, sample_rate)
    assert verdicts(judged(events, True, whole)) == verdicts(judged(events, False, whole))


FIXED = {  # (plan, whole)
    # a consumer with room and messages held for its channel that no rule could judge before (P not whole): the wait
    # its first delivery starts falls due between two bursts of one run, as does what it says of them
    "a wait due within a run": ([(0.01, "A", "publish", 2, 30), (1.0, "A", "messages", 3, 1),
                                 (0.9, "A", "messages", 3, 10)], False),
    # the same within a run of FINs, whose first made room: what it says reads what is in flight by then
    "a wait due within a run of FINs": ([(0.01, "A", "messages", 4, 1), (0.01, "A", "publish", 2, 30),
                                         (1.0, "A", "fins", 1, 0), (0.9, "A", "fins", 3, 0)], False),
    "emptied, then FIN'd": ([(0.01, "A", "messages", 4, 1), (0.01, "A", "empty", 1, 0), (0.01, "A", "fins", 4, 0)],
                            True),
    # an emptied message delivered again is in flight anew: its FIN is no settle of one emptied
    "emptied, delivered again, FIN'd": ([(0.01, "A", "messages", 4, 1), (0.01, "A", "empty", 1, 0),
                                         (0.01, "A", "messages", 4, 1), (0.01, "A", "fins", 8, 0)], True),
    # what /stats counts in flight after an empty against the deliveries since
    "emptied, delivered, counted": ([(0.01, "A", "messages", 4, 1), (0.01, "A", "empty", 1, 0),
                                     (0.01, "A", "messages", 4, 5), (0.01, "A", "stats", 1, 1)], True),
    # messages that timed out come back in a run: the timeouts /stats counts
    "timed out, delivered again, counted": ([(0.01, "A", "messages", 4, 1), (6.0, "A", "messages", 4, 1),
                                             (0.01, "A", "stats", 1, 0)], True),
    # two /stats answers: how far their counts by locality grew against the deliveries between
    "counted twice": ([(0.01, "A", "messages", 4, 1), (0.01, "A", "stats", 1, 0), (0.01, "A", "messages", 4, 5),
                       (0.01, "A", "stats", 1, 2)], True),
    # a text /mpub: no delivery of the topic can be told published or not
    "bodies unknown": ([(0.01, "A", "http_mpub", 1, 1), (0.01, "A", "messages", 4, 1)], True),
}


@pytest.mark.parametrize(("plan", "whole"), FIXED.values(), ids=FIXED.keys())
def test_fixed_plans(plan, whole):
    events = traffic(plan, sample_rate=0)
    assert verdicts(judged(events, True, whole)) == verdicts(judged(events, False, whole))


def test_the_rules_fire_inside_runs():
    """Each rule these monitors judge on a run's events breaks, or says "not judged", somewhere in such traffic: the
    equality above is not that of traffic they all ignore."""
    plan = [(0.01, "A", "messages", 12, 0), (0.6, "A", "fins", 4, 0), (0.01, "A", "empty", 1, 0),
            (0.2, "A", "fins", 4, 0), (0.7, "A", "fins", 4, 0), (0.01, "A", "dpub", 1, 25),
            (0.01, "A", "messages", 6, 25), (0.01, "A", "messages", 12, 1), (0.01, "A", "pause", 1, 0),
            (1.5, "A", "messages", 3, 41), (0.01, "A", "stats", 1, 0), (0.01, "B", "sub_b", 1, 0),
            (0.01, "B", "messages", 8, 0), (0.01, "A", "stats", 1, 1)]
    judge = judged(traffic(plan, sample_rate=10), runs=True)
    fired = {violation.item for violation in judge.violations} | {item for item, _ in judge.not_judged}
    assert fired & ITEMS >= {"P-DPUB-04", "C-09", "D-60", "D-63", "D-45", "D-37", "H-STATS-11", "H-STATS-09",
                             "H-STATS-12"}
