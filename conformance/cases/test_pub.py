"""PUB (P-PUB-01, P-PUB-02, P-PUB-03, P-PUB-04, P-PUB-05 in conformance/spec/commands.toml)."""

import pytest

requirement = pytest.mark.requirement


@requirement("NSQ-PUB-001")
def test_pub_in_every_state(nsq):
    """PUB answers OK in init, subscribed and closing (P-PUB-01; rec-0103)."""
    topic = nsq.topic()
    conn = nsq.connect()
    conn.publish(topic, b"init")
    conn.subscribe(topic, "c")
    conn.publish(topic, b"sub")
    conn.command("CLS")
    conn.expect_response(b"CLOSE_WAIT")
    conn.publish(topic, b"closing")


@requirement("NSQ-PUB-002")
def test_pub_without_topic(nsq):
    """(P-PUB-02; rec-0104)"""
    conn = nsq.connect()
    conn.send(b"PUB\n\x00\x00\x00\x01x")  # no topic; size 1, body 'x'
    conn.expect_error("E_INVALID", "PUB insufficient number of parameters")


@requirement("NSQ-PUB-002")
def test_pub_invalid_topic(nsq):
    """(P-PUB-02; rec-0105)"""
    conn = nsq.connect()
    conn.command("PUB", "a!b", body=b"x")
    conn.expect_error("E_BAD_TOPIC", 'PUB topic name "a!b" is not valid')


@requirement("NSQ-PUB-003")
def test_pub_empty_body(nsq):
    """(P-PUB-03, X-23; rec-0106)"""
    conn = nsq.connect()
    conn.command("PUB", nsq.topic(), body=b"")
    conn.expect_error("E_BAD_MESSAGE", "PUB invalid message body size 0")


@requirement("NSQ-PUB-003")
def test_pub_max_msg_size_is_inclusive(nsq):
    """A body of exactly max-msg-size is OK; max + 1 is too big, rejected before the body is read
    (P-PUB-03; rec-0107, rec-0233)."""
    maximum = nsq.limits["max_msg_size"]
    topic = nsq.topic()
    nsq.connect().publish(topic, b"a" * maximum)
    conn = nsq.connect()
    conn.send(f"PUB {topic}\n".encode() + (maximum + 1).to_bytes(4, "big") + b"a" * 16)
    conn.expect_error("E_BAD_MESSAGE", f"PUB message too big {maximum + 1} > {maximum}")


@requirement("NSQ-PUB-004", "NSQ-HTTP-008")
def test_failed_pub_does_not_create_topic(nsq):
    """(P-PUB-04; rec-0110)"""
    nsq.require("http")
    nsq.require("topic_autocreate")
    topic = nsq.topic()
    conn = nsq.connect()
    conn.command("PUB", topic, body=b"")
    conn.expect_error("E_BAD_MESSAGE", "PUB invalid message body size 0")
    nsq.verify.equal("topic after a failed PUB", None, nsq.http.stats(topic), "P-PUB-04")


@requirement("NSQ-PUB-005")
@pytest.mark.parametrize("partial, text", [
    (b"PUB %s\n\x00\x00", "E_BAD_MESSAGE PUB failed to read message body size"),
    (b"PUB %s\n\x00\x00\x00\x05ab", "E_BAD_MESSAGE PUB failed to read message body"),
    (b"MPUB %s\n\x00", "E_BAD_BODY MPUB failed to read body size"),
    (b"MPUB %s\n\x00\x00\x00\x14\x00\x00", "E_BAD_BODY MPUB failed to read message count"),
    (b"MPUB %s\n\x00\x00\x00\x14\x00\x00\x00\x02\x00", "E_BAD_MESSAGE MPUB failed to read message(0) body size"),
    (b"MPUB %s\n\x00\x00\x00\x14\x00\x00\x00\x02\x00\x00\x00\x05ab",
     "E_BAD_MESSAGE MPUB failed to read message body"),
    (b"IDENTIFY\n\x00\x00", "E_BAD_BODY IDENTIFY failed to read body size"),
    (b"IDENTIFY\n\x00\x00\x00\x10{}", "E_BAD_BODY IDENTIFY failed to read body")],
    ids=["pub-size", "pub-body", "mpub-size", "mpub-count", "mpub-member-size", "mpub-member-body",
         "identify-size", "identify-body"])
def test_half_close_inside_a_body(nsq, partial, text):
    """The client half-closes inside a size word or body: a 'failed to read' error, then close
    (P-PUB-02, P-MPUB-02, P-ID-03; rec-0108, rec-0109, rec-0121..0124, rec-0052, rec-0053)."""
    conn = nsq.connect()
    conn.send(partial.replace(b"%s", nsq.topic().encode()) if b"%s" in partial else partial)
    conn.shutdown_write()
    code, _, rest = text.partition(" ")
    conn.expect_error(code, rest)
