"""SUB (P-SUB-01, P-SUB-02, P-SUB-03, P-SUB-04, P-SUB-05, P-SUB-06, P-SUB-07, P-SUB-08 in
conformance/spec/commands.toml)."""

import pytest

from conformance.client import Unsupported

requirement = pytest.mark.requirement


@requirement("NSQ-SUB-001", "NSQ-HTTP-008")
def test_sub_creates_topic_and_channel_at_rdy_0(nsq):
    """PUB, then SUB on a new channel: OK, nothing delivered before RDY, /stats shows the channel with
    the message; RDY 1 delivers it (P-SUB-08, D-04, D-36; rec-0101)."""
    topic = nsq.topic()
    nsq.connect().publish(topic, b"wait")
    conn = nsq.connect()
    conn.subscribe(topic, "c")
    conn.expect_silence(0.5, what="nothing is delivered at RDY 0 (D-04)")
    if nsq.http.address:
        channel = nsq.http.channel_stats(topic, "c")
        nsq.verify.that("SUB created the channel", channel is not None, "channel c in /stats", channel)
        nsq.verify.equal("channel depth before RDY", 1, channel["depth"])
    conn.command("RDY", 1)
    conn.expect_message(b"wait", attempts=1)


@requirement("NSQ-SUB-002")
def test_second_sub_is_fatal(nsq):
    """(P-SUB-01; rec-0095)"""
    topic = nsq.topic()
    conn = nsq.connect()
    conn.subscribe(topic, "c")
    conn.command("SUB", topic, "d")
    conn.expect_error("E_INVALID", "cannot SUB in current state")


@requirement("NSQ-SUB-002", "NSQ-CLS-002")
def test_sub_after_cls_is_fatal(nsq):
    """(P-SUB-01, P-CLS-03; rec-0102)"""
    topic = nsq.topic()
    conn = nsq.connect()
    conn.subscribe(topic, "c")
    conn.command("CLS")
    conn.expect_response(b"CLOSE_WAIT")
    conn.command("SUB", topic, "c")
    conn.expect_error("E_INVALID", "cannot SUB in current state")


@requirement("NSQ-SUB-003")
def test_heartbeat_check_comes_before_parameter_count(nsq):
    """Heartbeats disabled and a bare 'SUB': the heartbeat error wins (P-SUB-02; rec-0096)."""
    conn = nsq.connect()
    conn.identify({"heartbeat_interval": -1})
    conn.send(b"SUB\n")
    conn.expect_error("E_INVALID", "cannot SUB with heartbeats disabled")


@requirement("NSQ-SUB-004")
def test_sub_with_one_parameter(nsq):
    """(P-SUB-03; rec-0097)"""
    conn = nsq.connect()
    conn.command("SUB", nsq.topic())
    conn.expect_error("E_INVALID", "SUB insufficient number of parameters")


@requirement("NSQ-SUB-004")
@pytest.mark.parametrize("topic, channel, code, text", [
    ("bad!", "c", "E_BAD_TOPIC", 'SUB topic name "bad!" is not valid'),
    (None, "bad$", "E_BAD_CHANNEL", 'SUB channel name "bad$" is not valid'),
    ("bad!", "bad$", "E_BAD_TOPIC", 'SUB topic name "bad!" is not valid')],
    ids=["bad-topic", "bad-channel", "both-bad-topic-first"])
def test_sub_invalid_names(nsq, topic, channel, code, text):
    """(P-SUB-04; rec-0098, rec-0099, rec-0100)"""
    conn = nsq.connect()
    conn.command("SUB", topic or nsq.topic(), channel)
    conn.expect_error(code, text)


@requirement("NSQ-SUB-005")
def test_a_sub_past_max_channel_consumers_is_fatal(nsq):
    """--max-channel-consumers N: N consumers of a channel, then the next SUB to it is a fatal E_SUB_FAILED naming
    topic, channel and limit, while a SUB to another channel of the topic works (P-SUB-06, X-10; rec-0248, N = 1)."""
    limit = nsq.limits.get("max_channel_consumers", 0)
    if not limit:
        raise Unsupported(f"profile {nsq.profile.name}: --max-channel-consumers 0, no limit to reach (nsqd-tight has "
                          "one)")
    topic = nsq.topic()
    for _ in range(limit):
        nsq.connect().subscribe(topic, "c")
    refused, other = nsq.connect(), nsq.connect()
    other.subscribe(topic, "c2")
    refused.command("SUB", topic, "c")
    refused.expect_error("E_SUB_FAILED", f"SUB failed consumers for {topic}:c exceeds limit of {limit}")
