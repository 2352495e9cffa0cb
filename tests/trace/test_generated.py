"""The seeded generator: deterministic bytes, and a truth the analysis meets exactly, with gaps."""

from __future__ import annotations

import hashlib

from conftest import truth_mismatches

from spark_analysis.generate import generate


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    digests = []
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        generate(str(tmp_path / f"{name}.pcap"), 2_000_000, seed=seed)
        digests.append(hashlib.sha256((tmp_path / f"{name}.pcap").read_bytes()).hexdigest())
    assert digests[0] == digests[1] != digests[2]


def test_generated_trace_with_dropped_segments_meets_its_truth(analyse, tmp_path):
    path = tmp_path / "dropped.pcap"
    truth = generate(str(path), 12_000_000, seed=11, drop_fraction=0.03)
    summary = analyse("generated-dropped", [path])
    assert truth_mismatches(summary, truth) == []
    # the drops are visible as explicit gaps, never as decode errors or invented frames
    assert sum(c["gaps"] for c in summary["connections"]) > 0
    assert summary["errors"] == {}
    assert summary["error_frames"] == {"E_BAD_TOPIC": 1}
    assert {c["codec"] for c in summary["connections"]} == {"plain", "snappy", "deflate"}
    per_port = {c["port"]: c for c in summary["connections"]}
    for expected in truth["connections"]:
        got = per_port[expected["port"]]
        assert (got["deliveries"], got["fin"], got["heartbeats"], got["publish_commands"]) == (
            expected["deliveries"], expected["fin"], expected["heartbeats"], expected["publish_commands"])
