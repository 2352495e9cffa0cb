"""Magic bytes / protocol selection (C-01, C-02, C-03, C-04, C-05 in conformance/spec/connection.toml)."""

import pytest

from nsq_protocol import wire

requirement = pytest.mark.requirement


@requirement("NSQ-MAGIC-001")
def test_magic_then_pipelined_commands(nsq):
    """The magic and two PUBs in one write: both are answered OK (rec-0003)."""
    topic = nsq.topic()
    conn = nsq.connect(magic=False)
    conn.send(wire.MAGIC_V2 + nsq.auth_command() + wire.encode_command("PUB", topic, body=b"m1") + b"NOP\n"
              + wire.encode_command("PUB", topic, body=b"m2"))
    nsq.expect_authenticated(conn)
    conn.expect_response(b"OK")
    conn.expect_response(b"OK")


@requirement("NSQ-MAGIC-001")
def test_magic_split_across_writes(nsq):
    """'  ' then 'V2' in separate writes is the same magic (rec-0004)."""
    conn = nsq.connect(magic=False)
    conn.send(b"  ")
    nsq.wait(0.1, "let the first half arrive alone")
    conn.send(b"V2" + nsq.auth_command())
    nsq.expect_authenticated(conn)
    conn.publish(nsq.topic(), b"split")


@requirement("NSQ-MAGIC-002")
@pytest.mark.parametrize("magic", [b"  V1", b"abcd", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"V2NOP\n", b"  v2"],
                         ids=["V1", "garbage", "http", "no-spaces", "lower-case"])
def test_bad_magic_is_rejected(nsq, magic):
    """Any other 4 bytes: E_BAD_PROTOCOL (frame size 18), then close (C-02, C-05; rec-0005..0009)."""
    conn = nsq.connect(magic=False)
    conn.send(magic)
    frame = conn.raw_frame()
    nsq.verify.equal("bad magic answer", wire.Frame(wire.FRAME_ERROR, b"E_BAD_PROTOCOL"), frame)
    conn.expect_close()


@requirement("NSQ-MAGIC-003")
def test_partial_magic_then_half_close_closes_silently(nsq):
    """Two bytes of magic, then SHUT_WR: the server closes and writes nothing (C-03; rec-0010)."""
    conn = nsq.connect(magic=False)
    conn.send(b"  ")
    conn.shutdown_write()
    conn.expect_close()


@requirement("NSQ-MAGIC-003")
def test_no_timeout_before_magic(nsq):
    """A silent client is neither closed nor sent heartbeats before the magic; then it works (C-04; rec-0011)."""
    conn = nsq.connect(magic=False)
    conn.expect_silence(2.5)
    nsq.verify.equal("heartbeats before the magic", 0, conn.heartbeats)
    conn.send(wire.MAGIC_V2 + nsq.auth_command() + wire.encode_command("PUB", nsq.topic(), body=b"late"))
    nsq.expect_authenticated(conn)
    conn.expect_response(b"OK")
