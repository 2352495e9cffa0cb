"""Done-when #1, second half: pcapng, IPv6, other link layers and a capture split by time give
exactly the same counts as the recorded truth. The variants are derived at test time."""

from __future__ import annotations

import pytest
from pcap_variants import records, split_by_time, to_ipv6, to_linux_sll2, write_pcap, write_pcapng
from trace_helpers import PCAPS, load_truth, truth_mismatches


@pytest.fixture(scope="module")
def compressed_frames():
    return records(PCAPS / "compressed.pcap")


def test_pcapng_with_nanosecond_resolution(analyse, compressed_frames, tmp_path):
    path = tmp_path / "compressed.pcapng"
    write_pcapng(path, compressed_frames)
    assert truth_mismatches(analyse("pcapng", [path]), load_truth("compressed")) == []


def test_ipv6_big_endian_nanosecond_pcap(analyse, compressed_frames, tmp_path):
    path = tmp_path / "compressed-ipv6.pcap"
    write_pcap(path, to_ipv6(compressed_frames), nanoseconds=True, big_endian=True)
    summary = analyse("ipv6", [path])
    assert truth_mismatches(summary, load_truth("compressed")) == []
    assert {c["server"] for c in summary["connections"]} == {"2001:db8::7f00:1 24150"}


def test_linux_cooked_ipv6_pcapng(analyse, compressed_frames, tmp_path):
    path = tmp_path / "compressed-sll2.pcapng"
    write_pcapng(path, to_linux_sll2(to_ipv6(compressed_frames)), linktype=276)
    assert truth_mismatches(analyse("sll2", [path]), load_truth("compressed")) == []


def test_capture_split_by_time_into_files(analyse, tmp_path):
    """Connections span the files: they are joined in the shuffle, not by reader state."""
    pieces = split_by_time(records(PCAPS / "workload-small.pcap"), 3)
    paths = []
    for number, piece in enumerate(pieces):
        paths.append(tmp_path / f"workload-{number}.pcap")
        write_pcap(paths[-1], piece)
    summary = analyse("split", paths)
    assert truth_mismatches(summary, load_truth("workload-small")) == []
    assert summary["errors"] == {}
