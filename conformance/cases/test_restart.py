"""Restarts (P-RST-01, P-RST-02, P-RST-03, P-RST-04, P-RST-05, P-RST-06, D-70, D-71, D-72 in
conformance/spec/persistence.toml): the target goes down with SIGTERM and comes back on the same data path and ports.
The embedded broker is restarted by the suite; a target started by the user needs --restart-command. Without either, or
without the profile's `restart` capability, these cases are UNSUPPORTED."""

import pytest

from nsq_protocol import wire

requirement = pytest.mark.requirement


def create(nsq, topic: str, *channels: str) -> None:
    nsq.create_over_http(topic, *channels)


def restore(nsq, topic: str, channel: str, ready: int):
    """A consumer on the restarted target."""
    conn = nsq.connect()
    conn.subscribe(topic, channel, ready=ready)
    return conn


@requirement("NSQ-RST-001", "NSQ-RST-002")
def test_queued_messages_survive_a_restart(restartable):
    """Three messages queued in a channel come back after the restart, attempts 1 (P-RST-01; rec-0267)."""
    nsq = restartable
    topic = nsq.topic()
    create(nsq, topic, "c")
    conn = nsq.connect()
    bodies = [b"r1", b"r2", b"r3"]
    for body in bodies:
        conn.publish(topic, body)
    nsq.until(lambda: (nsq.http.channel_stats(topic, "c") or {}).get("depth") == 3, 2.0, "all three are queued")
    nsq.restart()
    consumer = restore(nsq, topic, "c", ready=3)
    delivered = sorted(consumer.expect_messages(3, timeout=5), key=lambda message: message.body)
    nsq.verify.equal("bodies delivered after the restart", bodies, [message.body for message in delivered])
    nsq.verify.soft_equal("attempts of restored queued messages (P-RST-01)", [1, 1, 1],
                          [message.attempts for message in delivered])


@requirement("NSQ-RST-003", "NSQ-RST-002")
def test_an_in_flight_message_survives_a_restart(restartable):
    """Delivered and not FINed at the SIGTERM: delivered again after it, attempts 2 (P-RST-02; rec-0268)."""
    nsq = restartable
    topic = nsq.topic()
    conn = nsq.connect()
    conn.subscribe(topic, "c", ready=1)
    conn.publish(topic, b"in-flight")
    before = conn.expect_message(b"in-flight", attempts=1)
    nsq.restart()
    again = restore(nsq, topic, "c", ready=1).expect_message(b"in-flight", timeout=5)
    nsq.verify.soft_equal("attempts, ID and timestamp of the redelivery (P-RST-02)",
                          (2, before.message_id, before.timestamp), (again.attempts, again.message_id, again.timestamp))


@requirement("NSQ-RST-004")
def test_deferred_messages_come_at_once_after_a_restart(restartable):
    """DPUB and REQ of 60 s (or the profile's --max-req-timeout) before the SIGTERM: both delivered within 1.5 s
    after it (P-RST-03, P-RST-04; rec-0269, rec-0270)."""
    nsq = restartable
    delay = min(60000, nsq.limits["max_req_timeout_ms"])
    topic = nsq.topic()
    conn = nsq.connect()
    conn.subscribe(topic, "c", ready=1)
    conn.command("DPUB", topic, delay, body=b"deferred")
    conn.expect_response(b"OK")
    conn.publish(topic, b"requeued")
    message = conn.expect_message(b"requeued", attempts=1)
    conn.command("REQ", message.id_text, delay)
    conn.expect_silence(0.3)
    nsq.restart()
    consumer = restore(nsq, topic, "c", ready=2)
    bodies = sorted(message.body for message in consumer.expect_messages(2, timeout=1.5))  # in either order
    nsq.verify.equal("delivered at once after the restart", [b"deferred", b"requeued"], bodies)


@requirement("NSQ-RST-005")
def test_metadata_survives_a_restart_and_ephemeral_channels_do_not(restartable):
    """(P-RST-05, P-RST-06; rec-0271, rec-0272)"""
    nsq = restartable
    paused_topic, topic = nsq.topic(), nsq.topic()
    create(nsq, topic, "paused", "open")
    create(nsq, paused_topic)
    for path in (f"/channel/pause?topic={topic}&channel=paused", f"/topic/pause?topic={paused_topic}"):
        nsq.verify.equal(f"POST {path}", 200, nsq.http.post(path).status)
    conn = nsq.connect()
    conn.subscribe(topic, "e#ephemeral")
    nsq.restart()
    channels = {name: (nsq.http.channel_stats(topic, name) or {}).get("paused")
                for name in ("paused", "open", "e#ephemeral")}
    nsq.verify.equal("channels after the restart: paused state kept, the ephemeral one gone",
                     {"paused": True, "open": False, "e#ephemeral": None}, channels)
    nsq.verify.equal("the paused topic is still paused", True, (nsq.http.stats(paused_topic) or {}).get("paused"))


@requirement("NSQ-RST-006")
def test_messages_beyond_the_memory_queue_go_to_disk(nsq):
    """--mem-queue-size + 5 messages to a channel nobody reads: backend_depth 5, depth all (D-70, D-72)."""
    nsq.require("http")
    memory = nsq.limits.get("mem_queue_size")
    if memory is None:
        pytest.skip("the profile does not state the target's --mem-queue-size")
    topic = nsq.topic()
    create(nsq, topic, "c")
    # MPUBs of one-byte messages (4-byte size + 1 byte each) that fit --max-body-size
    conn, total, batch = nsq.connect(), memory + 5, min(2000, (nsq.limits["max_body_size"] - 4) // 5)
    for start in range(0, total, batch):
        conn.command("MPUB", topic, body=wire.mpub_body([b"m"] * min(batch, total - start)))
        conn.expect_response(b"OK")
    nsq.until(lambda: (nsq.http.channel_stats(topic, "c") or {}).get("depth") == total, 5.0,
              "every message reached the channel")
    channel = nsq.http.channel_stats(topic, "c")
    nsq.verify.soft_equal("(depth, backend_depth) past --mem-queue-size (D-70)", (total, 5),
                          (channel["depth"], channel["backend_depth"]))


@requirement("NSQ-RST-007")
def test_a_topic_without_channels_keeps_its_messages_across_a_restart(restartable):
    """Two PUBs to a topic no channel exists for, then SIGTERM: after the restart the topic holds both on disk
    (depth = backend_depth = 2), and the first consumer gets both (P-RST-12; rec-0278)."""
    nsq = restartable
    topic = nsq.topic()
    conn = nsq.connect()
    for body in (b"a1", b"a2"):
        conn.publish(topic, body)
    nsq.restart()
    stats = nsq.http.stats(topic) or {}
    counters = (stats.get("depth"), stats.get("backend_depth"))
    delivered = sorted(message.body for message in restore(nsq, topic, "c", ready=5).expect_messages(2, timeout=5))
    nsq.verify.equal("the topic's (depth, backend_depth) after the restart, then what its first consumer gets "
                     "(P-RST-12)", ((2, 2), [b"a1", b"a2"]), (counters, delivered))


@requirement("NSQ-RST-008")
def test_counters_start_from_zero_after_a_restart(restartable):
    """Three messages queued in a channel, SIGTERM: afterwards the channel's message_count is 0 while its depth,
    all on disk, is 3 (P-RST-13; rec-0279)."""
    nsq = restartable
    topic = nsq.topic()
    create(nsq, topic, "c")
    conn = nsq.connect()
    conn.command("MPUB", topic, body=wire.mpub_body([b"x1", b"x2", b"x3"]))
    conn.expect_response(b"OK")
    nsq.until(lambda: (nsq.http.channel_stats(topic, "c") or {}).get("depth") == 3, 2.0, "all three are queued")
    nsq.restart()
    channel = nsq.http.channel_stats(topic, "c") or {}
    nsq.verify.equal("the channel's (message_count, depth, backend_depth) after the restart (P-RST-13)", (0, 3, 3),
                     tuple(channel.get(key) for key in ("message_count", "depth", "backend_depth")))


@requirement("NSQ-RST-009")
def test_messages_kept_in_one_queue_come_back_in_publish_order(restartable):
    """As many messages as the memory queue holds (three; three on disk without one), SIGTERM: after the restart a
    consumer gets them in publish order, as they were written to one disk queue at the shutdown (D-73; rec-0281 shows
    the order lost once memory and disk both held some)."""
    nsq = restartable
    count = min(3, nsq.limits["mem_queue_size"]) or 3
    topic, bodies = nsq.topic(), [b"o%d" % number for number in range(count)]
    create(nsq, topic, "c")
    conn = nsq.connect()
    for body in bodies:
        conn.publish(topic, body)
    nsq.until(lambda: (nsq.http.channel_stats(topic, "c") or {}).get("depth") == count, 2.0, "all are queued")
    nsq.restart()
    delivered = [message.body for message in restore(nsq, topic, "c", ready=count).expect_messages(count, timeout=5)]
    nsq.verify.soft_equal("the order after the restart (D-73)", bodies, delivered)
