"""The monitors of what /stats shows over the life of ephemeral channels and across a restart (ephemeral_gone.py):
each fires on the broker bug it names, stays silent on nsqd's behaviour, and says "not judged" where the traffic
lacks what the rule needs."""

from __future__ import annotations

from nsq_protocol import wire
from nsq_protocol.http import HttpExchange, Request, Response
from nsq_protocol.monitors import CLIENT
from nsq_protocol.monitors.ephemeral_gone import GONE_S, NOT_TIMED, REFUSED, EphemeralChannelGone
from nsq_protocol.monitors.ephemeral_queue import NO_SIZE, EphemeralQueueInMemory
from nsq_protocol.monitors.stats_restart import RestartForgets
from tests.protocol.test_monitors import T0, Traffic
from tests.protocol.test_monitors_stats import START, channel, http, stats, topic

EPHEMERAL = "e#ephemeral"


def consumer_left(timing: bool = True, fin_at: float = 1.0) -> Traffic:
    """A consumer of t/e#ephemeral whose FIN came at ``fin_at``; the broker's FIN only 2 s later."""
    traffic = Traffic(timing=timing).connect("A", 0.0)
    traffic.send(0.1, b"SUB", "t", EPHEMERAL).ok(0.11)
    traffic.judge.close("A", T0 + fin_at + 2.0, CLIENT, client_done=T0 + fin_at)
    return traffic


def gone(traffic: Traffic) -> EphemeralChannelGone:
    return next(monitor for monitor in traffic.judge.monitors if isinstance(monitor, EphemeralChannelGone))


def listed(traffic: Traffic, at: float) -> Traffic:
    return stats(traffic, at, topic("t", 0, channel(EPHEMERAL)))


def violations(traffic: Traffic) -> list:
    return [violation for violation in gone(traffic).violations]


def test_an_ephemeral_channel_listed_just_after_its_last_consumer_left_keeps_d_50():
    traffic = listed(consumer_left(), 1.0 + GONE_S / 2)
    traffic = stats(traffic, 3.5, topic("t", 0))
    assert violations(traffic) == []


def test_an_ephemeral_channel_listed_long_after_its_last_consumers_fin_is_d_50():
    traffic = listed(consumer_left(), 1.0 + GONE_S + 0.2)
    assert [(violation.item, violation.side) for violation in violations(traffic)] == [("D-50", "broker")]


def test_a_consumer_that_remains_keeps_the_channel():
    traffic = Traffic().connect("A", 0.0).connect("B", 0.0)
    traffic.send(0.1, b"SUB", "t", EPHEMERAL).ok(0.11).send(0.1, b"SUB", "t", EPHEMERAL, conn="B").ok(0.11, "B")
    traffic.judge.close("A", T0 + 1.0, CLIENT, client_done=T0 + 1.0)
    assert violations(listed(traffic, 3.0)) == []


def test_a_sub_or_create_after_the_last_consumer_left_makes_it_again():
    traffic = consumer_left().connect("B", 1.2).send(1.3, b"SUB", "t", EPHEMERAL, conn="B").ok(1.31, "B")
    assert violations(listed(traffic, 3.0)) == []
    traffic = http(consumer_left(), 1.2, "POST", "/channel/create?topic=t&channel=e%23ephemeral")
    assert violations(listed(traffic, 3.0)) == []


def test_a_refused_sub_leaves_the_channel_unjudged():
    traffic = Traffic().connect("A", 0.0).connect("B", 0.0)
    traffic.send(0.1, b"SUB", "t", EPHEMERAL).ok(0.11).send(0.2, b"SUB", "t", EPHEMERAL, conn="B")
    traffic.error(0.21, b"E_TOO_MANY_CHANNEL_CONSUMERS max", conn="B").close(0.3, None, "B")
    traffic.judge.close("A", T0 + 1.0, CLIENT, client_done=T0 + 1.0)
    assert violations(listed(traffic, 3.0)) == [] and ("D-50", REFUSED) in gone(traffic).not_judged


def test_answers_asked_before_the_close_reached_the_judge_are_held_against_the_fin():
    """A broker that noticed the FIN late closes late too: the capture's close comes after the answers."""
    traffic = Traffic().connect("A", 0.0)
    traffic.send(0.1, b"SUB", "t", EPHEMERAL).ok(0.11)
    traffic = listed(listed(traffic, 1.2), 1.0 + GONE_S + 0.3)
    traffic.judge.close("A", T0 + 3.0, CLIENT, client_done=T0 + 1.0)
    assert [violation.item for violation in violations(traffic)] == ["D-50"]


def test_the_broker_finishing_a_command_sent_before_the_fin_moves_the_end():
    traffic = Traffic().connect("A", 0.0)
    traffic.send(0.1, b"SUB", "t", EPHEMERAL).ok(0.11).send(0.9, b"PUB", "t", body=b"x").ok(2.0)
    traffic.judge.close("A", T0 + 2.1, CLIENT, client_done=T0 + 1.0)
    assert violations(listed(traffic, 2.0 + GONE_S / 2)) == []


def test_suite_times_are_not_judged():
    traffic = listed(consumer_left(timing=False), 3.0)
    assert violations(traffic) == [] and ("D-50", NOT_TIMED) in gone(traffic).not_judged


# ---- after a restart (stats_restart.py) ---------------------------------------------------------------------------
def restart_monitor(traffic: Traffic) -> RestartForgets:
    return next(monitor for monitor in traffic.judge.monitors if isinstance(monitor, RestartForgets))


def restart_found(traffic: Traffic) -> list[tuple[str, str]]:
    return [(violation.item, violation.side) for violation in restart_monitor(traffic).violations]


def before_restart(http_seen: bool = True) -> Traffic:
    """An ephemeral channel and a topic with 5 messages, shown by an answer; then the broker restarts."""
    traffic = Traffic(http_seen=http_seen).connect("A", 0.0)
    traffic.send(0.1, b"SUB", "t", EPHEMERAL).ok(0.11).send(0.2, b"MPUB", "t", body=wire.mpub_body([b"x"] * 5)).ok(0.3)
    traffic = stats(traffic, 1.0, topic("t", 5, channel(EPHEMERAL), channel("durable")))
    traffic.judge.close("A", T0 + 1.5, None)
    return traffic


def test_after_a_restart_only_the_normal_channel_and_no_old_count_keep_d_54_p_rst_06_p_rst_13():
    traffic = stats(before_restart(), 3.0, topic("t", 0, channel("durable")), start=START + 10)
    traffic.connect("B", 3.1).send(3.2, b"PUB", "t", body=b"y", conn="B").ok(3.3, "B")
    traffic = stats(traffic, 3.5, topic("t", 1, channel("durable")), start=START + 10)
    assert restart_found(traffic) == []


def test_an_ephemeral_channel_back_after_a_restart_is_d_54_and_p_rst_06():
    traffic = stats(before_restart(), 3.0, topic("t", 0, channel(EPHEMERAL), channel("durable")), start=START + 10)
    assert restart_found(traffic) == [("D-54", "broker"), ("P-RST-06", "broker")]


def test_an_ephemeral_channel_subscribed_again_after_the_restart_is_no_violation():
    traffic = before_restart().connect("B", 2.0).send(2.1, b"SUB", "t", EPHEMERAL, conn="B").ok(2.2, "B")
    traffic = stats(traffic, 3.0, topic("t", 0, channel(EPHEMERAL), channel("durable")), start=START + 10)
    assert restart_found(traffic) == []


def test_a_message_count_carried_over_a_restart_is_p_rst_13():
    traffic = stats(before_restart(), 3.0, topic("t", 5, channel("durable")), start=START + 10)
    assert restart_found(traffic) == [("P-RST-13", "broker")]


def test_without_every_http_request_after_a_restart_nothing_is_judged():
    traffic = stats(before_restart(http_seen=False), 3.0, topic("t", 5, channel(EPHEMERAL)), start=START + 10)
    assert restart_found(traffic) == []
    assert {item for item, _ in restart_monitor(traffic).not_judged} == {"D-54", "P-RST-06", "P-RST-13"}


# ---- an ephemeral queue (ephemeral_queue.py) ----------------------------------------------------------------------
def queue_found(traffic: Traffic) -> list[tuple[str, str]]:
    monitor = next(monitor for monitor in traffic.judge.monitors if isinstance(monitor, EphemeralQueueInMemory))
    return [(violation.item, violation.side) for violation in monitor.violations]


def with_size(size: int) -> Traffic:
    traffic = stats(Traffic(), 0.5, topic("t", 0))
    traffic.judge.http_exchange(HttpExchange(T0 + 1.0, Request("GET", "/config/mem_queue_size", b""),
                                             Response(200, str(size).encode()), T0 + 1.01))
    return traffic


def queue(depth: int, backend_depth: int = 0) -> dict:
    return {**topic("t", 6, {**channel(EPHEMERAL, 6), "depth": depth, "backend_depth": backend_depth}),
            "depth": 0, "backend_depth": 0}


def test_an_ephemeral_channel_within_its_memory_queue_and_no_disk_keeps_d_50_d_53():
    assert queue_found(stats(with_size(2), 2.0, queue(2))) == []


def test_an_ephemeral_channel_deeper_than_mem_queue_size_is_d_53_or_d_74_at_zero():
    assert queue_found(stats(with_size(2), 2.0, queue(3))) == [("D-53", "broker")]
    assert queue_found(stats(with_size(0), 2.0, queue(1))) == [("D-74", "broker")]


def test_an_ephemeral_channel_with_a_backend_depth_is_d_50():
    assert queue_found(stats(Traffic(), 2.0, queue(0, 4))) == [("D-50", "broker")]


def test_without_the_size_in_the_same_life_depth_is_not_judged():
    traffic = stats(with_size(2), 2.0, queue(5), start=START + 10)
    monitor = next(monitor for monitor in traffic.judge.monitors if isinstance(monitor, EphemeralQueueInMemory))
    assert queue_found(traffic) == [] and ("D-53", NO_SIZE) in monitor.not_judged
