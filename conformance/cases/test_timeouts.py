"""msg_timeout redelivery and disconnects (D-10, D-11, D-12, D-13, D-14, D-15, D-16 in conformance/spec/delivery.toml).
Channels are pre-created over HTTP and the suite waits out nsqd's 5 s channel-list refresh (D-14) before timing
anything."""

import time

import pytest

requirement = pytest.mark.requirement
ONE_SECOND = {"msg_timeout": 1000}


@pytest.mark.long_wait(7)
@requirement("NSQ-TIMEOUT-001")
def test_unsettled_message_times_out(nsq):
    """msg_timeout 1000: the message comes back to the same client after >= 1 s with attempts 2, counted in
    timeout_count, not requeue_count (D-11, D-05, D-22; rec-0171 observed 1.02-1.03 s)."""
    topic = nsq.topic()
    nsq.fresh_channel(topic, "c")
    conn = nsq.connect()
    conn.identify(ONE_SECOND)
    conn.subscribe(topic, "c", ready=1)
    conn.publish(topic, b"slow")
    first = conn.expect_message(b"slow", attempts=1)
    start = time.monotonic()
    again = conn.expect_message(b"slow", attempts=2, timeout=5)
    nsq.within("timeout redelivery", nsq.elapsed_since(start), 0.95, 1.8)
    nsq.verify.equal("same ID and timestamp", (first.message_id, first.timestamp),
                     (again.message_id, again.timestamp))
    conn.command("FIN", first.id_text)
    conn.expect_silence(0.3, what="FIN of the redelivered message succeeds (D-12)")
    if nsq.http.address:
        channel = nsq.http.channel_stats(topic, "c")
        nsq.verify.equal("(timeout_count, requeue_count) (H-STATS-11, D-22)", (1, 0),
                         (channel["timeout_count"], channel["requeue_count"]))


@pytest.mark.long_wait(7)
@requirement("NSQ-TIMEOUT-002")
def test_late_fin_after_redelivery_elsewhere(nsq):
    """A times out, B gets the redelivery: A's late FIN is 'client does not own message', B's FIN works
    (D-12; rec-0172)."""
    topic = nsq.topic()
    nsq.fresh_channel(topic, "c")
    slow = nsq.connect()
    slow.identify(ONE_SECOND)
    slow.subscribe(topic, "c", ready=1)
    other = nsq.connect()
    other.subscribe(topic, "c")
    other.publish(topic, b"move")
    message = slow.expect_message(b"move", attempts=1)
    slow.command("RDY", 0)
    other.command("RDY", 1)
    again = other.expect_message(b"move", attempts=2, timeout=5)
    message_id = message.id_text
    nsq.verify.equal("same ID", message.message_id, again.message_id)
    slow.command("FIN", message_id)
    slow.expect_error("E_FIN_FAILED", f"FIN {message_id} failed client does not own message", fatal=False)
    other.command("FIN", message_id)
    other.expect_silence(0.3)


@pytest.mark.long_wait(8)
@requirement("NSQ-TIMEOUT-002")
def test_late_fin_after_timeout(nsq):
    """Timed out and not redelivered (RDY 0): a late FIN is 'ID not in flight', non-fatal (D-12; rec-0173)."""
    topic = nsq.topic()
    nsq.fresh_channel(topic, "c")
    conn = nsq.connect()
    conn.identify(ONE_SECOND)
    conn.subscribe(topic, "c", ready=1)
    conn.publish(topic, b"late")
    message = conn.expect_message(b"late", attempts=1)
    conn.command("RDY", 0)
    nsq.wait(2.5, "past msg_timeout and the scan interval")
    message_id = message.id_text
    conn.command("FIN", message_id)
    conn.expect_error("E_FIN_FAILED", f"FIN {message_id} failed ID not in flight", fatal=False)


@pytest.mark.long_wait(6)
@requirement("NSQ-TIMEOUT-003")
def test_disconnect_does_not_requeue_at_once(nsq):
    """A closes with a message in flight: B gets it only after A's msg_timeout, attempts 2 (D-15, X-20;
    rec-0174 observed 1.08 s)."""
    topic = nsq.topic()
    nsq.fresh_channel(topic, "c")
    owner = nsq.connect()
    owner.identify(ONE_SECOND)
    owner.subscribe(topic, "c", ready=1)
    other = nsq.connect()
    other.subscribe(topic, "c")
    other.publish(topic, b"orphan")
    owner.expect_message(b"orphan", attempts=1)
    start = time.monotonic()
    other.command("RDY", 1)
    owner.close()
    other.expect_silence(0.6, what="in-flight messages are not requeued on disconnect (D-15)")
    other.expect_message(b"orphan", attempts=2, timeout=5)
    nsq.within("redelivery after the disconnected owner's msg_timeout", nsq.elapsed_since(start), 0.95, 2.7)
