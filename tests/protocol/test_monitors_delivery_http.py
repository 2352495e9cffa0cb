"""The monitors of what nsqd's HTTP actions do to delivery: pausing (D-60, D-61) and emptying (D-63, D-64), each kept,
broken and left unjudged where the traffic lacks what the rule needs."""

from __future__ import annotations

import json

from nsq_protocol.http import HttpExchange, Request, Response
from nsq_protocol.monitors import http_action
from tests.protocol.test_monitors import ID1, ID2, T0, consumer


def post(traffic, at: float, target: str, status: int = 200, answered_after: float = 0.002):
    """An HTTP request to the nsqd, fed as a capture's feeder feeds it: the exchange, then what it does to delivery."""
    request = Request("POST", target, b"")
    traffic.judge.http_exchange(HttpExchange(T0 + at, request, Response(status, b""), T0 + at + answered_after))
    action = http_action(T0 + at, request, status)
    if action is not None:
        traffic.judge.http(action)
    return traffic


def stats(traffic, at: float, channel: dict, topic: dict | None = None):
    document = {"version": "1.3.0", "start_time": int(T0), "topics": [
        {"topic_name": "t", "paused": False, "channels": [{"channel_name": "c", **channel}], **(topic or {})}]}
    request = Request("GET", "/stats?format=json&topic=t", b"")
    traffic.judge.http_exchange(HttpExchange(T0 + at, request, Response(200, json.dumps(document).encode()),
                                             T0 + at + 0.002))
    return traffic


def published(traffic, at: float, body: bytes):
    """A PUB on connection P, answered OK."""
    traffic.send(at, b"PUB", "t", body=body, conn="P")
    return traffic.ok(at + 0.001, conn="P")


def subscribed(rdy: int = 1, timing: bool = True):
    traffic = consumer(rdy=rdy, timing=timing)
    return traffic.connect("P", at=0.0)


def items(traffic, end: float = 8.0):
    return [item for item, side in traffic.violations(end) if item in ("D-60", "D-61", "D-63", "D-64")]


def not_judged(traffic, item: str) -> int:
    return sum(count for (judged, _), count in traffic.judge.not_judged.items() if judged == item)


# ---- D-60: a paused channel ------------------------------------------------------------------------------

def test_a_paused_channel_that_delivers_nothing_new_keeps_d60():
    traffic = post(subscribed(), 0.1, "/channel/pause?topic=t&channel=c")
    published(traffic, 0.2, b"held")
    post(traffic, 1.0, "/channel/unpause?topic=t&channel=c")
    traffic.message(1.01, ID1, body=b"held", published=0.2)
    assert items(traffic) == []


def test_a_message_published_after_the_pause_and_delivered_breaks_d60():
    traffic = post(subscribed(), 2.1, "/channel/pause?topic=t&channel=c")
    published(traffic, 2.2, b"held")
    traffic.message(2.21, ID1, body=b"held", published=2.2)
    assert items(traffic) == ["D-60"]


def test_a_delivery_long_into_the_pause_breaks_d60_whatever_its_publish():
    traffic = post(subscribed(), 0.1, "/channel/pause?topic=t&channel=c")
    traffic.message(1.5, ID1, body=b"old")  # published before the traffic
    assert items(traffic) == ["D-60"]


def test_what_the_pump_had_buffered_at_the_pause_may_still_go_out():
    traffic = subscribed()
    published(traffic, 0.05, b"early")
    post(traffic, 0.1, "/channel/pause?topic=t&channel=c")
    traffic.message(0.2, ID1, body=b"early", published=0.05)
    assert items(traffic) == []


def test_a_stats_answer_showing_the_channel_unpaused_breaks_d60():
    traffic = post(subscribed(), 0.1, "/channel/pause?topic=t&channel=c")
    stats(traffic, 0.3, {"paused": False, "in_flight_count": 0})
    assert items(traffic) == ["D-60"]
    kept = post(subscribed(), 0.1, "/channel/pause?topic=t&channel=c")
    stats(kept, 0.3, {"paused": True, "in_flight_count": 0})
    assert items(kept) == []


def test_a_pause_without_the_broker_http_or_wire_times_is_not_judged():
    untimed = post(subscribed(timing=False), 0.1, "/channel/pause?topic=t&channel=c")
    untimed.message(1.5, ID1, body=b"old")
    assert items(untimed) == [] and not_judged(untimed, "D-60")
    unseen = post(subscribed(), 0.1, "/channel/pause?topic=t&channel=c")
    unseen.judge.http_seen = False
    unseen.message(1.5, ID1, body=b"old")
    assert items(unseen) == [] and not_judged(unseen, "D-60")


# ---- D-61: a paused topic --------------------------------------------------------------------------------

def test_a_paused_topic_keeps_what_is_published_after_the_pause_d61():
    traffic = post(subscribed(), 2.1, "/topic/pause?topic=t")
    published(traffic, 2.2, b"held")
    traffic.message(2.5, ID1, body=b"held", published=2.2)
    assert items(traffic) == ["D-61"]
    kept = subscribed()
    published(kept, 0.05, b"in-channel")
    post(kept, 0.1, "/topic/pause?topic=t")
    kept.message(0.5, ID1, body=b"in-channel", published=0.05)  # it had reached the channel: it goes on
    published(kept, 0.6, b"held")
    post(kept, 1.0, "/topic/unpause?topic=t")
    kept.message(1.1, ID2, body=b"held", published=0.6)
    assert items(kept) == []


def test_a_topic_pause_with_publishes_unseen_is_not_judged():
    traffic = post(subscribed(), 2.1, "/topic/pause?topic=t")
    traffic.judge.all_started = False
    published(traffic, 2.2, b"held")
    traffic.message(2.5, ID1, body=b"held", published=2.2)
    assert items(traffic) == []


# ---- D-63: an emptied channel ----------------------------------------------------------------------------

def test_a_fin_after_the_empty_refused_keeps_d63():
    traffic = subscribed().message(0.1, ID1, body=b"e1")
    post(traffic, 0.2, "/channel/empty?topic=t&channel=c")
    traffic.send(0.3, b"FIN", ID1).error(0.301, b"E_FIN_FAILED FIN " + ID1 + b" failed ID not in flight")
    assert items(traffic) == []


def test_a_fin_after_the_empty_accepted_breaks_d63():
    traffic = subscribed().message(0.1, ID1, body=b"e1")
    post(traffic, 0.2, "/channel/empty?topic=t&channel=c")
    traffic.send(0.3, b"FIN", ID1)
    assert items(traffic) == ["D-63"]


def test_a_stats_answer_counting_emptied_messages_in_flight_breaks_d63():
    traffic = subscribed().message(0.1, ID1, body=b"e1")
    post(traffic, 0.2, "/channel/empty?topic=t&channel=c")
    stats(traffic, 0.3, {"in_flight_count": 1, "paused": False})
    assert items(traffic) == ["D-63"]
    kept = subscribed().message(0.1, ID1, body=b"e1")
    post(kept, 0.2, "/channel/empty?topic=t&channel=c")
    kept.message(0.25, ID2, body=b"new")  # taken by the pump as the channel was emptied
    stats(kept, 0.3, {"in_flight_count": 1, "paused": False})
    assert items(kept) == []


def test_a_message_queued_before_the_empty_delivered_after_it_breaks_d63():
    traffic = subscribed()
    published(traffic, 1.5, b"queued")
    post(traffic, 4.0, "/channel/empty?topic=t&channel=c")
    traffic.message(5.0, ID1, body=b"queued", published=1.5)
    assert items(traffic) == ["D-63"]


def test_an_empty_without_wire_times_is_not_judged():
    traffic = subscribed(timing=False).message(0.1, ID1, body=b"e1")
    post(traffic, 0.2, "/channel/empty?topic=t&channel=c")
    traffic.send(0.3, b"FIN", ID1)
    assert items(traffic) == [] and not_judged(traffic, "D-63")


# ---- D-64: an emptied topic ------------------------------------------------------------------------------

def test_what_waited_in_the_paused_topic_is_gone_after_its_empty_d64():
    traffic = subscribed(rdy=5)
    post(traffic, 2.1, "/topic/pause?topic=t")
    published(traffic, 2.2, b"in-topic")
    post(traffic, 2.3, "/topic/empty?topic=t")
    post(traffic, 2.4, "/topic/unpause?topic=t")
    traffic.message(2.5, ID1, body=b"in-topic", published=2.2)
    assert items(traffic) == ["D-64"]
    kept = subscribed(rdy=5)
    published(kept, 0.05, b"in-channel")
    post(kept, 0.1, "/topic/pause?topic=t")
    post(kept, 0.3, "/topic/empty?topic=t")
    post(kept, 0.4, "/topic/unpause?topic=t")
    kept.message(0.5, ID1, body=b"in-channel", published=0.05)
    assert items(kept) == []


def test_a_message_stamped_before_the_traffic_is_not_placed():
    traffic = subscribed(rdy=5)
    post(traffic, 0.1, "/topic/pause?topic=t")
    post(traffic, 0.3, "/topic/empty?topic=t")
    post(traffic, 0.4, "/topic/unpause?topic=t")
    traffic.message(0.5, ID1, body=b"older")
    assert items(traffic) == [] and not_judged(traffic, "D-63")

