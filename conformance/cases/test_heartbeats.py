"""Heartbeats and the read deadline (C-26, C-27, C-28, C-29, C-30, C-31, C-32, C-33 in
conformance/spec/connection.toml). Intervals are negotiated to 1000 ms."""

import time

import pytest

from nsq_protocol import wire

requirement = pytest.mark.requirement
HEARTBEAT_1S = {"heartbeat_interval": 1000}


def next_heartbeat(nsq, conn, timeout=3.0):
    start = time.monotonic()
    frame = conn.raw_frame(timeout)
    nsq.verify.equal("heartbeat frame (C-26)", wire.Frame(wire.FRAME_RESPONSE, wire.HEARTBEAT), frame)
    return nsq.elapsed_since(start)


@requirement("NSQ-HB-001")
def test_heartbeats_every_interval(nsq):
    """After IDENTIFY heartbeat_interval 1000: a heartbeat after ~1 s, and again ~1 s after NOP
    (C-26, C-30; rec-0036 observed 1.00 s)."""
    conn = nsq.connect()
    conn.identify(HEARTBEAT_1S)
    nsq.within("first heartbeat one interval after IDENTIFY", next_heartbeat(nsq, conn), 0.8, 2.0)
    conn.command("NOP")
    nsq.within("next heartbeat", next_heartbeat(nsq, conn), 0.7, 2.0)


@requirement("NSQ-HB-001")
def test_publisher_gets_heartbeats(nsq):
    """A connection that only publishes gets heartbeats too (C-28; rec-0037)."""
    topic = nsq.topic()
    conn = nsq.connect()
    conn.identify(HEARTBEAT_1S)
    conn.publish(topic, b"p")
    nsq.within("heartbeat to a publisher", next_heartbeat(nsq, conn), 0.5, 2.0)
    conn.send(b"NOP\n" + wire.encode_command("PUB", topic, body=b"q"))
    conn.expect_response(b"OK")


@requirement("NSQ-HB-002")
def test_read_deadline_closes_silently(nsq):
    """No command for 2 intervals: heartbeats, then a close with no error frame ~2 s after the last
    command (C-29; rec-0038 observed 2.00 s)."""
    conn = nsq.connect()
    conn.identify(HEARTBEAT_1S)
    start = time.monotonic()
    frames = []
    try:
        while nsq.elapsed_since(start) < 6.0:  # a broker that never closes must not keep the case waiting
            frames.append(conn.raw_frame(4.0))
    except AssertionError:
        pass
    closed_after = nsq.elapsed_since(start)
    nsq.verify.that("only heartbeats before the deadline close (C-25)",
                    all(frame.is_heartbeat for frame in frames), "heartbeats only",
                    [frame.describe() for frame in frames])
    nsq.verify.that("the server closed the connection", conn.closed, "closed", "still open")
    nsq.within("close at 2 x heartbeat interval after the last command", closed_after, 1.8, 3.0)


@requirement("NSQ-HB-003")
def test_nop_keeps_connection_alive(nsq):
    """Answering 4 heartbeats with NOP keeps the connection past the 2 s deadline (C-29; rec-0039)."""
    conn = nsq.connect()
    conn.identify(HEARTBEAT_1S)
    for _ in range(4):
        next_heartbeat(nsq, conn)
        conn.command("NOP")
    conn.publish(nsq.topic(), b"still")


@requirement("NSQ-HB-004", "NSQ-SUB-003")
def test_heartbeats_disabled(nsq):
    """heartbeat_interval -1: 2.5 s of silence with the connection open, then SUB is refused (C-32; rec-0040)."""
    conn = nsq.connect()
    conn.identify({"heartbeat_interval": -1})
    conn.expect_silence(2.5)
    nsq.verify.equal("heartbeats with heartbeat_interval -1", 0, conn.heartbeats)
    conn.command("SUB", nsq.topic(), "c")
    conn.expect_error("E_INVALID", "cannot SUB with heartbeats disabled")


@requirement("NSQ-HB-003")
def test_busy_connection_still_gets_heartbeats(nsq):
    """Heartbeats come on a fixed ticker even when the client is busy (C-28): with a command every
    0.3 s for 2.5 s the connection still gets ~2 heartbeats and stays open."""
    topic = nsq.topic()
    conn = nsq.connect()
    conn.identify(HEARTBEAT_1S)
    start = time.monotonic()
    while nsq.elapsed_since(start) < 2.5:
        conn.publish(topic, b"busy")
        conn.expect_silence(0.3)
    nsq.verify.that("heartbeats keep coming to a busy connection (C-28)", conn.heartbeats >= 1,
                    ">= 1 heartbeat in 2.5 s", conn.heartbeats)


@pytest.mark.long_wait(30)
@requirement("NSQ-HB-005")
def test_default_heartbeat_interval_is_30s(nsq):
    """Without IDENTIFY the first heartbeat comes after ~30 s (C-27; rec-0042 observed 30.0 s)."""
    interval = nsq.limits["heartbeat_interval_ms"] / 1000
    conn = nsq.connect()
    conn.publish(nsq.topic(), b"p")
    start = time.monotonic()
    frame = conn.raw_frame(interval + 5)
    nsq.verify.equal("heartbeat frame", wire.Frame(wire.FRAME_RESPONSE, wire.HEARTBEAT), frame, "C-27")
    nsq.within("default heartbeat interval", nsq.elapsed_since(start), interval - 1, interval + 2.5, "C-27")


@requirement("NSQ-HB-006")
def test_a_heartbeat_flushes_buffered_messages(nsq):
    """output_buffer_timeout -1 (no flush ticker) and RDY 10: a message published right after a heartbeat waits in
    the output buffer for the next heartbeat, and comes just before it (C-33; rec-0041 observed 1.00 s)."""
    topic = nsq.topic()
    conn = nsq.connect()
    conn.identify({**HEARTBEAT_1S, "output_buffer_timeout": -1})
    conn.subscribe(topic, "c", ready=10)
    next_heartbeat(nsq, conn)
    conn.command("NOP")  # the read deadline counts from the last command
    nsq.connect().publish(topic, b"buffered")
    published = time.monotonic()
    first = conn.raw_frame(3.0)
    arrived = nsq.elapsed_since(published)
    second = conn.raw_frame(0.2)
    nsq.verify.equal("the message after the heartbeat interval, the heartbeat right after it (C-33)",
                     (True, True, True), (first.frame_type == wire.FRAME_MESSAGE, arrived > 0.7, second.is_heartbeat))
