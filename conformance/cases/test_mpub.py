"""MPUB (P-MPUB-01, P-MPUB-02, P-MPUB-03, P-MPUB-04, P-MPUB-05, P-MPUB-06 in conformance/spec/commands.toml)."""

import pytest

from nsq_protocol import wire

requirement = pytest.mark.requirement


@requirement("NSQ-MPUB-001")
def test_mpub_delivers_every_message(nsq):
    """MPUB of 3 -> OK; all three delivered with attempts 1, in any order: a memory queue that overflows to disk
    interleaves the two (P-MPUB-06; rec-0120)."""
    topic = nsq.topic()
    conn = nsq.connect()
    conn.command("MPUB", topic, body=wire.mpub_body([b"one", b"two", b"three"]))
    conn.expect_response(b"OK")
    conn.subscribe(topic, "c", ready=3)
    frames = conn.expect_messages(3)
    nsq.verify.equal("delivered MPUB members", sorted([b"one", b"two", b"three"]), sorted(f.body for f in frames))
    nsq.verify.equal("attempts of each", [1, 1, 1], [frame.attempts for frame in frames])


@requirement("NSQ-MPUB-002")
def test_mpub_without_topic(nsq):
    """(P-MPUB-02; rec-0112)"""
    conn = nsq.connect()
    conn.send(b"MPUB\n" + wire.mpub_body([b"a"]))
    conn.expect_error("E_INVALID", "MPUB insufficient number of parameters")


@requirement("NSQ-MPUB-002")
def test_mpub_invalid_topic_repeats_the_code(nsq):
    """(P-MPUB-02, X-11: the code appears twice; rec-0113)"""
    conn = nsq.connect()
    conn.command("MPUB", "a!b", body=wire.mpub_body([b"a"]))
    conn.expect_error("E_BAD_TOPIC", 'E_BAD_TOPIC MPUB topic name "a!b" is not valid')


@requirement("NSQ-MPUB-002")
def test_mpub_body_size_zero(nsq):
    """(P-MPUB-02; rec-0114)"""
    conn = nsq.connect()
    conn.command("MPUB", nsq.topic(), body=b"")
    conn.expect_error("E_BAD_BODY", "MPUB invalid body size 0")


@requirement("NSQ-MPUB-002")
def test_mpub_body_too_big(nsq):
    """Size max-body-size + 1: rejected before reading (P-MPUB-02; rec-0234)."""
    maximum = nsq.limits["max_body_size"]
    conn = nsq.connect()
    conn.send(f"MPUB {nsq.topic()}\n".encode() + (maximum + 1).to_bytes(4, "big"))
    conn.expect_error("E_BAD_BODY", f"MPUB body too big {maximum + 1} > {maximum}")


@requirement("NSQ-MPUB-003")
def test_mpub_count_zero(nsq):
    """(P-MPUB-02; rec-0115)"""
    conn = nsq.connect()
    conn.command("MPUB", nsq.topic(), body=b"\x00\x00\x00\x00")  # count 0
    conn.expect_error("E_BAD_BODY", "MPUB invalid message count 0")


@requirement("NSQ-MPUB-003")
def test_mpub_count_above_limit(nsq):
    """count = (max-body-size - 4) / 5 + 1 is rejected before any member is read (P-MPUB-02; rec-0235)."""
    maximum = nsq.limits["max_body_size"]
    count = (maximum - 4) // 5 + 1
    conn = nsq.connect()
    conn.send(f"MPUB {nsq.topic()}\n".encode() + maximum.to_bytes(4, "big") + count.to_bytes(4, "big"))
    conn.expect_error("E_BAD_BODY", f"MPUB invalid message count {count}")


@requirement("NSQ-MPUB-003")
def test_mpub_count_at_limit(nsq):
    """(max-body-size - 4) / 5 one-byte messages fit and are accepted (P-MPUB-02; rec-0236)."""
    count = min((nsq.limits["max_body_size"] - 4) // 5, 2000)
    conn = nsq.connect()
    conn.command("MPUB", nsq.topic(), body=wire.mpub_body([b"x"] * count))
    # With a small memory queue the batch goes to disk, synced every --sync-every writes before the OK: real nsqd
    # takes 2.4-5 s for 2000 messages with --sync-every=4 on a busy machine.
    conn.expect_response(b"OK", timeout=30)


@requirement("NSQ-MPUB-004", "NSQ-MPUB-006", "NSQ-HTTP-008")
def test_mpub_with_empty_member_is_rejected_whole(nsq):
    """An empty 2nd member rejects the batch: nothing published, but the topic exists
    (P-MPUB-03, P-MPUB-05; rec-0116, rec-0117)."""
    topic = nsq.topic()
    conn = nsq.connect()
    conn.command("MPUB", topic, body=wire.mpub_body([b"ok", b"", b"ok"]))
    conn.expect_error("E_BAD_MESSAGE", "MPUB invalid message(1) body size 0")
    if nsq.http.address:
        stats = nsq.http.stats(topic)
        nsq.verify.soft_equal("a failed MPUB still creates the topic (P-MPUB-05)", True, stats is not None)
        nsq.verify.equal("messages published by the failed MPUB", 0, (stats or {}).get("message_count", 0))
    else:
        consumer = nsq.connect()
        consumer.subscribe(topic, "c", ready=3)
        consumer.expect_silence(0.5, what="a rejected MPUB publishes nothing (P-MPUB-03)")


@requirement("NSQ-MPUB-004")
def test_mpub_member_too_big(nsq):
    """(P-MPUB-02; rec-0237)"""
    maximum = nsq.limits["max_msg_size"]
    conn = nsq.connect()
    body = wire.mpub_body([b"a", b"b" * (maximum + 1)])
    # declare the whole body but send only up to the oversized member's size and a few bytes: nsqd stops
    # reading there and closes with the rest unread (RST)
    conn.send(f"MPUB {nsq.topic()}\n".encode() + len(body).to_bytes(4, "big") + body[:4 + 5 + 4 + 16])
    conn.expect_error("E_BAD_MESSAGE", f"MPUB message too big {maximum + 1} > {maximum}")


@requirement("NSQ-MPUB-005")
@pytest.mark.parametrize("declared", [0x44, 3], ids=["larger", "smaller"])
def test_mpub_outer_size_is_only_range_checked(nsq, declared):
    """The outer size (68 or 3 for a 21-byte body) is ignored for framing: both members and a following PUB
    are accepted (P-MPUB-04; rec-0118, rec-0119)."""
    topic = nsq.topic()
    conn = nsq.connect()
    members = wire.mpub_body([b"one", b"two"])
    conn.send(f"MPUB {topic}\n".encode() + declared.to_bytes(4, "big") + members)
    conn.expect_response(b"OK")
    conn.publish(topic, b"after")
    consumer = nsq.connect()
    consumer.subscribe(topic, "c", ready=3)
    bodies = sorted(frame.body for frame in consumer.expect_messages(3))
    nsq.verify.equal("messages published", [b"after", b"one", b"two"], bodies)


@requirement("NSQ-MPUB-001", "NSQ-CLS-002")
def test_mpub_after_sub_and_cls(nsq):
    """MPUB has no state requirement (P-MPUB-01; not recorded, catalogue only)."""
    topic = nsq.topic()
    conn = nsq.connect()
    conn.subscribe(topic, "c")
    conn.command("MPUB", topic, body=wire.mpub_body([b"a"]))
    conn.expect_response(b"OK")
    conn.command("CLS")
    conn.expect_response(b"CLOSE_WAIT")
    conn.command("MPUB", topic, body=wire.mpub_body([b"b"]))
    conn.expect_response(b"OK")
