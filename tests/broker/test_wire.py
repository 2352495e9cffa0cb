"""The broker's codec against golden bytes and the catalogue's rules."""
from __future__ import annotations

import re
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reference_broker import wire


def test_error_frame_for_bad_magic_is_the_recorded_18_bytes():
    # C-02: size 18 = 4 (type) + 14 ("E_BAD_PROTOCOL"), type 1.
    assert wire.frame(wire.FRAME_TYPE_ERROR, b"E_BAD_PROTOCOL") == b"\x00\x00\x00\x12\x00\x00\x00\x01E_BAD_PROTOCOL"


@given(timestamp=st.integers(0, 2**63 - 1), attempts=st.integers(0, 65535),
       message_id=st.binary(min_size=16, max_size=16), body=st.binary(max_size=300))
def test_message_frame_layout(timestamp, attempts, message_id, body):
    # C-09: [size][type 2][8-byte ts][2-byte attempts][16-byte id][body], size = 4 + 26 + len(body).
    encoded = wire.message_frame(timestamp, attempts, message_id, body)
    size, frame_type, ts, att = struct.unpack_from(">IiqH", encoded)
    assert (size, frame_type, ts, att) == (len(encoded) - 4, 2, timestamp, attempts)
    assert encoded[18:34] == message_id and encoded[34:] == body


@pytest.mark.parametrize("line,expected", [
    (b"SUB t c", (b"SUB", [b"t", b"c"])),
    (b"SUB t c\r", (b"SUB", [b"t", b"c"])),  # C-14: one CR stripped
    (b"SUB  t c", (b"SUB", [b"", b"t", b"c"])),  # C-15: two spaces make an empty param
    (b"PUB t ", (b"PUB", [b"t", b""])),  # C-15: a trailing space makes an empty last param
    (b"", (b"", [])),  # C-20: the empty command
    (b"RDY\r\r", (b"RDY\r", [])),  # only one CR goes
])
def test_command_line_split(line, expected):
    assert wire.parse_command_line(line) == expected


@pytest.mark.parametrize("name,valid", [
    (b"a" * 64, True), (b"a" * 65, False),  # D-39: 1..64
    (b"a" * 54 + b"#ephemeral", True), (b"a" * 55 + b"#ephemeral", False),  # suffix counts
    (b".#ephemeral", True), (b"#ephemeral", False), (b"t#eph", False), (b"test:ephemeral", False),
    (b".", True), (b"..", True), (b"", False), (b"test-with_period.", True), (b"a b", False),
])
def test_name_rule(name, valid):
    assert wire.is_valid_name(name) is valid


@given(st.binary(max_size=80))
def test_name_rule_matches_its_regular_expression(name):
    expected = 1 <= len(name) <= 64 and re.fullmatch(rb"[.a-zA-Z0-9_-]+(#ephemeral)?", name) is not None
    assert wire.is_valid_name(name) is expected


@pytest.mark.parametrize("raw,size", [(b"\x00\x00\x00\x05", 5), (b"\xff\xff\xff\xff", -1),
                                      (b"\x80\x00\x00\x00", -(2**31))])
def test_sizes_are_int32(raw, size):
    # C-18: read as uint32, cast to int32 (PUB with 0xFFFFFFFF reports size -1).
    assert wire.read_size(raw) == size


@pytest.mark.parametrize("raw,quoted", [
    (b"a!b", '"a!b"'), (b'q"x', '"q\\"x"'), (b"tab\there", '"tab\\there"'), (b"\x00", '"\\x00"'),
    (b"\xff", '"\\xff"'), ("é".encode(), '"é"'), (b"\x7f", '"\\x7f"'),
])
def test_go_quote(raw, quoted):
    # P-SUB-04 prints rejected names with Go's %q.
    assert wire.go_quote(raw) == quoted


def test_error_classes_decide_fatality():
    assert wire.FatalClientError("E_INVALID", "x").fatal
    assert not wire.ClientError("E_FIN_FAILED", "x").fatal
    assert str(wire.FatalClientError("E_BAD_PROTOCOL")) == "E_BAD_PROTOCOL"
    assert str(wire.ClientError("E_FIN_FAILED", "FIN x failed")) == "E_FIN_FAILED FIN x failed"


def _members_one_at_a_time(limit: int, max_size: int, data: bytes) -> tuple[list[bytes], int]:
    """The MPUB member rule read literally: each size prefix, then its body, stopping at the first refused one."""
    members, position = [], 0
    while len(members) < limit and position + 4 <= len(data):
        (size,) = struct.unpack_from(">i", data, position)
        if not 0 < size <= max_size or position + 4 + size > len(data):
            break
        members.append(data[position + 4:position + 4 + size])
        position += 4 + size
    return members, position


@given(sizes=st.lists(st.integers(-1, 6), max_size=8), equal=st.booleans(), tail=st.binary(max_size=6),
       lead=st.binary(max_size=3), limit=st.integers(0, 10), max_size=st.integers(1, 8))
def test_buffered_members_take_what_the_member_rule_takes(sizes, equal, tail, lead, limit, max_size):
    """P-MPUB-03: the bulk path for equal sizes and the member loop split a buffer as one member at a time would."""
    if equal and sizes:
        sizes = [sizes[0]] * len(sizes)
    data = b"".join(struct.pack(">i", size) + bytes([65 + index]) * max(size, 0) for index, size in enumerate(sizes))
    buffer = bytearray(lead + data + tail)
    members, end = wire.buffered_members(limit, max_size, buffer, len(lead))
    expected, consumed = _members_one_at_a_time(limit, max_size, bytes(buffer[len(lead):]))
    assert (members, end) == (expected, len(lead) + consumed)
