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
