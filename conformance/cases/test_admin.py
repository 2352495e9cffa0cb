"""Effects of the HTTP administration endpoints on TCP clients (D-60, D-61, D-62, D-63, D-64, H-TOPIC-04, H-CHANNEL-04
in conformance/spec/)."""

import pytest

requirement = pytest.mark.requirement


def ok(nsq, path):
    response = nsq.http.post(path)
    nsq.verify.equal(f"POST {path}", 200, response.status)


@requirement("NSQ-ADMIN-001")
def test_channel_pause_stops_delivery(nsq):
    """(D-60; rec-0198)"""
    nsq.require("http")
    topic = nsq.topic()
    conn = nsq.connect()
    conn.subscribe(topic, "c", ready=1)
    ok(nsq, f"/channel/pause?topic={topic}&channel=c")
    conn.publish(topic, b"paused")
    conn.expect_silence(0.6, what="a paused channel delivers nothing (D-60)")
    nsq.until(lambda: (nsq.http.channel_stats(topic, "c") or {}).get("depth") == 1, 1.0, "the message waits in c")
    channel = nsq.http.channel_stats(topic, "c")
    nsq.verify.equal("(paused, depth) of the paused channel", (True, 1), (channel["paused"], channel["depth"]))
    ok(nsq, f"/channel/unpause?topic={topic}&channel=c")
    conn.expect_message(b"paused", attempts=1, timeout=1.0)


@requirement("NSQ-ADMIN-001")
def test_topic_pause_keeps_messages_in_topic(nsq):
    """(D-61; rec-0199)"""
    nsq.require("http")
    topic = nsq.topic()
    conn = nsq.connect()
    conn.subscribe(topic, "c", ready=1)
    ok(nsq, f"/topic/pause?topic={topic}")
    conn.publish(topic, b"held")
    conn.expect_silence(0.6, what="a paused topic copies nothing to its channels (D-61)")
    stats = nsq.http.stats(topic)
    nsq.verify.equal("(paused, topic depth, channel depth)", (True, 1, 0),
                     (stats["paused"], stats["depth"], stats["channels"][0]["depth"]))
    ok(nsq, f"/topic/unpause?topic={topic}")
    conn.expect_message(b"held", attempts=1, timeout=1.0)


@requirement("NSQ-ADMIN-002")
def test_channel_delete_closes_subscribers(nsq):
    """(D-62, C-25; rec-0035)"""
    nsq.require("http")
    topic = nsq.topic()
    conn = nsq.connect()
    conn.subscribe(topic, "c")
    ok(nsq, f"/channel/delete?topic={topic}&channel=c")
    conn.expect_close(what="deleting the channel closes its subscriber")


@requirement("NSQ-ADMIN-002")
def test_topic_delete_closes_subscribers(nsq):
    """(D-62; rec-0200)"""
    nsq.require("http")
    topic = nsq.topic()
    conn = nsq.connect()
    conn.subscribe(topic, "c")
    ok(nsq, f"/topic/delete?topic={topic}")
    conn.expect_close(what="deleting the topic closes its subscriber")


@requirement("NSQ-ADMIN-003")
def test_channel_empty_clears_in_flight(nsq):
    """Empty with one in flight and one queued: FIN is then 'not in flight', and the client is ready
    again for a new message (D-63; rec-0201)."""
    nsq.require("http")
    topic = nsq.topic()
    conn = nsq.connect()
    conn.subscribe(topic, "c", ready=1)
    conn.publish(topic, b"e1")
    conn.publish(topic, b"e2")
    message = conn.expect_message(b"e1", attempts=1)
    # e2 reaches the channel after its OK (the topic pump is asynchronous): empty once it is there.
    nsq.until(lambda: (nsq.http.channel_stats(topic, "c") or {}).get("depth") == 1, 2.0, "e2 is queued in c")
    ok(nsq, f"/channel/empty?topic={topic}&channel=c")
    channel = nsq.http.channel_stats(topic, "c")
    nsq.verify.equal("(depth, in_flight_count) after empty", (0, 0), (channel["depth"], channel["in_flight_count"]))
    message_id = message.id_text
    conn.command("FIN", message_id)
    conn.expect_error("E_FIN_FAILED", f"FIN {message_id} failed ID not in flight", fatal=False)
    conn.publish(topic, b"e3")
    conn.expect_message(b"e3", attempts=1)


@requirement("NSQ-ADMIN-003")
def test_topic_empty_drops_only_topic_queue(nsq):
    """'in-channel' reached the channel, 'in-topic' waits in a paused topic: emptying the topic drops only
    'in-topic' (D-64; rec-0202)."""
    nsq.require("http")
    topic = nsq.topic()
    conn = nsq.connect()
    conn.subscribe(topic, "c")
    conn.publish(topic, b"in-channel")
    nsq.wait(0.2, "let the topic copy it to the channel")
    ok(nsq, f"/topic/pause?topic={topic}")
    conn.publish(topic, b"in-topic")
    ok(nsq, f"/topic/empty?topic={topic}")
    ok(nsq, f"/topic/unpause?topic={topic}")
    conn.command("RDY", 5)
    conn.expect_message(b"in-channel", attempts=1)
    conn.expect_silence(0.4, what="the emptied topic message is gone (D-64)")
