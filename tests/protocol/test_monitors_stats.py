"""The monitors that hold nsqd's /stats answers against the traffic (stats_counters.py): each fires on a counter
behind what the traffic proves, stays silent where the counters moved on, and says "not judged" where the traffic
lacks what it needs."""

from __future__ import annotations

import json

from nsq_protocol.http import HttpExchange, Request, Response
from nsq_protocol.monitors import ephemeral_kept
from nsq_protocol.monitors.ephemeral_kept import EphemeralKept
from nsq_protocol.monitors.stats_counters import EPHEMERAL_AGAIN, OLDER, RESTARTED, UNSEEN_HTTP, CountersNeverBehind
from tests.protocol.test_monitors import ID1, ID2, T0, Traffic, consumer

START = int(T0) - 100  # the broker's start_time: before the traffic


def stats(traffic: Traffic, at: float, *topics: dict, start: int = START, query: str = "format=json") -> Traffic:
    document = {"version": "1.3.0", "health": "OK", "start_time": start, "topics": list(topics), "producers": []}
    traffic.judge.http_exchange(HttpExchange(T0 + at, Request("GET", f"/stats?{query}", b""),
                                             Response(200, json.dumps(document).encode()), T0 + at + 0.01))
    return traffic


def http(traffic: Traffic, at: float, method: str, target: str, body: bytes = b"", status: int = 200) -> Traffic:
    traffic.judge.http_exchange(HttpExchange(T0 + at, Request(method, target, body), Response(status, b"OK"),
                                             T0 + at + 0.01))
    return traffic


def topic(name: str = "t", message_count: int = 0, *channels: dict) -> dict:
    return {"topic_name": name, "message_count": message_count, "channels": list(channels)}


def channel(name: str = "c", message_count: int = 0, requeue_count: int = 0, timeout_count: int = 0) -> dict:
    return {"channel_name": name, "message_count": message_count, "requeue_count": requeue_count,
            "timeout_count": timeout_count}


def counters(traffic: Traffic) -> CountersNeverBehind:
    return next(monitor for monitor in traffic.judge.monitors if isinstance(monitor, CountersNeverBehind))


def found(traffic: Traffic, end: float) -> list[tuple[str, str]]:
    return [found for found in traffic.violations(end) if found[0] in CountersNeverBehind.ITEMS]


def skipped(traffic: Traffic) -> set[str]:
    return {why for (_, why) in counters(traffic).not_judged}


def published(traffic: Traffic, at: float, times: int = 1) -> Traffic:
    """A producer's PUBs to topic t, each answered OK."""
    traffic.connect("P", at)
    for index in range(times):
        traffic.send(at + 0.01 + index / 100, b"PUB", "t", body=b"x", conn="P").ok(at + 0.015 + index / 100, "P")
    return traffic


def delivered_and_requeued() -> Traffic:
    """A message published during the traffic, REQ'd at once and delivered again."""
    traffic = consumer(timeout_ms=2000)
    traffic.message(0.1, ID1, published=0.05).send(0.2, b"REQ", ID1, 0).message(0.3, ID1, attempts=2, published=0.05)
    return traffic


# ---- topics: message_count never below the publishes answered ---------------------------------------------

def test_a_topics_message_count_at_least_the_publishes_answered_keeps_h_stats_11():
    traffic = stats(published(Traffic(), 0.0, times=2), 1.0, topic("t", 2))
    assert found(traffic, 2.0) == []


def test_a_topics_message_count_behind_the_publishes_answered_is_h_stats_11():
    traffic = stats(published(Traffic(), 0.0, times=2), 1.0, topic("t", 1))
    assert found(traffic, 2.0) == [("H-STATS-11", "broker")]


def test_an_http_publish_answered_before_the_request_counts_once_the_brokers_life_is_known():
    traffic = stats(Traffic(), 0.0)
    http(traffic, 0.5, "POST", "/pub?topic=t", b"x")
    stats(traffic, 0.505, topic("t", 0))  # asked before the publish was answered: not yet a floor
    stats(traffic, 1.0, topic("t", 0))
    assert found(traffic, 2.0) == [("H-STATS-11", "broker")]


def test_a_deleted_topic_starts_its_floor_again():
    traffic = published(Traffic(), 0.0, times=2)
    http(traffic, 0.5, "POST", "/topic/delete?topic=t")
    assert found(stats(traffic, 1.0, topic("t", 0)), 2.0) == []


def test_publishes_before_every_connection_closed_and_before_any_answer_are_no_floor():
    traffic = published(Traffic(), 0.0, times=2).close(0.5, "client", "P")  # the broker may restart unseen now
    assert found(stats(traffic, 1.0, topic("t", 0)), 2.0) == []


def test_without_every_http_request_in_the_traffic_the_counters_are_not_judged():
    traffic = stats(published(Traffic(http_seen=False), 0.0, times=2), 1.0, topic("t", 0))
    assert found(traffic, 2.0) == []
    assert skipped(traffic) == {UNSEEN_HTTP}


def test_an_ephemeral_topic_is_not_judged():
    traffic = Traffic().connect("P")
    traffic.send(0.01, b"PUB", "t#ephemeral", body=b"x", conn="P").ok(0.02, "P")
    assert found(stats(traffic, 1.0, topic("t#ephemeral", 0)), 2.0) == []
    assert skipped(traffic) == {EPHEMERAL_AGAIN}


def test_a_restart_seen_in_start_time_starts_every_floor_again():
    traffic = stats(published(Traffic(), 0.0, times=2), 1.0, topic("t", 2))
    stats(traffic, 2.0, topic("t", 0), start=START + 50)
    assert found(traffic, 3.0) == []
    assert RESTARTED in skipped(traffic)


# ---- channels: message_count, requeue_count, timeout_count ------------------------------------------------

def test_counters_that_cover_the_delivery_and_its_requeue_keep_d_20():
    traffic = stats(delivered_and_requeued(), 1.0, topic("t", 1, channel("c", 1, requeue_count=1)))
    assert found(traffic, 2.0) == []


def test_a_requeue_count_behind_a_req_that_brought_the_message_back_is_d_20():
    traffic = stats(delivered_and_requeued(), 1.0, topic("t", 1, channel("c", 1, timeout_count=1)))
    assert found(traffic, 2.0) == [("D-20", "broker")]


def test_no_count_of_the_message_coming_back_is_h_stats_11():
    traffic = stats(delivered_and_requeued(), 1.0, topic("t", 1, channel("c", 1)))
    assert sorted(found(traffic, 2.0)) == [("D-20", "broker"), ("H-STATS-11", "broker")]


def test_a_channel_message_count_behind_its_first_deliveries_is_h_stats_11():
    traffic = consumer(rdy=2).message(0.1, ID1, published=0.05).message(0.11, ID2, published=0.05)
    assert found(stats(traffic, 1.0, topic("t", 2, channel("c", 1))), 2.0) == [("H-STATS-11", "broker")]


def test_a_message_back_unsettled_is_a_timeout_d_22():
    traffic = consumer(timeout_ms=1000).message(0.1, ID1, published=0.05).message(1.3, ID1, attempts=2,
                                                                                 published=0.05)
    assert found(stats(traffic, 2.0, topic("t", 1, channel("c", 1, timeout_count=1))), 3.0) == []
    traffic = consumer(timeout_ms=1000).message(0.1, ID1, published=0.05).message(1.3, ID1, attempts=2,
                                                                                 published=0.05)
    assert found(stats(traffic, 2.0, topic("t", 1, channel("c", 1, requeue_count=1))), 3.0) == [("D-22", "broker")]


def test_a_req_near_the_timeout_proves_only_the_sum():
    traffic = consumer(timeout_ms=1000).message(0.1, ID1, published=0.05).send(1.05, b"REQ", ID1, 0)
    traffic.message(1.2, ID1, attempts=2, published=0.05)
    assert found(stats(traffic, 2.0, topic("t", 1, channel("c", 1, timeout_count=1))), 3.0) == []


def test_messages_published_before_the_brokers_start_are_not_judged():
    traffic = consumer().message(0.1, ID1, published=-200.0)  # restored from disk: not counted in this life
    assert found(stats(traffic, 1.0, topic("t", 0, channel("c", 0))), 2.0) == []
    assert skipped(traffic) == {OLDER}


def test_without_timing_only_the_sum_is_judged():
    traffic = consumer(timing=False).message(0.1, ID1, published=0.05).send(0.2, b"REQ", ID1, 0)
    traffic.message(0.3, ID1, attempts=2, published=0.05)
    assert found(stats(traffic, 1.0, topic("t", 1, channel("c", 1, timeout_count=1))), 2.0) == []


def test_a_text_answer_is_left_to_the_documents_monitor():
    traffic = stats(published(Traffic(), 0.0, times=2), 1.0, topic("t", 0), query="format=text")
    assert found(traffic, 2.0) == []



# ---- ephemeral topics and channels that must stay ---------------------------------------------------------

def ephemeral_created() -> Traffic:
    """An answer tells the broker's life, then /channel/create of an ephemeral channel nobody subscribes to."""
    return http(stats(Traffic(), 0.0), 0.5, "POST", "/channel/create?topic=t&channel=e%23ephemeral")


def kept(traffic: Traffic) -> EphemeralKept:
    return next(monitor for monitor in traffic.judge.monitors if isinstance(monitor, EphemeralKept))


def ephemeral_found(traffic: Traffic, end: float) -> list[tuple[str, str]]:
    return [found for found in traffic.violations(end) if found[0] in EphemeralKept.ITEMS]


def test_an_ephemeral_channel_made_over_http_and_listed_keeps_d_51():
    traffic = stats(ephemeral_created(), 1.0, topic("t", 0, channel("e#ephemeral")))
    assert ephemeral_found(traffic, 2.0) == []


def test_an_ephemeral_channel_made_over_http_and_never_subscribed_gone_is_d_51():
    traffic = stats(ephemeral_created(), 1.0, topic("t", 0))
    assert ephemeral_found(traffic, 2.0) == [("D-51", "broker")]


def test_an_ephemeral_channel_a_client_subscribed_to_is_not_judged():
    traffic = ephemeral_created().connect("B", 0.6).send(0.7, b"SUB", "t", "e#ephemeral", conn="B")
    traffic.ok(0.71, "B").close(0.8, "client", "B")
    assert ephemeral_found(stats(traffic, 1.0, topic("t", 0)), 2.0) == []
    assert {item for item, _ in kept(traffic).not_judged} == {"D-51"}


def test_an_ephemeral_channel_made_before_any_answer_told_the_brokers_life_is_no_claim():
    traffic = http(Traffic(), 0.5, "POST", "/channel/create?topic=t&channel=e%23ephemeral")
    assert ephemeral_found(stats(traffic, 1.0, topic("t", 0)), 2.0) == []


def test_an_ephemeral_topic_with_a_normal_channel_kept_keeps_d_52_and_dropped_breaks_it():
    shown = topic("t#ephemeral", 0, channel("c"))
    traffic = stats(stats(Traffic(), 0.0, shown), 1.0, shown)
    assert ephemeral_found(traffic, 2.0) == []
    traffic = stats(stats(Traffic(), 0.0, shown), 1.0)
    assert ephemeral_found(traffic, 2.0) == [("D-52", "broker")]


def test_an_ephemeral_topic_whose_normal_channel_was_deleted_may_go():
    traffic = http(stats(Traffic(), 0.0, topic("t#ephemeral", 0, channel("c"))), 0.5, "POST",
                   "/channel/delete?topic=t%23ephemeral&channel=c")
    assert ephemeral_found(stats(traffic, 1.0), 2.0) == []


def test_without_every_http_request_the_ephemeral_ones_are_not_judged():
    shown = topic("t#ephemeral", 0, channel("c"))
    traffic = stats(stats(Traffic(http_seen=False), 0.0, shown), 1.0)
    assert ephemeral_found(traffic, 2.0) == []
    assert {why for _, why in kept(traffic).not_judged} == {ephemeral_kept.UNSEEN_HTTP}
