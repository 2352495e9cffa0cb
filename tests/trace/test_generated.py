"""The seeded generator: deterministic bytes, and a truth the analysis meets exactly, with gaps."""

from __future__ import annotations

import hashlib

from trace_helpers import truth_mismatches, walk

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
            expected["deliveries"],
            expected["fin"],
            expected["heartbeats"],
            expected["publish_commands"],
        )


def test_scapy_reads_the_same_segments_as_the_walker(tmp_path):
    """An independent dissector agrees with the generator's framing and the walker's reading."""
    from scapy.layers.inet import TCP
    from scapy.utils import rdpcap


    path = tmp_path / "small.pcap"
    generate(str(path), 1_000_000, seed=5)
    ours = walk(path)
    theirs = [(p[TCP].sport, p[TCP].dport, p[TCP].seq, bytes(p[TCP].payload)) for p in rdpcap(str(path))]
    assert list(zip(*(ours.column(c).to_pylist() for c in ("sport", "dport", "seq", "payload")), strict=True)) == theirs


def test_pcapng_output_holds_the_same_packets(tmp_path):


    tables = []
    for file_format in ("pcap", "pcapng"):
        path = tmp_path / f"same.{file_format}"
        generate(str(path), 1_000_000, seed=9, file_format=file_format)
        tables.append(walk(path))
    columns = ("flow", "seq", "flags", "payload")
    assert [tables[0].column(c).to_pylist() for c in columns] == [tables[1].column(c).to_pylist() for c in columns]
    # pcapng keeps nanoseconds (if_tsresol 9); pcap has microseconds
    assert [ts // 1000 for ts in tables[1].column("ts_ns").to_pylist()] == [
        ts // 1000 for ts in tables[0].column("ts_ns").to_pylist()
    ]
    assert tables[1].column("error").null_count == tables[1].num_rows


def test_bench_workload_trace_meets_its_truth(analyse, tmp_path):
    """nsq's bench tools' shape: small messages in MPUB batches, RDY 2500 consumers FINing all."""
    path = tmp_path / "bench.pcap"
    truth = generate(str(path), 6_000_000, seed=12, drop_fraction=0.02, workload="bench")
    assert truth["totals"]["messages_published"] > 10_000
    assert truth["totals"]["deliveries"] < truth["totals"]["messages_published"]  # some segments dropped
    summary = analyse("generated-bench", [path])
    assert truth_mismatches(summary, truth) == []
    assert summary["errors"] == {} and summary["violations"] == {}
    assert sum(c["gaps"] for c in summary["connections"]) > 0
    per_port = {c["port"]: c for c in summary["connections"]}
    for expected in truth["connections"]:
        got = per_port[expected["port"]]
        assert (got["deliveries"], got["fin"], got["messages_published"], got["cls"]) == (
            expected["deliveries"],
            expected["fin"],
            expected["messages_published"],
            expected["cls"],
        )
