"""Ephemeral topics and channels (D-50, D-51, D-52, D-53, D-54 in conformance/spec/delivery.toml). Observed through
/stats: HTTP required."""

import pytest

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
                    nsq.http.channel_stats(topic, "e#ephemeral") is not None, "present", "gone")


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
