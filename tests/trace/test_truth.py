"""Done-when #1: on the recorded pcaps, every count of summary.json equals the recorded truth."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pyarrow.parquet as pq
import pytest
from trace_helpers import PCAPS, load_truth, truth_mismatches

from nsq_protocol.tls_records import RECORD_NAMES
from spark_analysis.derive.quantiles import RELATIVE_ACCURACY, SMALLEST

PER_CONNECTION_KEYS = (
    "heartbeats",
    "nops",
    "deliveries",
    "fin",
    "req",
    "touch",
    "fin_failed",
    "publish_commands",
    "messages_published",
    "cls",
)


@pytest.mark.parametrize("name", ["workload-small", "compressed"])
def test_summary_counts_equal_the_truth(analyse, name):
    summary = analyse(name, [PCAPS / f"{name}.pcap"])
    assert truth_mismatches(summary, load_truth(name)) == []


@pytest.mark.parametrize("name", ["workload-small", "compressed"])
def test_per_connection_counts_equal_the_truth(analyse, name):
    summary = analyse(name, [PCAPS / f"{name}.pcap"])
    ours = {c["port"]: c for c in summary["connections"]}
    truth = load_truth(name)["connections"]
    assert sorted(ours) == sorted(c["port"] for c in truth)
    for expected in truth:
        got = ours[expected["port"]]
        assert {k: got[k] for k in PER_CONNECTION_KEYS} == {k: expected[k] for k in PER_CONNECTION_KEYS}, expected[
            "name"
        ]


def test_compressed_streams_are_named_by_codec(analyse):
    summary = analyse("compressed", [PCAPS / "compressed.pcap"])
    codecs = {c["port"]: c["codec"] for c in summary["connections"]}
    roles = {c["port"]: c["role"] for c in load_truth("compressed")["connections"]}
    assert {roles[port]: codec for port, codec in codecs.items()} == {
        "consumer+publisher (snappy)": "snappy",
        "consumer+publisher (deflate level 6)": "deflate",
        "producer (uncompressed)": "plain",
    }


def test_summary_and_tables_are_written(analyse):
    summary = analyse("workload-small", [PCAPS / "workload-small.pcap"])
    out = summary["out_dir"]
    with open(os.path.join(out, "summary.json")) as handle:
        assert json.load(handle)["totals"] == summary["totals"]
    for table in (
        "connections",
        "commands",
        "frames",
        "messages",
        "deliveries",
        "errors",
        "heartbeats",
        "flow_control",
        "violations",
        "publishes",
        "events",
    ):
        assert any(f.endswith(".parquet") for f in os.listdir(os.path.join(out, "tables", table))), table


def test_messages_table_has_one_row_per_message_and_channel(spark, analyse):
    summary = analyse("workload-small", [PCAPS / "workload-small.pcap"])
    messages = spark.read.parquet(os.path.join(summary["out_dir"], "tables", "messages"))
    per_channel = {(r.topic, r.channel): r["count"] for r in messages.groupBy("topic", "channel").count().collect()}
    truth = load_truth("workload-small")["topics"]
    assert per_channel == {
        (t, c): v["unique_messages_delivered"] for t in truth for c, v in truth[t]["channels"].items()
    }
    # every delivered message was published by a captured PUB/MPUB/DPUB with the same body
    assert messages.where("publish_command IS NULL").count() == 0
    assert messages.where("publish_to_first_delivery_ms < 0").count() == 0


def test_deliberate_unknown_id_fins_are_named_violations(analyse):
    summary = analyse("workload-small", [PCAPS / "workload-small.pcap"])
    # each consumer FINs a made-up ID after its 100th and 1000th delivery (P-FIN-04)
    assert summary["violations"] == {"P-FIN-04": {"client": load_truth("workload-small")["totals"]["e_fin_failed"]}}
    assert summary["errors"] == {}


def test_latency_quantiles_are_those_of_the_messages_table(analyse):
    """summary.json's latencies come from the lifecycle tasks' histograms (derive/quantiles.py), not from the table:
    each is within the histograms' accuracy of the quantile of the messages table's column, the maximum exact."""
    summary = analyse("workload-small", [PCAPS / "workload-small.pcap"])
    messages = pq.read_table(os.path.join(summary["out_dir"], "tables", "messages"))
    for name, column in (("publish_to_deliver", "publish_to_first_delivery_ms"),
                         ("deliver_to_fin", "last_delivery_to_fin_ms")):
        values = np.sort(messages[column].drop_null().to_numpy())
        assert len(values) > 1000, column
        got = summary["latency_ms"][name]
        assert got["max"] == values[-1]
        for key, fraction in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
            expected = values[math.ceil(fraction * len(values)) - 1]
            assert abs(got[key] - expected) <= RELATIVE_ACCURACY * abs(expected) + 2 * SMALLEST, (name, key)


# Where each single-meaning column of the events table may hold a value: (kind, names or None for any)
ONE_MEANING = {
    "rdy": ("command", {"RDY"}),
    "delay_ms": (None, {"REQ", "DPUB"}),  # REQ's timeout; DPUB's defer, on its command and its publish rows
    "message_count": ("command", {"MPUB"}),
    "byte_count": (None, {"gap", "undecodable_bytes"}),
    "heartbeat_interval_ns": ("frame", {"heartbeat"}),
    "in_flight": ("inflight", {"in_flight"}),
    "text": ("frame", {"response", "error"}),
    "explanation": (None, None),  # errors: checked by kind below
    "identify": ("command", {"IDENTIFY"}),
    "producer": ("command", {"REGISTER", "UNREGISTER"}),
    "tls_record": ("tls", RECORD_NAMES),
}


@pytest.mark.parametrize("name", ["workload-small", "cluster"])
def test_each_event_column_has_one_meaning(analyse, name):
    """A value in ``rdy``, ``delay_ms``, ``text``, ... only on the rows it is named for; and each is there."""
    summary = analyse(name, [PCAPS / f"{name}.pcap"])
    events = pq.read_table(os.path.join(summary["out_dir"], "tables", "events")).to_pandas()
    seen = set()
    for column, (kind, names) in ONE_MEANING.items():
        held = events[events[column].notna()]
        if column == "explanation":
            assert set(held["kind"]) <= {"error"}, column
        else:
            assert kind is None or set(held["kind"]) <= {kind}, column
            assert set(held["name"]) <= names, (column, set(held["name"]))
        if len(held):
            seen.add(column)
    expected = {"rdy", "message_count", "heartbeat_interval_ns", "in_flight", "text", "identify", "delay_ms"} \
        if name == "workload-small" else {"rdy", "text", "identify", "producer", "tls_record"}
    assert expected <= seen, expected - seen
    assert events["status"].dropna().isin(["ok", "failed", "error", "unanswered", "upgrade"]).all()
    assert events.loc[events["kind"] == "connection", "status"].isna().all()


def test_identify_and_its_answer_are_typed_structs(analyse):
    """The connection row holds the client's first IDENTIFY and nsqd's answer with their fields typed."""
    summary = analyse("compressed", [PCAPS / "compressed.pcap"])
    rows = pq.read_table(os.path.join(summary["out_dir"], "tables", "connections")).to_pylist()
    by_codec = {row["codec"]: row for row in rows}
    snappy = by_codec["snappy"]
    assert snappy["identify_request"]["snappy"] is True and snappy["identify_response"]["snappy"] is True
    assert by_codec["deflate"]["identify_request"]["deflate_level"] == 6
    assert isinstance(snappy["identify_request"]["heartbeat_interval"], int)
    assert json.loads(snappy["identify_request"]["body"])["snappy"] is True
    assert {row["close"] for row in rows} <= {"rst", "client_fin", "server_fin", "open"}
    assert all(row["packets"] > 0 for row in rows)
