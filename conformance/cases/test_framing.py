"""Frames and the message frame layout (C-06, C-07, C-08, C-09, C-10, C-11, C-12, C-13 in
conformance/spec/connection.toml)."""

import re
import time

import pytest

from nsq_protocol import wire

requirement = pytest.mark.requirement
HEX_ID = re.compile(rb"[0-9a-f]{16}")


@requirement("NSQ-FRAME-001", "NSQ-FRAME-002", "NSQ-FANOUT-002")
def test_message_frame_layout(nsq):
    """PUB before SUB, then SUB + RDY 1 delivers it: size = 4 + 26 + len(body), type 2, attempts 1,
    a timestamp near now (C-06, C-07, C-09; rec-0012)."""
    topic = nsq.topic()
    publisher = nsq.connect()
    published_at = time.time_ns()
    publisher.publish(topic, b"hello frame")
    consumer = nsq.connect()
    consumer.subscribe(topic, "c", ready=1)
    frame = consumer.expect_message(b"hello frame", attempts=1)
    nsq.verify.equal("frame size word", 4 + 26 + len(b"hello frame"), len(frame.encode()) - 4)
    nsq.verify.that("timestamp is ns since the epoch, set at publish time (C-09)",
                    abs(frame.timestamp - published_at) < 10 * 10**9, f"about {published_at}", frame.timestamp)


@requirement("NSQ-FRAME-003")
def test_message_ids_are_lowercase_hex_and_increase(nsq):
    """MPUB of 5: IDs are 16 lowercase hex characters and increase in publish order within the topic, whatever
    order the messages are delivered in (C-10, C-11; rec-0120); nsqd keeps no order once a queue overflows to disk."""
    topic = nsq.topic()
    conn = nsq.connect()
    published = [b"%d" % i for i in range(5)]
    conn.command("MPUB", topic, body=wire.mpub_body(published))
    conn.expect_response(b"OK")
    conn.subscribe(topic, "c", ready=5)
    id_of = {frame.body: frame.message_id for frame in conn.expect_messages(5)}
    for message_id in id_of.values():
        nsq.verify.that("message ID format", HEX_ID.fullmatch(message_id) is not None,
                        "16 lowercase hex characters", message_id, "C-10")
    nsq.verify.equal("every member of the MPUB delivered", published, sorted(id_of))
    ids = [id_of[body] for body in published]
    nsq.verify.equal("IDs strictly increase in publish order within a topic", sorted(set(ids)), ids, "C-11")


@requirement("NSQ-FRAME-004", "NSQ-REQ-001")
def test_redelivery_keeps_id_and_timestamp(nsq):
    """REQ 0 twice: attempts 1, 2, 3 with the same ID and timestamp (C-12, D-20; rec-0013)."""
    topic = nsq.topic()
    conn = nsq.connect()
    conn.publish(topic, b"again")
    conn.subscribe(topic, "c", ready=1)
    first = conn.expect_message(b"again", attempts=1)
    for attempts in (2, 3):
        conn.command("REQ", first.id_text, 0)
        frame = conn.expect_message(b"again", attempts=attempts)
        nsq.verify.equal("ID unchanged across redelivery", first.message_id, frame.message_id)
        nsq.verify.equal("timestamp unchanged across redelivery", first.timestamp, frame.timestamp)


@requirement("NSQ-FRAME-005", "NSQ-FANOUT-001")
def test_channel_copies_share_id_and_timestamp(nsq):
    """Two channels get the same message with the same ID and timestamp (C-11, D-35; rec-0015)."""
    topic = nsq.topic()
    first, second = nsq.connect(), nsq.connect()
    first.subscribe(topic, "c1", ready=1)
    second.subscribe(topic, "c2", ready=1)
    nsq.connect().publish(topic, b"copy")
    one, two = first.expect_message(b"copy", attempts=1), second.expect_message(b"copy", attempts=1)
    nsq.verify.equal("same ID in both channels", one.message_id, two.message_id)
    nsq.verify.equal("same timestamp in both channels", one.timestamp, two.timestamp)


@requirement("NSQ-FRAME-006")
def test_response_and_message_may_interleave(nsq):
    """SUB + RDY 5, then PUB on the same connection: an OK and the message, in either order (C-13; rec-0014)."""
    topic = nsq.topic()
    conn = nsq.connect()
    conn.send(wire.encode_command("SUB", topic, "c") + b"RDY 5\n")
    conn.expect_response(b"OK")
    conn.command("PUB", topic, body=b"x")
    conn.expect_response(b"OK")  # a message frame arriving first is kept for expect_message (C-13)
    conn.expect_message(b"x", attempts=1)


@requirement("NSQ-FRAME-006", "NSQ-ID-001")
def test_whole_session_pipelined(nsq):
    """IDENTIFY, PUB, PUB, SUB, RDY 2 in one write: four OKs in order, then both messages (C-22; rec-0029)."""
    topic = nsq.topic()
    conn = nsq.connect(magic=False)
    conn.send(wire.MAGIC_V2 + nsq.auth_command() + wire.encode_command("IDENTIFY", body=b"{}")
              + wire.encode_command("PUB", topic, body=b"p1") + wire.encode_command("PUB", topic, body=b"p2")
              + wire.encode_command("SUB", topic, "c") + b"RDY 2\n")
    nsq.expect_authenticated(conn)
    for _ in range(4):
        conn.expect_response(b"OK")
    bodies = sorted(frame.body for frame in conn.expect_messages(2))
    nsq.verify.equal("both pipelined messages delivered", [b"p1", b"p2"], bodies)


@requirement("NSQ-FRAME-006", "NSQ-ERR-002")
def test_pipelined_response_and_error_keep_their_order(nsq):
    """SUB, a FIN of an unknown ID and a PUB in one write: OK, the non-fatal E_FIN_FAILED, OK, in command order;
    an error frame does not overtake the response before it, nor wait behind the one after (C-13, C-22, P-FIN-04)."""
    topic = nsq.topic()
    conn = nsq.connect()
    conn.send(wire.encode_command("SUB", topic, "c") + b"FIN 0123456789abcdef\n"
              + wire.encode_command("PUB", topic, body=b"x"))
    frames = [conn.next_frame() for _ in range(3)]
    nsq.verify.equal("the three answers in command order (C-13)", ["OK", "E_FIN_FAILED", "OK"],
                     [frame.error_code or frame.data.decode("utf-8", "replace") for frame in frames])
