"""``nsq-trace analyze``'s entry point (``run_analysis``, with its report) on hostile captures (hostile_captures.py),
Spark in local mode: several broken connections a capture, and whatever they hold, the analysis ends with
summary.json, report.html and the tables, and the bytes no decoder can read are counted in the errors table.

The first example is issue 32's crash: a PUB without a topic answered by an error sent as a response frame was taken
for a publish nsqd accepted into topic None, and summarising failed with a TypeError (no summary.json)."""

from __future__ import annotations

import json
from collections import Counter

import pyarrow.parquet as pq
from hostile_captures import CLIENT, SERVER, HostileConnection, Piece, connections, write_pcap
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from test_hostile_decode import DIRECTION_LOST

from nsq_protocol import wire
from spark_analysis.analysis import run_analysis

PUB_WITHOUT_TOPIC_ANSWERED_BY_AN_ERROR_AS_RESPONSE = HostileConnection([
    Piece(CLIENT, wire.MAGIC_V2),
    Piece(CLIENT, b"PUB\n" + (5).to_bytes(4, "big") + b"hello"),
    Piece(SERVER, wire.encode_frame(wire.FRAME_RESPONSE, b"E_BAD_TOPIC PUB topic name must be valid")),
    Piece(CLIENT, wire.encode_command("PUB", "t", body=b"x")),
    Piece(SERVER, wire.encode_frame(wire.FRAME_RESPONSE, b"OK")),
], handshake=True, close=True)


# an example is an analysis of seconds: no shrinking (the decoding's own test, test_hostile_decode.py, shrinks)
@settings(max_examples=12, deadline=None, derandomize=True, database=None, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@example(conns=[PUB_WITHOUT_TOPIC_ANSWERED_BY_AN_ERROR_AS_RESPONSE])
@given(conns=st.lists(connections(), min_size=1, max_size=8))
def test_analyze_ends_with_its_summary_on_hostile_captures(spark, tmp_path_factory, conns):
    directory = tmp_path_factory.mktemp("hostile")
    path = directory / "hostile.pcap"
    write_pcap(path, conns)
    out = directory / "out"
    run_analysis(spark, [str(path)], str(out))
    summary = json.loads((out / "summary.json").read_text())
    assert (out / "report.html").stat().st_size > 0
    errors = pq.read_table(out / "tables" / "errors").to_pylist()
    counted, lost = Counter(), set()
    for row in errors:
        port = int(row["conn_id"].split(">")[0].rsplit(":", 1)[1])
        if row["error"] == "undecodable_bytes":
            counted[port] += row["byte_count"]
        lost |= {port} if row["error"] in DIRECTION_LOST else set()
    # bytes inside a compression layer are not counted one by one (test_hostile_decode.py)
    plain = {entry["port"] for entry in summary["connections"] if entry["codec"] == "plain"}
    for index, conn in enumerate(conns):
        if 40000 + index in plain - lost:
            assert counted[40000 + index] >= conn.undecodable(CLIENT) + conn.undecodable(SERVER), index
    assert sum(summary["errors"].values()) == sum(row["source"] != "nsqd" for row in errors)
