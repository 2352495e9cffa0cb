"""The rest of NSQ's traffic: nsqd's V1 connection to nsqlookupd decoded into registrations, a TLS connection
counted and left opaque after its upgrade, never mis-decoded. ``pcaps/cluster.pcap`` was captured from nsqd and
nsqlookupd v1.3.0 (tests/trace/cluster_recording.py); the live test captures the reference programs the same way
and must give the same truth."""

from __future__ import annotations

import os
import subprocess
import sys

import cluster_recording
import pytest
from trace_helpers import PCAPS, REPO, load_truth

from nsq_protocol import wire, wire_v1


def mismatches(summary: dict, truth: dict) -> list[str]:
    """Every figure of the truth the summary gets wrong."""
    lookupd = summary["lookupd"]
    registrations = sorted([row["action"], row["topic"], row["channel"]] for row in lookupd["registrations"]
                           for _ in range(row["count"]))
    found = {
        "totals": {key: summary["totals"][key] for key in truth["totals"]},
        "tls_connections": summary["tls_connections"],
        "errors": summary["errors"],
        "lookupd": {"connections": lookupd["connections"], "producers": lookupd["producers"],
                    "commands": lookupd["commands"], "registrations": registrations},
    }
    wrong = [f"{key}: {found[key]} != {expected}" for key, expected in truth.items() if found[key] != expected]
    if any(row["status"] != "ok" for row in lookupd["registrations"]):
        wrong.append(f"registrations not answered OK: {lookupd['registrations']}")
    return wrong + [f"violations {summary['violations']}"] * bool(summary["violations"])


def test_the_recorded_cluster_decodes_to_its_truth(analyse):
    summary = analyse("cluster", [PCAPS / "cluster.pcap"])
    assert mismatches(summary, load_truth("cluster")) == []
    assert summary["other_connections"] == 0  # nsqlookupd's connection is not "other", nor the TLS one


@pytest.mark.skipif(os.geteuid() != 0, reason="capturing needs root (raw sockets)")
def test_a_live_capture_of_the_reference_cluster_gives_the_same_truth(tmp_path, analyse):
    output = tmp_path / "cluster.pcap"
    result = subprocess.run([sys.executable, str(REPO / "tests" / "trace" / "cluster_recording.py"), "-o", str(output)],
                            cwd=REPO, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    assert mismatches(analyse("live-cluster", [output]), cluster_recording.truth()) == []


def test_v1_decoders_are_split_independent_and_refuse_what_nsqlookupd_refuses():
    """L-TCP-01, L-TCP-02, L-TCP-04, L-TCP-20: the magic, trimmed lines, IDENTIFY's sized body; replies without a frame
    type."""
    stream = (wire_v1.MAGIC_V1 + wire_v1.encode_command("IDENTIFY", body=b'{"tcp_port":4150}')
              + b"REGISTER t c\r\nUNREGISTER t\nPING\n")
    decoder = wire_v1.V1CommandDecoder()
    one_by_one = [command for index in range(len(stream)) for command in decoder.feed(stream[index:index + 1])]
    assert one_by_one == wire_v1.V1CommandDecoder().feed(stream)
    assert [(c.name, c.params) for c in one_by_one] == [(b"IDENTIFY", ()), (b"REGISTER", (b"t", b"c")),
                                                        (b"UNREGISTER", (b"t",)), (b"PING", ())]
    replies = wire_v1.encode_reply(b"OK") + wire_v1.encode_reply(b"E_INVALID client must IDENTIFY")
    assert wire_v1.V1ReplyDecoder().feed(replies) == [b"OK", b"E_INVALID client must IDENTIFY"]
    with pytest.raises(wire.ProtocolViolation):
        wire_v1.V1CommandDecoder().feed(b"  V2PING\n")  # L-TCP-03
    with pytest.raises(wire.ProtocolViolation):
        wire_v1.V1ReplyDecoder().feed(b"\xff\xff\xff\xfe")  # a negative size
