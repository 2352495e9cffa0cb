"""A real capture, as the trace benchmark records it (benchmarks/trace_pynsq_recording.py): pynsq's Writers MPUB
batches of 200 through the reference broker, its Reader (max_in_flight 2500) FINs every message, the scapy path of
nsq-trace capture records it. The analysis reports what the clients observed and the broker's /stats confirmed."""

from __future__ import annotations

import os

import pytest
from trace_helpers import truth_mismatches

pytest.importorskip("nsq", reason="pynsq makes the traffic (tox -e trace installs it)")
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="capturing needs root (raw sockets)")

MESSAGES = 4000  # 20 MPUBs: ~2.4 MB, a few seconds at the sniffer's pace


def test_a_pynsq_capture_analyses_to_what_its_clients_observed(tmp_path, analyse):
    from benchmarks.trace_pynsq_recording import record

    pcap = tmp_path / "pynsq.pcap"
    truth = record(pcap, MESSAGES, progress=False, timeout=40)
    assert truth["totals"]["messages_published"] == truth["totals"]["fin"] == MESSAGES

    summary = analyse("pynsq-capture", [pcap])
    assert truth_mismatches(summary, truth) == []
    assert summary["topics"].keys() == truth["topics"].keys()
    assert (summary["errors"], summary["violations"], summary["error_frames"]) == ({}, {}, {})
