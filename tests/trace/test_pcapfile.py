"""The generic pcap/pcapng walker: formats, link layers, byte ranges and named errors (no Spark)."""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest
from pcap_variants import records, to_ipv6, to_linux_sll2, write_pcap, write_pcapng
from trace_helpers import PCAPS, walk

from spark_analysis.read.pcapfile import split_file


@pytest.fixture(scope="module")
def frames():
    return records(PCAPS / "compressed.pcap")


def segments(table):
    ok = table.filter(pa.compute.is_null(table.column("error")))
    return list(
        zip(*(ok.column(c).to_pylist() for c in ("ts_ns", "sport", "dport", "seq", "flags", "payload")), strict=False)
    )


def test_recorded_pcap_yields_one_row_per_tcp_segment(frames):
    table = walk(PCAPS / "compressed.pcap")
    assert table.num_rows == len(frames) == 739
    assert table.column("error").null_count == table.num_rows
    assert set(table.column("flow").to_pylist()) == {
        f"127.0.0.1 24150|127.0.0.1 {port}" for port in (59706, 59710, 59718)
    }


@pytest.mark.parametrize("nanoseconds,big_endian", [(False, True), (True, False), (True, True)])
def test_pcap_timestamp_resolution_and_byte_order(frames, tmp_path, nanoseconds, big_endian):
    path = tmp_path / "variant.pcap"
    write_pcap(path, frames, nanoseconds=nanoseconds, big_endian=big_endian)
    assert segments(walk(path)) == segments(walk(PCAPS / "compressed.pcap"))


@pytest.mark.parametrize("convert,linktype", [(lambda f: f, 1), (to_linux_sll2, 276)])
def test_pcapng_and_linux_cooked_v2(frames, tmp_path, convert, linktype):
    path = tmp_path / "variant.pcapng"
    write_pcapng(path, convert(frames), linktype=linktype)
    assert segments(walk(path)) == segments(walk(PCAPS / "compressed.pcap"))


def test_ipv6_addresses_and_segments(frames, tmp_path):
    path = tmp_path / "v6.pcap"
    write_pcap(path, to_ipv6(frames))
    table = walk(path)
    assert set(table.column("src").to_pylist()) == {"2001:db8::7f00:1"}
    assert segments(table) == segments(walk(PCAPS / "compressed.pcap"))


def test_bsd_null_loopback(frames, tmp_path):
    path = tmp_path / "null.pcap"
    write_pcap(path, [(ts, struct.pack("<I", 2) + frame[14:]) for ts, frame in frames], linktype=0)
    assert segments(walk(path)) == segments(walk(PCAPS / "compressed.pcap"))


@pytest.mark.parametrize("split", [4096, 50_000, 1 << 20])
def test_byte_ranges_partition_the_records_exactly(split):
    path = PCAPS / "compressed.pcap"
    pieces = [walk(path, r.start, r.end) for r in split_file(str(path), split)]
    assert [row for piece in pieces for row in piece.column("offset").to_pylist()] == walk(path).column(
        "offset"
    ).to_pylist()


@pytest.mark.parametrize("cut,error", [(24 + 8, "pcap_truncated_record"), (204366 - 100, "pcap_truncated_record")])
def test_truncated_pcap_gives_a_named_error_row(tmp_path, cut, error):
    path = tmp_path / "cut.pcap"
    path.write_bytes((PCAPS / "compressed.pcap").read_bytes()[:cut])
    table = walk(path)
    assert [e for e in table.column("error").to_pylist() if e] == [error]


@pytest.mark.parametrize(
    "content,error",
    [
        (b"", "capture_empty"),
        (b"GET / HTTP/1.1\r\n", "capture_bad_magic"),
        (b"\xd4\xc3\xb2\xa1\x02\x00", "capture_truncated_header"),
    ],
)
def test_not_a_capture_gives_a_named_error_row(tmp_path, content, error):
    path = tmp_path / "bad.pcap"
    path.write_bytes(content)
    assert walk(path).column("error").to_pylist() == [error]


def test_corrupt_record_length_stops_the_file_with_a_named_error(tmp_path):
    data = bytearray((PCAPS / "compressed.pcap").read_bytes())
    struct.pack_into("<I", data, 24 + 8, 0x7FFFFFFF)  # first record's captured length
    path = tmp_path / "corrupt.pcap"
    path.write_bytes(bytes(data))
    assert walk(path).column("error").to_pylist() == ["pcap_corrupt_record"]
