"""Fan-out, shared channels, topic buffering, output buffering (D-35, D-36, D-37, D-38, D-39, D-40, D-41, D-42 in
conformance/spec/delivery.toml)."""

import time

import pytest

requirement = pytest.mark.requirement


@requirement("NSQ-FANOUT-001")
def test_consumers_split_a_channel_and_channels_copy(nsq):
    """Two consumers on c1 each get one of two messages; c2 gets both (D-35; rec-0175)."""
    topic = nsq.topic()
    first, second, copy = nsq.connect(), nsq.connect(), nsq.connect()
    first.subscribe(topic, "c1", ready=1)
    copy.subscribe(topic, "c2", ready=4)
    second.subscribe(topic, "c1")
    second.publish(topic, b"f1")
    one = first.expect_message(b"f1", attempts=1)
    second.command("RDY", 1)
    second.publish(topic, b"f2")
    two = second.expect_message(b"f2", attempts=1)
    copies = sorted((frame.body, frame.message_id) for frame in copy.expect_messages(2))
    nsq.verify.equal("channel c2 gets every message with the same IDs",
                     sorted([(b"f1", one.message_id), (b"f2", two.message_id)]), copies)


@requirement("NSQ-FANOUT-002")
def test_later_channel_gets_only_later_messages(nsq):
    """c1 exists and holds 'early'; a new c2 gets only 'late' (D-37; rec-0176)."""
    topic = nsq.topic()
    conn = nsq.connect()
    conn.subscribe(topic, "c1", ready=1)
    conn.publish(topic, b"early")
    # Fan-out follows the OK asynchronously: 'early' is surely in c1 once c1 delivered it.
    conn.expect_message(b"early", attempts=1)
    later = nsq.connect()
    later.subscribe(topic, "c2", ready=1)
    later.expect_silence(0.5, what="no replay of earlier messages into a new channel (D-37)")
    conn.publish(topic, b"late")
    later.expect_message(b"late", attempts=1)
    conn.command("RDY", 2)
    conn.expect_message(b"late", attempts=1)  # c1 has both


@requirement("NSQ-BUF-001")
def test_rdy_1_flushes_at_once(nsq):
    """RDY 1: in flight reaches RDY, so the message is flushed immediately (D-40; rec-0177)."""
    topic = nsq.topic()
    conn = nsq.connect()
    conn.subscribe(topic, "c", ready=1)
    producer = nsq.connect()
    producer.publish(topic, b"now")
    start = time.monotonic()
    conn.expect_message(b"now", attempts=1)
    nsq.within("delivery latency at RDY 1", nsq.elapsed_since(start), 0, 0.2)


@requirement("NSQ-BUF-001")
def test_unbuffered_output_flushes_at_once(nsq):
    """output_buffer_size -1 and RDY 10: the message arrives at once (D-42, ID-04; rec-0179 observed 1 ms)."""
    topic = nsq.topic()
    conn = nsq.connect()
    conn.identify({"output_buffer_size": -1})
    conn.subscribe(topic, "c", ready=10)
    nsq.connect().publish(topic, b"now")
    start = time.monotonic()
    conn.expect_message(b"now", attempts=1)
    nsq.within("delivery latency unbuffered", nsq.elapsed_since(start), 0, 0.2)


@requirement("NSQ-BUF-002")
def test_rdy_10_flushes_within_buffer_timeout(nsq):
    """RDY 10 and one message: delivered by the flush ticker within the 250 ms buffer timeout
    (D-41; rec-0178 observed 250 ms)."""
    topic = nsq.topic()
    conn = nsq.connect()
    conn.subscribe(topic, "c", ready=10)
    nsq.connect().publish(topic, b"tick")
    start = time.monotonic()
    conn.expect_message(b"tick", attempts=1)
    timeout = nsq.limits["output_buffer_timeout_ms"] / 1000
    nsq.within("delivery latency with RDY 10", nsq.elapsed_since(start), 0, timeout + 0.35)


@requirement("NSQ-BUF-003")
def test_negotiated_buffer_timeout_is_the_flush_period(nsq):
    """output_buffer_timeout 1000 and RDY 10: the flush ticker starts at IDENTIFY, so a lone message published at
    once waits for its first tick, about 1 s after IDENTIFY, where the default would flush after 250 ms
    (D-41, ID-04; nsqd's TestOutputBuffering)."""
    topic = nsq.topic()
    producer = nsq.connect()
    producer.publish(topic, b"warm")  # the topic exists before the timed part
    conn = nsq.connect()
    start = time.monotonic()
    conn.identify({"output_buffer_timeout": 1000})
    conn.subscribe(topic, "c", ready=10)
    conn.expect_message(b"warm", attempts=1, timeout=3)
    nsq.within("delivery of a lone message at RDY 10 after IDENTIFY output_buffer_timeout 1000",
               nsq.elapsed_since(start), 0.75, 1.6)
