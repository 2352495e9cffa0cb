"""A connection decoded in bounded windows gives the tables it gives decoded whole (no Spark: the task's own
function, on the walker's segments sorted as the analysis sorts them)."""

from __future__ import annotations

from collections import Counter, defaultdict

import pyarrow as pa
import pytest
from trace_helpers import PCAPS, walk

from spark_analysis.analysis import DEFAULT_NSQ_PORTS, _flows, decode_flow
from spark_analysis.generate import generate
from spark_analysis.reassembly import reassemble

SMALL_WINDOW = 4096  # every connection in many windows (dozens, most), each still a horizon for its answers


def tables_of(path, window_bytes) -> dict[str, list[dict]]:
    """Every table's rows, as decode_flow writes them, sorted (the windows change the order rows are written in)."""
    segments = walk(path)
    segments = segments.take(pa.compute.sort_indices(segments, [("flow", "ascending", "at_start"),
                                                                ("ts_ns", "ascending"), ("offset", "ascending")]))
    written = defaultdict(list)
    for flow, runs in _flows(iter(segments.to_batches(max_chunksize=1000))):
        for name, table in decode_flow(flow, runs, DEFAULT_NSQ_PORTS | {4160}, window_bytes):
            written[name] += table.to_pylist()
    activity = Counter()  # counted per window: the sums are the connection's
    for row in written.pop("activity", []):
        activity[tuple((key, value) for key, value in row.items() if key != "count")] += row["count"]
    written["activity"] = [{**dict(key), "count": count} for key, count in activity.items()]
    return {name: sorted(rows, key=repr) for name, rows in written.items()}


def assert_same_tables(path):
    whole, windowed = tables_of(path, None), tables_of(path, SMALL_WINDOW)
    assert whole["events"], "nothing decoded"
    for name in ["events", *sorted(set(whole) | set(windowed))]:
        assert windowed.get(name, []) == whole.get(name, []), name


@pytest.mark.parametrize("name", ["workload-small", "compressed", "cluster", "transcripts"])
def test_windows_decode_the_committed_captures_as_whole_connections(name):
    assert_same_tables(PCAPS / f"{name}.pcap")


@pytest.mark.parametrize("workload", ["mixed", "bench"])
def test_windows_decode_traces_with_lost_segments_as_whole_connections(workload, tmp_path):
    path = tmp_path / f"{workload}.pcap"
    generate(str(path), 3_000_000, seed=21, drop_fraction=0.01, workload=workload)
    assert_same_tables(path)


def test_a_long_connection_comes_in_windows_of_bounded_size_and_decodes_as_whole(tmp_path):
    path = tmp_path / "long.pcap"
    generate(str(path), 4_000_000, seed=5, workload="long")
    assert_same_tables(path)
    segments = walk(path)
    rows = [tuple(row[name] for name in ("ts_ns", "src", "dst", "sport", "dport", "seq", "flags", "payload"))
            for row in segments.to_pylist()]
    [flow] = set(segments.column("flow").to_pylist())
    sizes, held = [], []
    for conn in reassemble(flow, rows, DEFAULT_NSQ_PORTS, 256 << 10):
        sizes.append(sum(len(data) for _, data, _ in conn.c2s.chunks + conn.s2c.chunks))
        held.append(conn.c2s.held_bytes + conn.s2c.held_bytes)
    assert len(sizes) > 10 and sum(sizes) > 3_500_000
    assert max(sizes) < 2 * (256 << 10) and max(held) < 256 << 10
