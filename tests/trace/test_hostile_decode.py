"""The decoding task's function (``decode_flow``: reassembly, ``ConnectionDecoder``, the per-connection tables) over
hostile connections (hostile_captures.py), no Spark: whatever a broken broker or client sends, it returns tables,
and the bytes no decoder can read are counted in ``undecodable_bytes`` error rows, unless an error row says the rest
of their direction is lost. Bytes inside a compression layer are not counted one by one: a layer that fails is
``decompression_failed``, and a compressed chunk the capture cut short holds its bytes in the layer."""

from __future__ import annotations

from collections import defaultdict

import pyarrow as pa
from hostile_captures import CLIENT, SERVER, connections, write_pcap
from hypothesis import HealthCheck, given, settings
from trace_helpers import walk

from spark_analysis.analysis import DEFAULT_NSQ_PORTS, decode_flow, flow_runs
from spark_analysis.decode.kinds import Direction

# the errors after which a direction is not decoded any more: its bytes are not counted one by one (a magic the
# client's FIN cut short, C-03, is all there was of it)
DIRECTION_LOST = {"tls_opaque", "decompression_failed", "compressed_stream_gap", "bad_magic", "unreadable_command",
                  "unreadable_layer", "magic_cut_short"}
SIDES = {CLIENT: Direction.CLIENT, SERVER: Direction.SERVER}


def decoded(path, window_bytes) -> dict[str, list[dict]]:
    segments = walk(path)
    segments = segments.take(pa.compute.sort_indices(segments, [("flow", "ascending", "at_start"),
                                                                ("ts_ns", "ascending"), ("offset", "ascending")]))
    tables = defaultdict(list)
    for flow, runs in flow_runs(iter(segments.to_batches(max_chunksize=64))):
        for name, table in decode_flow(flow, runs, DEFAULT_NSQ_PORTS, window_bytes):
            tables[name] += table.to_pylist()
    return tables


@settings(max_examples=500, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(conn=connections(), small_windows=...)
def test_hostile_connections_decode_to_tables_with_every_undecodable_byte_counted(tmp_path, conn, small_windows: bool):
    path = tmp_path / "hostile.pcap"
    write_pcap(path, [conn])
    tables = decoded(path, 64 if small_windows else None)
    connection = [row for row in tables["events"] if row["kind"] == "connection"]
    assert [row["name"] for row in connection] == ["nsq"] * conn.captured
    if not conn.captured or connection[0]["connection"]["codec"] != "plain":
        return
    for direction, side in SIDES.items():
        errors = [row for row in tables["events"] if row["kind"] == "error" and row["direction"] == side]
        if any(row["name"] in DIRECTION_LOST for row in errors):
            continue
        counted = sum(row["byte_count"] for row in errors if row["name"] == "undecodable_bytes")
        assert counted >= conn.undecodable(direction), (direction, errors)
