"""The monitors of channels that appear or go (first_channel.py, sub_failed.py): a topic without channels keeps
its messages for its first channel (D-36), a DPUB's delay there starts with the channel (D-31), a later channel
gets only later messages (D-37), and SUB is refused as deleted only while a deletion runs (P-SUB-07). Each fires on
the broker bug it names, stays silent on nsqd's behaviour, and says "not judged" where the traffic lacks what it
needs."""

from __future__ import annotations

from conformance import monitoring
from conformance.transcript import Transcript
from conformance.versions import NsqVersion
from nsq_protocol import wire
from nsq_protocol.http import HttpExchange, Request, Response
from nsq_protocol.monitors import BROKER
from nsq_protocol.monitors.channels_known import UNKNOWN
from tests.protocol.test_monitors import ID1, ID2, T0, Traffic
from tests.protocol.test_monitors_stats import stats, topic


def subscribed(traffic: Traffic, name: str, at: float, channel: str, topic_name: str = "t",
               started: bool = True) -> Traffic:
    """``name`` subscribes to ``topic_name``/``channel`` at ``at``, answered OK, and is ready for one."""
    return (traffic.connect(name, at, started).send(at + 0.01, b"SUB", topic_name, channel, conn=name)
            .ok(at + 0.02, name).send(at + 0.03, b"RDY", 1, conn=name))


def published(traffic: Traffic, at: float, body: bytes = b"x", delay_ms: int | None = None) -> Traffic:
    """A producer's PUB (or DPUB of ``delay_ms``) of ``body`` to t, answered OK."""
    if "P" not in traffic.judge.connections:
        traffic.connect("P", at - 0.01)
    if delay_ms is None:
        traffic.send(at, b"PUB", "t", body=body, conn="P")
    else:
        traffic.send(at, b"DPUB", "t", delay_ms, body=body, conn="P")
    return traffic.ok(at + 0.005, "P")


def post(traffic: Traffic, at: float, target: str, body: bytes = b"", status: int = 200) -> Traffic:
    traffic.judge.http_exchange(HttpExchange(T0 + at, Request("POST", target, body), Response(status, b"OK"),
                                             T0 + at + 0.01))
    return traffic


def found(traffic: Traffic, end: float, item: str) -> list[tuple[str, str]]:
    return [violation for violation in traffic.violations(end) if violation[0] == item]


def skipped(traffic: Traffic, item: str) -> set[str]:
    return {why for monitor in traffic.judge.monitors for (skipped_item, why) in monitor.not_judged
            if skipped_item == item}


def channelless(http_seen: bool = True) -> Traffic:
    """A /stats answer shows topic t without channels, holding nothing."""
    return stats(Traffic(http_seen=http_seen), 0.5, {**topic("t"), "depth": 0, "paused": False})


# ---- D-36: the first channel gets what the topic held ----------------------------------------------------------
def test_the_first_channel_gets_what_was_published_before_it():
    traffic = subscribed(published(channelless(), 1.0), "A", 2.0, "c").message(2.1, ID1, body=b"x")
    traffic.send(2.2, b"FIN", ID1.decode())
    assert found(traffic, 12.0, "D-36") == []


def test_a_message_held_for_the_first_channel_and_never_delivered_breaks_d36():
    traffic = subscribed(published(channelless(), 1.0), "A", 2.0, "c")
    assert found(traffic, 12.0, "D-36") == [("D-36", BROKER)]


def test_an_http_pub_is_held_too():
    traffic = subscribed(post(channelless().connect("P", 0.9), 1.0, "/pub?topic=t", b"x"), "A", 2.0, "c")
    assert found(traffic, 12.0, "D-36") == [("D-36", BROKER)]


def test_a_held_message_after_a_possible_restart_is_not_judged():
    traffic = subscribed(published(channelless(), 1.0).close(1.5, "client", "P"), "A", 2.0, "c")
    assert found(traffic, 12.0, "D-36") == []
    assert any("restart" in why for why in skipped(traffic, "D-36"))


def test_a_channel_made_over_http_is_a_first_channel_too():
    traffic = post(published(channelless(), 1.0), 1.5, "/channel/create?topic=t&channel=c")
    traffic = subscribed(traffic, "A", 2.0, "c")
    assert found(traffic, 12.0, "D-36") == [("D-36", BROKER)]


def test_a_topic_with_a_channel_hands_its_messages_to_that_one_not_to_a_later_one():
    traffic = stats(Traffic(), 0.5, {**topic("t", 0, {"channel_name": "old"}), "depth": 0})
    traffic = subscribed(published(traffic, 1.0), "A", 2.0, "c")
    assert found(traffic, 12.0, "D-36") == []


def test_without_a_stats_answer_the_topics_channels_are_not_known():
    traffic = subscribed(published(Traffic(), 1.0), "A", 2.0, "c")
    assert found(traffic, 12.0, "D-36") == []
    assert UNKNOWN in skipped(traffic, "D-36")


def test_without_the_brokers_http_requests_d36_is_not_judged():
    traffic = subscribed(published(channelless(http_seen=False), 1.0), "A", 2.0, "c")
    assert found(traffic, 12.0, "D-36") == []
    assert skipped(traffic, "D-36")


def test_a_sub_without_its_channel_ends_its_connection_and_nothing_else():
    traffic = channelless().connect("A", 1.0).send(1.01, b"SUB", "t", conn="A")
    traffic.error(1.02, b"E_INVALID SUB insufficient number of parameters", "A").close(1.03, BROKER, "A")
    assert found(subscribed(published(traffic, 1.5), "B", 2.0, "c"), 12.0, "D-36") == [("D-36", BROKER)]
    assert traffic.judge.failures == []


def test_two_channels_made_at_once_leave_the_first_unknown():
    traffic = published(channelless(), 1.0).connect("A", 2.0).connect("B", 2.0)
    traffic.send(2.01, b"SUB", "t", "c", conn="A").send(2.011, b"SUB", "t", "d", conn="B").ok(2.02, "A").ok(2.021, "B")
    traffic.send(2.03, b"RDY", 1, conn="A").send(2.03, b"RDY", 1, conn="B")
    assert found(traffic, 12.0, "D-36") == []
    assert any("same time" in why for why in skipped(traffic, "D-36"))


def test_a_topic_emptied_before_its_first_channel_owes_it_nothing():
    traffic = subscribed(post(published(channelless(), 1.0), 1.5, "/topic/empty?topic=t"), "A", 2.0, "c")
    assert found(traffic, 12.0, "D-36") == []


# ---- D-31: a held DPUB's delay starts with the first channel ----------------------------------------------------
def test_a_held_dpub_arrives_its_full_delay_after_the_first_channel():
    traffic = subscribed(published(channelless(), 1.0, delay_ms=2000), "A", 3.0, "c").message(5.1, ID1, body=b"x")
    assert found(traffic, 15.0, "D-31") == []


def test_a_held_dpub_released_by_its_publish_time_breaks_d31():
    traffic = subscribed(published(channelless(), 1.0, delay_ms=2000), "A", 3.0, "c").message(3.5, ID1, body=b"x")
    assert found(traffic, 15.0, "D-31") == [("D-31", BROKER)]


def test_a_held_dpub_never_delivered_breaks_d31():
    traffic = subscribed(published(channelless(), 1.0, delay_ms=2000), "A", 3.0, "c")
    assert found(traffic, 15.0, "D-31") == [("D-31", BROKER)]


def test_a_held_dpub_early_after_a_possible_restart_is_not_judged():
    traffic = published(channelless(), 1.0, delay_ms=2000).close(1.5, "client", "P")
    traffic = subscribed(traffic, "A", 3.0, "c").message(3.5, ID1, body=b"x")
    assert found(traffic, 15.0, "D-31") == []
    assert any("restart" in why for why in skipped(traffic, "D-31"))


def test_a_held_dpubs_body_published_again_is_not_judged_early():
    traffic = subscribed(published(channelless(), 1.0, delay_ms=2000), "A", 3.0, "c")
    traffic = published(traffic, 3.2).message(3.5, ID1, body=b"x")
    assert found(traffic, 15.0, "D-31") == []


def test_a_topic_holding_unknown_messages_leaves_the_delays_start_unjudged():
    traffic = stats(Traffic(), 0.5, {**topic("t"), "depth": 3, "paused": False})
    traffic = subscribed(published(traffic, 1.0, delay_ms=2000), "A", 3.0, "c").message(3.5, ID1, body=b"x")
    assert found(traffic, 15.0, "D-31") == []
    assert any("memory queue" in why for why in skipped(traffic, "D-31"))


# ---- D-37: a later channel gets only later messages ---------------------------------------------------------------
def with_channel_c1() -> Traffic:
    """A consumes t/c1; a /stats answer then shows t with c1 alone; a message is delivered on c1."""
    traffic = subscribed(Traffic(), "A", 0.0, "c1")
    traffic = stats(traffic, 0.5, {**topic("t", 0, {"channel_name": "c1"}), "depth": 0, "paused": False})
    return published(traffic, 1.0).message(1.01, ID1, body=b"x")


def test_a_channel_made_later_gets_only_later_messages():
    traffic = published(subscribed(with_channel_c1(), "B", 2.0, "c2"), 2.5).message(2.51, ID2, conn="B")
    assert found(traffic, 4.0, "D-37") == []


def test_a_channel_made_later_getting_an_earlier_message_breaks_d37():
    traffic = subscribed(with_channel_c1(), "B", 2.0, "c2").message(2.1, ID1, body=b"x", conn="B")
    assert found(traffic, 4.0, "D-37") == [("D-37", BROKER)]


def test_a_channel_listed_already_may_get_an_earlier_message():
    traffic = subscribed(Traffic(), "A", 0.0, "c1")
    traffic = stats(traffic, 0.5, {**topic("t", 0, {"channel_name": "c1"}, {"channel_name": "c2"}), "depth": 0})
    traffic = published(traffic, 1.0).message(1.01, ID1, body=b"x")
    traffic = subscribed(traffic, "B", 2.0, "c2").message(2.1, ID1, body=b"x", conn="B")
    assert found(traffic, 4.0, "D-37") == []


def test_without_a_stats_answer_a_later_channel_is_not_judged():
    traffic = published(subscribed(Traffic(), "A", 0.0, "c1"), 1.0).message(1.01, ID1, body=b"x")
    traffic = subscribed(traffic, "B", 2.0, "c2").message(2.1, ID1, body=b"x", conn="B")
    assert found(traffic, 4.0, "D-37") == []
    assert UNKNOWN in skipped(traffic, "D-37")


def test_a_topic_deleted_since_is_not_known():
    traffic = post(with_channel_c1(), 1.5, "/topic/delete?topic=t")
    traffic = subscribed(traffic, "B", 2.0, "c2").message(2.1, ID1, body=b"x", conn="B")
    assert found(traffic, 4.0, "D-37") == []


# ---- a fresh topic: its whole life in the traffic (a suite case's own), without /stats or the broker's other HTTP ----
def fresh() -> Traffic:
    """Traffic without the broker's other HTTP requests, whose topic t is fresh (u is not)."""
    return Traffic(http_seen=False, fresh=lambda name: name == "t")


def test_a_fresh_topic_held_for_its_first_channel_is_judged_without_stats():
    traffic = subscribed(published(fresh(), 1.0).close(1.5, "client", "P"), "A", 2.0, "c")
    assert found(traffic, 12.0, "D-36") == [("D-36", BROKER)]  # no connection outlived the publish: its life did
    kept = subscribed(published(fresh(), 1.0), "A", 2.0, "c").message(2.1, ID1, body=b"x")
    assert found(kept, 12.0, "D-36") == []


def test_a_topic_not_fresh_is_not_judged_without_stats():
    traffic = subscribed(published(Traffic(http_seen=False, fresh=lambda name: name == "u"), 1.0), "A", 2.0, "c")
    assert found(traffic, 12.0, "D-36") == []
    assert UNKNOWN in skipped(traffic, "D-36")


def test_a_later_channel_of_a_fresh_topic_is_judged_without_stats():
    traffic = published(subscribed(fresh(), "A", 0.0, "c1"), 1.0).message(1.01, ID1, body=b"x")
    traffic = subscribed(traffic, "B", 2.0, "c2").message(2.1, ID1, body=b"x", conn="B")
    assert found(traffic, 4.0, "D-37") == [("D-37", BROKER)]


def test_a_fresh_topic_deleted_is_not_known_again():
    traffic = post(published(subscribed(fresh(), "A", 0.0, "c1"), 1.0).message(1.01, ID1, body=b"x"), 1.5,
                   "/topic/delete?topic=t")
    traffic = subscribed(traffic, "B", 2.0, "c2").message(2.1, ID1, body=b"x", conn="B")
    assert found(traffic, 4.0, "D-37") == []
    assert UNKNOWN in skipped(traffic, "D-37")


def test_a_fresh_topic_after_a_crash_is_not_judged():
    traffic = published(fresh(), 1.0)
    traffic.judge.crash(T0 + 1.5)
    assert found(subscribed(traffic, "A", 2.0, "c"), 12.0, "D-36") == []
    assert UNKNOWN in skipped(traffic, "D-36")


def test_the_suite_tells_a_cases_own_names_fresh_unless_the_target_restarted():
    """conformance/monitoring.judge: the names ``own_names...`` are fresh, but not after a restart (the target gets
    them back from its disk) nor where the release's HTTP exchanges are not fed."""
    transcript = Transcript()
    assert monitoring.judge(transcript, own_names="cf1-").is_fresh("cf1-0")
    assert not monitoring.judge(transcript, own_names="cf1-").is_fresh("cf2-0")
    assert not monitoring.judge(transcript).is_fresh("cf1-0")
    assert not monitoring.judge(transcript, NsqVersion.parse("1.1.0"), own_names="cf1-").is_fresh("cf1-0")
    transcript.note("restart the target: SIGTERM, then start again on the same data path and ports")
    assert not monitoring.judge(transcript, own_names="cf1-").is_fresh("cf1-0")


# ---- P-SUB-07: refused as deleted only while a deletion runs -------------------------------------------------------
DELETED = b"E_SUB_FAILED SUB failed to deleted topic/channel"


def refused(traffic: Traffic, at: float, channel: str = "c#ephemeral", answered_after: float = 0.15,
            text: bytes = DELETED) -> Traffic:
    """B's SUB of t/``channel`` at ``at`` refused ``answered_after`` later; the broker answers C a second later."""
    traffic.connect("B", at - 0.01).send(at, b"SUB", "t", channel, conn="B").error(at + answered_after, text, "B")
    traffic.close(at + answered_after + 0.001, BROKER, "B")
    return traffic.connect("C", at).send(at + 0.01, b"NOP", conn="C").heartbeat(at + 2.0, "C")


def test_a_sub_racing_the_last_consumer_of_its_ephemeral_channel_may_be_refused():
    traffic = subscribed(Traffic(), "A", 0.0, "c#ephemeral").close(1.0, "client", "A")
    assert found(refused(traffic, 1.02), 5.0, "P-SUB-07") == []


def test_a_sub_racing_a_channel_delete_may_be_refused_as_exiting():
    traffic = refused(post(Traffic(), 1.0, "/channel/delete?topic=t&channel=c"), 1.02, "c",
                      text=b"E_SUB_FAILED SUB failed exiting")
    assert found(traffic, 5.0, "P-SUB-07") == []


def test_refused_as_deleted_with_no_deletion_breaks_p_sub_07():
    assert found(refused(Traffic(), 1.0), 5.0, "P-SUB-07") == [("P-SUB-07", BROKER)]


def test_refused_as_deleted_long_after_the_deletion_breaks_p_sub_07():
    traffic = subscribed(Traffic(), "A", 0.0, "c#ephemeral").close(1.0, "client", "A")
    assert found(refused(traffic, 9.0), 12.0, "P-SUB-07") == [("P-SUB-07", BROKER)]


def test_refused_as_deleted_for_a_normal_channel_breaks_p_sub_07():
    traffic = post(Traffic(), 1.0, "/channel/delete?topic=t&channel=c")
    assert found(refused(traffic, 1.02, "c"), 5.0, "P-SUB-07") == [("P-SUB-07", BROKER)]


def test_refused_as_deleted_without_the_retry_breaks_p_sub_07():
    traffic = subscribed(Traffic(), "A", 0.0, "c#ephemeral").close(1.0, "client", "A")
    assert found(refused(traffic, 1.02, answered_after=0.01), 5.0, "P-SUB-07") == [("P-SUB-07", BROKER)]


def test_an_unseen_connection_may_have_been_the_consumer_that_left():
    traffic = Traffic().connect("X", 0.0, started=False)
    assert found(refused(traffic, 1.0), 5.0, "P-SUB-07") == []
    assert skipped(traffic, "P-SUB-07")


def test_a_refusal_the_broker_did_not_outlive_is_not_judged():
    traffic = Traffic().connect("B", 0.99).send(1.0, b"SUB", "t", "c#ephemeral", conn="B")
    traffic.receive(1.15, wire.FRAME_ERROR, DELETED, "B")
    assert found(traffic, 1.2, "P-SUB-07") == []
    assert any("shutting down" in why for why in skipped(traffic, "P-SUB-07"))


def test_only_a_connection_older_than_the_refusal_shows_the_broker_outlived_it():
    traffic = Traffic().connect("B", 0.99).send(1.0, b"SUB", "t", "c#ephemeral", conn="B")
    traffic.error(1.15, DELETED, "B").close(1.151, BROKER, "B")
    traffic.connect("D", 3.0).send(3.01, b"NOP", conn="D").heartbeat(4.0, "D")  # perhaps a broker started again
    assert found(traffic, 5.0, "P-SUB-07") == []
    assert any("shutting down" in why for why in skipped(traffic, "P-SUB-07"))
