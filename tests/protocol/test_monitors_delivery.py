"""The delivery monitors of conformance/spec/delivery.toml on hand-made traffic: a REQ's delay kept (D-21), a
timed-out message back within a scan of its deadline (D-14, D-13), RDY 0 from SUB (D-04), TOUCH (P-TOUCH-04), a
deletion closing its consumers (D-62), settling by the owner alone (D-10, P-FIN-05); each fires on the broker bug
it names, stays silent on nsqd's behaviour and says "not judged" where the traffic lacks what it needs."""

from __future__ import annotations

import json

from nsq_protocol import monitors, wire
from nsq_protocol.monitors import BROKER, CLIENT, HttpAction
from tests.protocol.test_monitors import ID1, T0, Traffic, consumer


def _not_judged(traffic: Traffic, item: str) -> list[str]:
    return [why for (judged, why) in traffic.judge.not_judged if judged == item]


# ---- D-21: a REQ with a delay defers the message ----------------------------------------------------------

def test_a_message_back_at_once_after_req_with_a_delay_is_d21():
    traffic = consumer(timeout_ms=60_000).message(0.1, ID1).send(0.2, b"REQ", ID1.decode(), 1000)
    assert traffic.message(0.21, ID1, attempts=2).violations(0.5) == [("D-21", BROKER)]


def test_a_message_back_after_its_req_delay_is_kept():
    traffic = consumer(timeout_ms=60_000).message(0.1, ID1).send(0.2, b"REQ", ID1.decode(), 1000)
    assert traffic.message(1.3, ID1, attempts=2).violations(1.5) == []


def test_a_req_delay_above_the_range_a_dpub_error_showed_is_clamped_to_it():
    traffic = consumer(timeout_ms=60_000).send(0.03, b"DPUB", "t", 9000, body=b"x")
    traffic.error(0.04, b"E_INVALID DPUB timeout 9000 out of range 0-500").message(0.1, ID1)
    traffic.send(0.2, b"REQ", ID1.decode(), 1000)
    assert traffic.message(0.75, ID1, attempts=2).violations(1.0) == [], "P-REQ-05: deferred for the 500 ms maximum"


def test_an_early_redelivery_its_timeout_may_explain_is_not_d21():
    traffic = consumer(timeout_ms=1000).message(0.1, ID1).send(0.9, b"REQ", ID1.decode(), 5000)
    assert traffic.message(1.0, ID1, attempts=2).violations(1.5) == []


def test_a_redelivery_to_a_connection_opened_after_the_req_is_not_judged():
    traffic = consumer(timeout_ms=60_000).message(0.1, ID1).send(0.2, b"REQ", ID1.decode(), 1000)
    traffic.connect("B", at=0.3).send(0.31, b"SUB", "t", "c", conn="B").ok(0.32, conn="B")
    traffic.send(0.33, b"RDY", 1, conn="B").message(0.4, ID1, attempts=2, conn="B")
    assert traffic.violations(0.5) == []
    assert _not_judged(traffic, "D-21")


# ---- D-14: a timed-out message comes back within a scan of its deadline --------------------------------

def _subscribed(traffic: Traffic, timeout_ms: int = 1000, max_ms: int = 900_000) -> Traffic:
    """As ``consumer``, on a channel made over HTTP 6 s before: on nsqd's scan list by then."""
    traffic.judge.http(HttpAction(T0 - 6.0, "/channel/create", "t", "c", 200))
    answer = {name: 0 for name in monitors.connection.IDENTIFY_ANSWER_FIELDS} | {
        "max_rdy_count": 2500, "msg_timeout": timeout_ms, "max_msg_timeout": max_ms, "output_buffer_timeout": 250,
        "output_buffer_size": 16_384, "tls_v1": False, "snappy": False, "deflate": False}
    traffic.connect().identify(0.0, {"feature_negotiation": True, "msg_timeout": timeout_ms})
    traffic.receive(0.001, wire.FRAME_RESPONSE, json.dumps(answer).encode())
    return traffic.send(0.01, b"SUB", "t", "c").ok(0.011).send(0.02, b"RDY", 1)


def _made_consumer() -> Traffic:
    return _subscribed(Traffic())


def test_a_timeout_fired_twice_as_late_is_d14():
    traffic = _made_consumer().message(0.1, ID1)
    assert traffic.message(2.1, ID1, attempts=2).violations(2.5) == [("D-14", BROKER)]


def test_a_timeout_within_a_scan_of_its_deadline_is_kept():
    traffic = _made_consumer().message(0.1, ID1)
    assert traffic.message(1.25, ID1, attempts=2).violations(2.5) == []


def test_a_young_channel_may_time_out_up_to_its_list_refresh_late():
    traffic = consumer(timeout_ms=1000).message(0.1, ID1)  # the channel made by its SUB at 0.01
    assert traffic.message(4.9, ID1, attempts=2).violations(6.0) == []
    late = consumer(timeout_ms=1000).message(0.1, ID1)
    assert late.violations(6.0) == [("D-14", BROKER)], "never back, though 5 s and a scan passed"


def test_a_consumer_without_room_or_a_busy_channel_leaves_d14_unjudged_by_silence():
    full = _made_consumer().send(0.5, b"RDY", 0).message(0.1, ID1)
    assert full.violations(3.0) == [], "RDY 0: the broker had nowhere to send it"
    busy = _made_consumer().send(0.05, b"RDY", 2).message(0.1, ID1).message(1.3, b"0000000000000009")
    assert busy.violations(3.0) == [], "another message went out: the queue was not empty"


def test_d14_is_not_judged_without_every_connection():
    traffic = _subscribed(Traffic().connect("X", started=False)).message(0.1, ID1)
    assert traffic.violations(3.0) == []
    assert _not_judged(traffic, "D-14")


# ---- D-04: a subscription starts at RDY 0 -----------------------------------------------------------------

def test_a_message_before_any_rdy_is_d04_and_after_one_is_not():
    traffic = Traffic().connect().send(0.0, b"SUB", "t", "c").ok(0.01).message(0.1, ID1)
    assert traffic.violations(0.5) == [("D-04", BROKER)]
    ready = Traffic().connect().send(0.0, b"SUB", "t", "c").ok(0.01).send(0.02, b"RDY", 1).message(0.1, ID1)
    assert ready.violations(0.5) == []


def test_d04_is_not_judged_without_the_subscription_start():
    traffic = Traffic().connect(started=False).message(0.1, ID1)
    assert traffic.violations(0.5) == []
    assert _not_judged(traffic, "D-01")


# ---- P-TOUCH-04 and D-13: TOUCH and --max-msg-timeout ------------------------------------------------------

def _touched(answered_max: bool) -> Traffic:
    """msg_timeout 2000 without feature negotiation (no answer shows --max-msg-timeout), TOUCHed at 1.6 s."""
    traffic = Traffic().connect().identify(0.0, {"msg_timeout": 2000}).ok(0.001)
    traffic.send(0.01, b"SUB", "t", "c").ok(0.011).send(0.02, b"RDY", 1)
    if answered_max:
        answer = {name: 0 for name in monitors.connection.IDENTIFY_ANSWER_FIELDS} | {
            "max_rdy_count": 2500,
            "msg_timeout": 2000, "max_msg_timeout": 2000, "output_buffer_timeout": 250, "output_buffer_size": 16_384,
            "tls_v1": False, "snappy": False, "deflate": False}
        traffic.connect("B", at=0.03).identify(0.04, {"feature_negotiation": True}, conn="B")
        traffic.receive(0.05, wire.FRAME_RESPONSE, json.dumps(answer).encode(), conn="B")
    return traffic.message(0.1, ID1).send(1.6, b"TOUCH", ID1.decode())


def test_a_touch_ignored_is_p_touch_04_at_nsqds_default_maximum():
    assert _touched(answered_max=False).message(2.15, ID1, attempts=2).violations(2.5) == [("P-TOUCH-04", BROKER)]


def test_a_touched_message_back_at_the_maximum_another_answer_showed_is_kept():
    assert _touched(answered_max=True).message(2.15, ID1, attempts=2).violations(2.5) == []


def test_a_touched_message_kept_past_the_maximum_is_d13_and_one_back_by_it_is_not():
    kept = _subscribed(Traffic(), timeout_ms=2000, max_ms=3000).message(0.1, ID1)
    for at in (1.0, 2.0, 3.0, 4.0, 5.0):
        kept.send(at, b"TOUCH", ID1.decode())
    # the TOUCH at 4 s, after the ceiling, is accepted too: D-12's refusal of a settle after the timeout
    assert kept.violations(5.5) == [("D-13", BROKER), ("D-12", BROKER)]
    capped = _subscribed(Traffic(), timeout_ms=2000, max_ms=3000).message(0.1, ID1)
    for at in (1.0, 2.0):
        capped.send(at, b"TOUCH", ID1.decode())
    assert capped.message(3.2, ID1, attempts=2).violations(5.5) == []


# ---- D-62: a deletion closes the consumers ------------------------------------------------------------------

def _subscriber(timing: bool = True) -> Traffic:
    return Traffic(timing).connect().send(0.0, b"SUB", "t", "c").ok(0.01)


def test_a_consumer_left_open_after_its_channel_was_deleted_is_d62():
    traffic = _subscriber()
    traffic.judge.http(HttpAction(T0 + 0.1, "/channel/delete", "t", "c", 200))
    assert traffic.close(3.0, CLIENT).violations(3.0) == [("D-62", BROKER)]


def test_a_consumer_closed_by_the_broker_after_a_topic_delete_is_kept():
    traffic = _subscriber()
    traffic.judge.http(HttpAction(T0 + 0.1, "/topic/delete", "t", None, 200))
    assert traffic.close(0.12, BROKER).violations(3.0) == []
    other = _subscriber()
    other.judge.http(HttpAction(T0 + 0.1, "/channel/delete", "t", "other", 200))
    assert other.violations(3.0) == [], "another channel's deletion"


def test_d62_is_not_judged_without_wire_times_or_past_the_traffic():
    untimed = _subscriber(timing=False)
    untimed.judge.http(HttpAction(T0 + 0.1, "/channel/delete", "t", "c", 200))
    assert untimed.violations(3.0) == [] and _not_judged(untimed, "D-62")
    ended = _subscriber()
    ended.judge.http(HttpAction(T0 + 0.1, "/channel/delete", "t", "c", 200))
    assert ended.violations(0.5) == [] and _not_judged(ended, "D-62")


# ---- D-15: a consumer's close does not requeue what it had in flight ---------------------------------------

def test_a_message_redelivered_at_once_after_its_consumer_closed_is_d15():
    traffic = consumer(timeout_ms=5000).message(0.1, ID1).close(0.2, CLIENT)
    traffic.connect("B", at=0.3).send(0.31, b"SUB", "t", "c", conn="B").ok(0.32, conn="B")
    traffic.send(0.33, b"RDY", 1, conn="B").message(0.4, ID1, attempts=2, conn="B")
    assert traffic.violations(0.5) == [("D-15", BROKER)]
    waited = consumer(timeout_ms=5000).message(0.1, ID1).close(0.2, CLIENT)
    waited.connect("B", at=0.3).send(0.31, b"SUB", "t", "c", conn="B").ok(0.32, conn="B")
    waited.send(0.33, b"RDY", 1, conn="B").message(5.2, ID1, attempts=2, conn="B")
    assert waited.violations(5.5) == []


# ---- D-10, P-FIN-05: only the owner settles ---------------------------------------------------------------

def _broker_side(traffic: Traffic, end: float) -> list[tuple[str, str]]:
    """B's FIN of a message it never got is the client's P-FIN-04 too."""
    return [violation for violation in traffic.violations(end) if violation[1] == BROKER]


def _two_consumers() -> Traffic:
    """A has ID1 in flight (msg_timeout 60 s); B, on the same channel, has nothing."""
    traffic = consumer(timeout_ms=60_000).message(0.1, ID1)
    traffic.connect("B", at=0.2).send(0.21, b"SUB", "t", "c", conn="B").ok(0.22, conn="B")
    return traffic


def test_a_fin_of_another_consumers_message_accepted_is_p_fin_05_and_a_touch_d10():
    assert _broker_side(_two_consumers().send(0.3, b"FIN", ID1.decode(), conn="B"), 1.0) == [("P-FIN-05", BROKER)]
    assert _broker_side(_two_consumers().send(0.3, b"TOUCH", ID1.decode(), conn="B"), 1.0) == [("D-10", BROKER)]


def test_a_fin_of_another_consumers_message_refused_as_not_owned_is_kept_and_as_not_in_flight_is_not():
    owned = _two_consumers().send(0.3, b"FIN", ID1.decode(), conn="B")
    owned.error(0.31, b"E_FIN_FAILED FIN 0000000000000001 failed client does not own message", conn="B")
    assert _broker_side(owned, 1.0) == []
    lost = _two_consumers().send(0.3, b"FIN", ID1.decode(), conn="B")
    lost.error(0.31, b"E_FIN_FAILED FIN 0000000000000001 failed ID not in flight", conn="B")
    assert _broker_side(lost, 1.0) == [("P-FIN-05", BROKER)]


def test_the_owners_fin_refused_is_d10():
    traffic = consumer(timeout_ms=60_000).message(0.1, ID1).send(0.2, b"FIN", ID1.decode())
    traffic.error(0.21, b"E_FIN_FAILED FIN 0000000000000001 failed ID not in flight")
    assert traffic.violations(1.0) == [("D-10", BROKER)]


def test_d10_is_not_judged_without_the_http_requests_and_an_empty_explains_a_refusal():
    unseen = Traffic(http_seen=False).connect().send(0.0, b"SUB", "t", "c").ok(0.01).send(0.02, b"RDY", 1)
    unseen.message(0.1, ID1).send(1.2, b"FIN", ID1.decode())  # msg_timeout unknown: at least 1 s, so 1.2 s is late
    assert unseen.violations(2.0) == []
    blind = _two_consumers()
    blind.judge.http_seen = False
    assert _broker_side(blind.send(0.3, b"FIN", ID1.decode(), conn="B"), 1.0) == []
    assert _not_judged(blind, "D-10")
    emptied = consumer(timeout_ms=60_000).message(0.1, ID1).send(0.2, b"FIN", ID1.decode())
    emptied.judge.http(HttpAction(T0 + 0.2, "/channel/empty", "t", "c", 200))
    emptied.error(0.21, b"E_FIN_FAILED FIN 0000000000000001 failed ID not in flight")
    assert emptied.violations(1.0) == []
