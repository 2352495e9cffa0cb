"""Command syntax: line endings, parameter splitting, case, body sizes, line length (C-14, C-15, C-16, C-17, C-18,
C-19, C-20, C-21, C-22 in conformance/spec/connection.toml)."""

import pytest

from nsq_protocol import wire

requirement = pytest.mark.requirement


@requirement("NSQ-SYNTAX-001")
def test_crlf_line_endings(nsq):
    """'SUB t c\\r\\n' works: one \\r before \\n is stripped (C-14; rec-0016)."""
    topic = nsq.topic()
    conn = nsq.connect()
    conn.send(f"SUB {topic} c\r\n".encode())
    conn.expect_response(b"OK")
    conn.send(f"PUB {topic}\r\n".encode() + b"\x00\x00\x00\x04crlf")  # size 4, body 'crlf'
    conn.expect_response(b"OK")


@requirement("NSQ-SYNTAX-002", "NSQ-SUB-004")
def test_double_space_makes_empty_topic(nsq):
    """'SUB  t c': the first parameter is empty, so the topic is invalid (C-15; rec-0017)."""
    conn = nsq.connect()
    conn.send(f"SUB  {nsq.topic()} c\n".encode())
    conn.expect_error("E_BAD_TOPIC", 'SUB topic name "" is not valid')


@requirement("NSQ-SYNTAX-002", "NSQ-SUB-004")
def test_double_space_makes_empty_channel(nsq):
    """'SUB t  c': the channel parameter is empty (C-15; rec-0018)."""
    conn = nsq.connect()
    conn.send(f"SUB {nsq.topic()}  c\n".encode())
    conn.expect_error("E_BAD_CHANNEL", 'SUB channel name "" is not valid')


@requirement("NSQ-SYNTAX-002")
def test_trailing_space_is_ignored(nsq):
    """'PUB t \\n': the empty last parameter is ignored (C-15; rec-0019)."""
    conn = nsq.connect()
    conn.send(f"PUB {nsq.topic()} \n".encode() + b"\x00\x00\x00\x05trail")
    conn.expect_response(b"OK")


@requirement("NSQ-SYNTAX-003", "NSQ-ERR-001")
def test_command_names_are_case_sensitive(nsq):
    """'nop' is not NOP: fatal E_INVALID (C-16; rec-0020)."""
    conn = nsq.connect()
    conn.send(b"nop\n")
    conn.expect_error("E_INVALID", "invalid command nop")


@requirement("NSQ-SYNTAX-003", "NSQ-ERR-001")
def test_unknown_command_is_fatal(nsq):
    """'ASDF' gives E_INVALID and the connection closes (C-21, C-23; rec-0028)."""
    conn = nsq.connect()
    conn.send(b"ASDF\n")
    conn.expect_error("E_INVALID", "invalid command ASDF")


@requirement("NSQ-SYNTAX-003")
def test_empty_line_is_an_unknown_command(nsq):
    """A bare '\\n' is the command '': E_INVALID with a trailing space, fatal (C-20; rec-0027)."""
    conn = nsq.connect()
    conn.send(b"\n")
    conn.expect_error("E_INVALID", "invalid command ")


@requirement("NSQ-SYNTAX-004", "NSQ-NOP-001")
def test_extra_parameters_are_ignored(nsq):
    """'SUB t c d' is OK, 'NOP x y' is silent, 'RDY 1 x' is RDY 1 (C-17; rec-0021)."""
    topic = nsq.topic()
    conn = nsq.connect()
    conn.send(f"SUB {topic} c d\n".encode())
    conn.expect_response(b"OK")
    conn.send(b"NOP x y\n")
    conn.expect_silence(0.3)
    conn.send(wire.encode_command("PUB", topic, body=b"extra") + b"RDY 1 x\n")
    conn.expect_response(b"OK")
    conn.expect_message(b"extra", attempts=1)


@requirement("NSQ-SYNTAX-005", "NSQ-PUB-003")
def test_pub_size_0xffffffff_is_negative(nsq):
    """PUB size ff ff ff ff is int32 -1 (C-18; rec-0022)."""
    conn = nsq.connect()
    conn.send(f"PUB {nsq.topic()}\n".encode() + b"\xff\xff\xff\xff")  # size -1 as int32
    conn.expect_error("E_BAD_MESSAGE", "PUB invalid message body size -1")


@requirement("NSQ-SYNTAX-005", "NSQ-MPUB-002")
def test_mpub_size_0x80000000_is_negative(nsq):
    """MPUB size 80 00 00 00 is int32 -2147483648 (C-18; rec-0023)."""
    conn = nsq.connect()
    conn.send(f"MPUB {nsq.topic()}\n".encode() + b"\x80\x00\x00\x00")  # size -2^31 as int32
    conn.expect_error("E_BAD_BODY", "MPUB invalid body size -2147483648")


@requirement("NSQ-SYNTAX-005", "NSQ-ID-004")
def test_identify_size_0xffffffff_is_negative(nsq):
    """IDENTIFY size -1 passes the too-big check and fails the <= 0 check (C-18, P-ID-03; rec-0024)."""
    conn = nsq.connect()
    conn.send(b"IDENTIFY\n\xff\xff\xff\xff")  # size -1 as int32
    conn.expect_error("E_BAD_BODY", "IDENTIFY invalid body size -1")


@requirement("NSQ-SYNTAX-006")
def test_overlong_line_closes_without_error_frame(nsq):
    """'NOP ' + 17000 bytes and no newline: closed with no error frame (C-19, C-25; rec-0025)."""
    conn = nsq.connect()
    conn.send(b"NOP " + b"A" * 17000)
    conn.expect_close(what="a line over 16 KiB closes the connection")


@requirement("NSQ-SYNTAX-006")
def test_10000_byte_line_is_fine(nsq):
    """'NOP ' + 10000 bytes + newline is a NOP (C-19; rec-0026)."""
    conn = nsq.connect()
    conn.send(b"NOP " + b"A" * 10000 + b"\n")
    conn.publish(nsq.topic(), b"after long line")
