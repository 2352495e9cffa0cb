"""The monitors of what /stats shows over the life of ephemeral channels and across a restart (ephemeral_gone.py):
each fires on the broker bug it names, stays silent on nsqd's behaviour, and says "not judged" where the traffic
lacks what the rule needs."""

from __future__ import annotations

from nsq_protocol.monitors import CLIENT
from nsq_protocol.monitors.ephemeral_gone import GONE_S, NOT_TIMED, REFUSED, EphemeralChannelGone
from tests.protocol.test_monitors import T0, Traffic
from tests.protocol.test_monitors_stats import channel, http, stats, topic

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
    assert ("D-50", REFUSED) in gone(traffic).not_judged


def test_the_broker_finishing_a_command_sent_before_the_fin_moves_the_end():
    traffic = Traffic().connect("A", 0.0)
    traffic.send(0.1, b"SUB", "t", EPHEMERAL).ok(0.11).send(0.9, b"PUB", "t", body=b"x").ok(2.0)
    traffic.judge.close("A", T0 + 2.1, CLIENT, client_done=T0 + 1.0)
    assert violations(listed(traffic, 2.0 + GONE_S / 2)) == []


def test_suite_times_are_not_judged():
    traffic = listed(consumer_left(timing=False), 3.0)
    assert violations(traffic) == [] and ("D-50", NOT_TIMED) in gone(traffic).not_judged
