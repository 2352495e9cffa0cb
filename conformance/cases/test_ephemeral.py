"""Ephemeral topics and channels (D-50, D-51, D-52, D-53, D-54 in conformance/spec/delivery.toml). Observed through
/stats: HTTP required."""

import pytest

from nsq_protocol import wire

requirement = pytest.mark.requirement


@requirement("NSQ-EPH-001")
def test_ephemeral_channel_goes_with_its_last_client(nsq):
    """(D-50; rec-0194)"""
    nsq.require("http")
    topic = nsq.topic()
    first, second = nsq.connect(), nsq.connect()
    first.subscribe(topic, "e#ephemeral")
    second.subscribe(topic, "e#ephemeral")
    first.close()
    nsq.wait(0.3, "let the server notice the first disconnect")
    nsq.verify.that("the channel stays while a client remains",
                    nsq.http.channel_stats(topic, "e#ephemeral") is not None, "channel present", "gone")
    second.close()
    gone = nsq.until(lambda: nsq.http.channel_stats(topic, "e#ephemeral") is None, 1.0,
                     "the channel is gone from /stats (deletion is asynchronous; rec-0194 waited 300 ms)")
    nsq.verify.that("ephemeral channel deleted after its last client left (the disconnect noticed at once, not "
                    "at a later write)", gone, "gone within 1 s", "still in /stats")


@requirement("NSQ-EPH-002")
def test_ephemeral_channel_created_over_http_stays(nsq):
    """(D-51, H-08: '#' sent as %23; rec-0195)"""
    nsq.require("http")
    topic = nsq.topic()
    nsq.create_over_http(topic, "e#ephemeral")  # '#' sent as %23
    nsq.wait(0.3, "as the recording")
    nsq.verify.that("an HTTP-created ephemeral channel without clients stays",
                    nsq.http.channel_stats(topic, "e#ephemeral") is not None, "present", "gone", "D-51")


@requirement("NSQ-EPH-003")
def test_ephemeral_topic_goes_with_its_last_channel(nsq):
    """(D-52; rec-0196)"""
    nsq.require("http")
    topic = nsq.topic("#ephemeral")
    conn = nsq.connect()
    conn.subscribe(topic, "e#ephemeral")
    nsq.verify.that("ephemeral topic exists", nsq.http.stats(topic) is not None, "present", "missing")
    conn.close()
    gone = nsq.until(lambda: nsq.http.stats(topic) is None, 2.0, "the topic is gone from /stats")
    nsq.verify.that("ephemeral topic deleted with its last channel", gone, "gone within 2 s", "still there")


@requirement("NSQ-EPH-003")
def test_ephemeral_topic_with_durable_channel_stays(nsq):
    """(D-52, X-25; rec-0197)"""
    nsq.require("http")
    topic = nsq.topic("#ephemeral")
    conn = nsq.connect()
    conn.subscribe(topic, "durable")
    conn.close()
    nsq.wait(0.3, "as the recording")
    nsq.verify.that("ephemeral topic with a durable channel stays", nsq.http.channel_stats(
        topic, "durable") is not None, "present", "gone")


@requirement("NSQ-EPH-004")
def test_ephemeral_channel_drops_what_passes_its_memory_queue(nsq):
    """--mem-queue-size + 4 messages to an ephemeral channel whose consumer is not ready: every PUB is OK, the channel
    keeps --mem-queue-size of them and counts all (D-53; rec-0249 with --mem-queue-size=2: message_count 6,
    depth 2)."""
    nsq.require("http")
    memory, topic = nsq.limits["mem_queue_size"], nsq.topic()
    idle = nsq.connect()
    idle.subscribe(topic, "e#ephemeral")
    total, batch = memory + 4, min(2000, (nsq.limits["max_body_size"] - 4) // 5)  # one-byte messages in MPUBs
    conn = nsq.connect()
    for start in range(0, total, batch):
        conn.command("MPUB", topic, body=wire.mpub_body([b"e"] * min(batch, total - start)))
        conn.expect_response(b"OK")
    nsq.until(lambda: (nsq.http.channel_stats(topic, "e#ephemeral") or {}).get("message_count") == total, 5.0,
              "every message reached the channel")
    channel = nsq.http.channel_stats(topic, "e#ephemeral") or {}
    nsq.verify.equal("the ephemeral channel's (message_count, depth, backend_depth) (D-53)", (total, memory, 0),
                     tuple(channel.get(key) for key in ("message_count", "depth", "backend_depth")))
