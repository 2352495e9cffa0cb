"""DPUB (P-DPUB-01, P-DPUB-02, P-DPUB-03, P-DPUB-04, D-30, D-31, D-32, D-33, D-34 in conformance/spec/)."""

import time

import pytest

requirement = pytest.mark.requirement


@requirement("NSQ-DPUB-001")
def test_dpub_with_only_a_topic(nsq):
    """(P-DPUB-01; rec-0125)"""
    conn = nsq.connect()
    conn.command("DPUB", nsq.topic(), body=b"x")
    conn.expect_error("E_INVALID", "DPUB insufficient number of parameters")


@requirement("NSQ-DPUB-001")
def test_dpub_invalid_topic(nsq):
    """(P-DPUB-01; rec-0126)"""
    conn = nsq.connect()
    conn.command("DPUB", "a!b", 100, body=b"x")
    conn.expect_error("E_BAD_TOPIC", 'DPUB topic name "a!b" is not valid')


@requirement("NSQ-DPUB-001")
@pytest.mark.parametrize("defer", ["-1", "abc", "1.5"])
def test_dpub_unparsable_defer(nsq, defer):
    """The defer is unsigned decimal; '-1' fails to parse (P-DPUB-01, X-12; rec-0127..0129)."""
    conn = nsq.connect()
    conn.command("DPUB", nsq.topic(), defer, body=b"x")
    conn.expect_error("E_INVALID", f"DPUB could not parse timeout {defer}")


@requirement("NSQ-DPUB-002")
def test_dpub_range_is_inclusive(nsq):
    """defer = max-req-timeout is OK; max + 1 is a fatal E_INVALID printed in ms (P-DPUB-02; rec-0130, rec-0238)."""
    maximum = nsq.limits["max_req_timeout_ms"]
    topic = nsq.topic()
    conn = nsq.connect()
    conn.command("DPUB", topic, maximum, body=b"x")
    conn.expect_response(b"OK")
    conn.command("DPUB", topic, maximum + 1, body=b"x")
    conn.expect_error("E_INVALID", f"DPUB timeout {maximum + 1} out of range 0-{maximum}")


@requirement("NSQ-DPUB-003")
def test_dpub_zero_and_empty_defer_are_pub(nsq):
    """'DPUB t 0' and 'DPUB t ' deliver at once (P-DPUB-03; rec-0131 observed 1 ms)."""
    topic = nsq.topic()
    consumer = nsq.connect()
    consumer.subscribe(topic, "c", ready=2)
    producer = nsq.connect()
    producer.command("DPUB", topic, 0, body=b"zero")
    producer.send(f"DPUB {topic} \n".encode() + b"\x00\x00\x00\x05empty")  # empty defer parameter
    producer.expect_response(b"OK")
    producer.expect_response(b"OK")
    bodies = sorted(frame.body for frame in consumer.expect_messages(2, timeout=1.0))
    nsq.verify.equal("immediately delivered", [b"empty", b"zero"], bodies)


@requirement("NSQ-DPUB-004")
def test_dpub_empty_body(nsq):
    """(P-DPUB-01; rec-0132)"""
    conn = nsq.connect()
    conn.command("DPUB", nsq.topic(), 100, body=b"")
    conn.expect_error("E_BAD_MESSAGE", "DPUB invalid message body size 0")


@requirement("NSQ-DPUB-004")
def test_dpub_body_too_big(nsq):
    """(P-DPUB-01; rec-0239)"""
    maximum = nsq.limits["max_msg_size"]
    conn = nsq.connect()
    # only the size and a few bytes: nsqd rejects on the size and closes with the rest unread (RST)
    conn.send(f"DPUB {nsq.topic()} 100\n".encode() + (maximum + 1).to_bytes(4, "big") + b"b" * 16)
    conn.expect_error("E_BAD_MESSAGE", f"DPUB message too big {maximum + 1} > {maximum}")


@pytest.mark.long_wait(6)
@requirement("NSQ-DPUB-005", "NSQ-FANOUT-001")
def test_dpub_is_deferred_in_every_channel(nsq):
    """DPUB 1000 to a topic with 2 pre-created channels: each gets it after >= 1 s, attempts 1, same ID
    (D-30; rec-0133 observed 1.06-1.08 s)."""
    topic = nsq.topic()
    nsq.fresh_channel(topic, "c1", "c2")
    first, second = nsq.connect(), nsq.connect()
    first.subscribe(topic, "c1", ready=1)
    second.subscribe(topic, "c2", ready=1)
    producer = nsq.connect()
    producer.command("DPUB", topic, 1000, body=b"later")
    start = time.monotonic()
    producer.expect_response(b"OK")
    # The topic's pump fans the message out after the OK (nsqd: asynchronously), well before it is due.
    nsq.until(lambda: (nsq.http.channel_stats(topic, "c1") or {}).get("deferred_count") == 1, 0.8,
              "the DPUB is deferred in c1")
    channel = nsq.http.channel_stats(topic, "c1")
    nsq.verify.soft_equal("deferred_count soon after DPUB (D-30)", 1, channel["deferred_count"])
    one = first.expect_message(b"later", attempts=1, timeout=8)
    nsq.within("DPUB 1000 delivery to c1", nsq.elapsed_since(start), 0.95, 2.6)
    two = second.expect_message(b"later", attempts=1, timeout=8)
    nsq.within("DPUB 1000 delivery to c2", nsq.elapsed_since(start), 0.95, 2.6)
    nsq.verify.equal("same ID in both channels", one.message_id, two.message_id)


@requirement("NSQ-DPUB-006")
def test_dpub_clock_starts_when_channel_appears(nsq):
    """DPUB 2000 to a topic with no channel, wait 2.5 s, SUB: delivery about 2 s after SUB, not at once
    (D-31; rec-0134 observed 2.24-2.35 s; upper bound allows D-14's 5 s refresh)."""
    topic = nsq.topic()
    producer = nsq.connect()
    producer.command("DPUB", topic, 2000, body=b"held")
    producer.expect_response(b"OK")
    nsq.wait(2.5, "longer than the defer, before any channel exists")
    consumer = nsq.connect()
    start = time.monotonic()
    consumer.subscribe(topic, "c", ready=1)
    consumer.expect_message(b"held", attempts=1, timeout=10)
    nsq.within("delivery after SUB (the defer counts from the channel's creation)",
               nsq.elapsed_since(start), 1.8, 7.5)
