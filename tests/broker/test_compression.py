"""The snappy framing and raw deflate layers, fed in arbitrary pieces as TCP delivers them."""
from __future__ import annotations

import zlib

import cramjam
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reference_broker.compression import DeflateReader, DeflateWriter, SnappyReader, SnappyWriter, StreamError

WRITES = st.lists(st.binary(min_size=1, max_size=3000), min_size=1, max_size=8)  # writes are never empty


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:], strict=False)]


def _decode(reader, pieces: list[bytes]) -> bytes:
    """Feed each piece, then read until the reader needs more input."""
    out = b""
    for piece in pieces:
        reader.feed(piece)
        while data := reader.read(64 * 1024):
            out += data
    return out


@given(writes=WRITES, cuts=st.lists(st.integers(0, 10**6), max_size=10))
def test_snappy_round_trip_in_any_pieces(writes, cuts):
    writer, reader = SnappyWriter(), SnappyReader()
    stream = b"".join(writer(w) for w in writes)
    assert stream.startswith(b"\xff\x06\x00\x00sNaPpY")  # ID-34: the framing format's stream identifier
    assert stream.count(b"sNaPpY") >= 1
    assert _decode(reader, _split(stream, cuts)) == b"".join(writes)


@given(writes=WRITES, cuts=st.lists(st.integers(0, 10**6), max_size=10))
def test_deflate_round_trip_in_any_pieces(writes, cuts):
    writer, reader = DeflateWriter(6), DeflateReader()
    stream = b"".join(writer(w) for w in writes)
    assert _decode(reader, _split(stream, cuts)) == b"".join(writes)


def test_each_deflate_write_is_complete_on_its_own():
    # ID-33: raw DEFLATE with a sync flush, so the peer can inflate every write as it arrives.
    writer = DeflateWriter(6)
    inflater = zlib.decompressobj(-15)
    assert inflater.decompress(writer(b"\x00\x00\x00\x06\x00\x00\x00\x00OK")) == b"\x00\x00\x00\x06\x00\x00\x00\x00OK"


def test_snappy_reader_reads_a_standard_encoder():
    assert _decode(SnappyReader(), [bytes(cramjam.snappy.compress(b"hello" * 100))]) == b"hello" * 100


@pytest.mark.parametrize("garbage", [b"\x05\x03\x00\x00abc", b"\xff\x06\x00\x00sNoPpY"])
def test_snappy_reader_rejects_bad_chunks(garbage):
    with pytest.raises(StreamError):
        _decode(SnappyReader(), [b"\xff\x06\x00\x00sNaPpY" + garbage])
