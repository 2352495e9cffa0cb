"""A connection decoded in bounded windows gives the tables it gives decoded whole (no Spark: the task's own
function, on the walker's segments sorted as the analysis sorts them)."""

from __future__ import annotations

import pickle
from collections import Counter, defaultdict
from functools import partial

import pyarrow as pa
import pytest
from trace_helpers import PCAPS, walk

from spark_analysis.analysis import DEFAULT_NSQ_PORTS, FlowDecoder, decode_flow, flow_runs
from spark_analysis.generate import generate
from spark_analysis.judge.monitoring import OBSERVED
from spark_analysis.read.reassembly import reassemble
from spark_analysis.watch.increments import CARRIED_NS

FILE_SEGMENTS = 200  # a flow's segments in one capture file, for the carried decoding
SMALL_WINDOW = 4096  # every connection in many windows (dozens, most), each still a horizon for its answers


def tables_of(path, window_bytes, decode=decode_flow) -> dict[str, list[dict]]:
    """Every table's rows, as decode_flow writes them, sorted (the windows change the order rows are written in)."""
    segments = walk(path)
    segments = segments.take(pa.compute.sort_indices(segments, [("flow", "ascending", "at_start"),
                                                                ("ts_ns", "ascending"), ("offset", "ascending")]))
    written = defaultdict(list)
    for flow, runs in flow_runs(iter(segments.to_batches(max_chunksize=1000))):
        for name, table in decode(flow, runs, DEFAULT_NSQ_PORTS | {4160}, window_bytes):
            written[name] += table.to_pylist()
    activity = Counter()  # counted per window: the sums are the connection's
    for row in written.pop("activity", []):
        activity[tuple((key, value) for key, value in row.items() if key != "count")] += row["count"]
    written["activity"] = [{**dict(key), "count": count} for key, count in activity.items()]
    written[OBSERVED] = in_judging_order(written.get(OBSERVED, []))
    return {name: sorted(rows, key=repr) for name, rows in written.items()}


def in_judging_order(observed: list[dict]) -> list[dict]:
    """The monitors' rows with ``seq`` their place in their connection's order (the judge's sort): windows number
    them from their own start, and only the order counts."""
    ordered = sorted(observed, key=lambda row: (row["conn_id"], row["ts_ns"], row["seq"]))
    places = Counter()
    for row in ordered:
        row["seq"] = places[row["conn_id"]]
        places[row["conn_id"]] += 1
    return ordered


def carried_across_files(flow, runs, ports, window_bytes, carried_ns=CARRIED_NS):
    """decode_flow as ``nsq-trace watch`` decodes a flow: each run of its segments (a capture file's) by a
    FlowDecoder unpickled from the one before, cut where the run ends, and the flow's end on the last."""
    if flow is None:
        yield from decode_flow(flow, runs, ports, window_bytes)
        return
    flow_decoder = FlowDecoder(flow, ports, window_bytes, carried=True)
    files = (run.slice(start, FILE_SEGMENTS) for run in runs for start in range(0, run.num_rows, FILE_SEGMENTS))
    for segments in files:
        yield from flow_decoder.feed([segments])
        yield from flow_decoder.cut(carried_ns)
        flow_decoder = pickle.loads(pickle.dumps(flow_decoder))
    yield from flow_decoder.end()


def assert_same_tables(path, decode=decode_flow):
    whole, windowed = tables_of(path, None), tables_of(path, SMALL_WINDOW, decode)
    assert whole["events"], "nothing decoded"
    for name in ["events", *sorted(set(whole) | set(windowed))]:
        assert windowed.get(name, []) == whole.get(name, []), name


@pytest.mark.parametrize("name", ["workload-small", "compressed", "cluster", "transcripts"])
def test_windows_decode_the_committed_captures_as_whole_connections(name):
    assert_same_tables(PCAPS / f"{name}.pcap")


@pytest.mark.parametrize("carried_ns", [CARRIED_NS, 1_000_000])
@pytest.mark.parametrize("name", ["workload-small", "compressed", "cluster"])
def test_connections_carried_from_file_to_file_decode_as_whole_connections(name, carried_ns):
    """Cut and pickled after every 200 segments (deflate and snappy connections among them), then fed the next
    ones; the last 100 ms carried as decoded rows, or the last millisecond."""
    assert_same_tables(PCAPS / f"{name}.pcap", partial(carried_across_files, carried_ns=carried_ns))


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
