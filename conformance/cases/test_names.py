"""Topic and channel name rules (D-39 in conformance/spec/delivery.toml)."""

import pytest

from conformance.client import quote

requirement = pytest.mark.requirement

VALID_TOPICS = [(64, ""), (64, "#ephemeral"), (None, ".#ephemeral"), (None, "."), (None, ".."),
                (None, "Az09._-")]
INVALID_TOPICS = [(65, ""), (65, "#ephemeral"), (None, "#ephemeral"), (None, "t#eph"),
                  (None, "test:ephemeral"), (None, "a$b")]


def name(nsq, length, literal, valid: bool):
    """A unique name of ``length`` ending in ``literal``, or the literal itself; a valid one ready for use."""
    topic = nsq.topic(literal, length, create=False) if length else literal
    if valid:
        nsq.prepare_topic(topic)
    return topic


@requirement("NSQ-NAME-001")
@pytest.mark.parametrize("length, literal", VALID_TOPICS, ids=["64", "54+#ephemeral", ".#ephemeral", ".",
                                                               "..", "all-classes"])
def test_valid_topic_names(nsq, length, literal):
    """(D-39, X-18; rec-0180..0185)"""
    topic = name(nsq, length, literal, valid=True)
    conn = nsq.connect()
    conn.publish(topic, b"x")
    if not length and nsq.http.address:
        nsq.http.post(f"/topic/delete?topic={quote(topic)}")  # a literal name is not the case's own topic


@requirement("NSQ-NAME-001")
@pytest.mark.parametrize("length, literal", INVALID_TOPICS, ids=["65", "55+#ephemeral", "#ephemeral",
                                                                 "t#eph", "test:ephemeral", "a$b"])
def test_invalid_topic_names(nsq, length, literal):
    """(D-39, X-18; rec-0186..0191)"""
    topic = name(nsq, length, literal, valid=False)
    conn = nsq.connect()
    conn.command("PUB", topic, body=b"x")
    conn.expect_error("E_BAD_TOPIC", f'PUB topic name "{topic}" is not valid')


@requirement("NSQ-NAME-001")
def test_channel_names(nsq):
    """Channels of 64 characters and 'c#ephemeral' are valid; 65 is E_BAD_CHANNEL (D-39; rec-0192, rec-0193)."""
    topic = nsq.topic()
    nsq.connect().subscribe(topic, "c" * 64)
    nsq.connect().subscribe(topic, "c#ephemeral")
    conn = nsq.connect()
    conn.command("SUB", topic, "c" * 65)
    conn.expect_error("E_BAD_CHANNEL", f'SUB channel name "{"c" * 65}" is not valid')
