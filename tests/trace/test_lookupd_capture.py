"""nsqlookupd's monitors over captures (spark_analysis/judge/lookupd.py): the real nsqlookupd's traffic in
pcaps/cluster.pcap (nsqd v1.3.0 registering with it, from the magic on) breaks no rule, nor does the nsqd, and a
lookupd bug written into a capture is named by its item."""

from __future__ import annotations

import pyarrow.parquet as pq

from nsq_protocol import wire_v1
from spark_analysis.generate.capture import EPOCH_NS, MS, Capture, Connection
from spark_analysis.judge.lookupd import judge_lookupd_capture
from tests.trace.trace_helpers import PCAPS

LOOKUPD_TCP, LOOKUPD_HTTP = 24160, 24161  # tests/trace/cluster_recording.py
LOOKUPD_ADDRESS = "127.0.0.1"  # spark_analysis/generate/capture.py's both ends
IDENTIFY = b'{"broadcast_address":"127.0.0.1","hostname":"h","tcp_port":4150,"http_port":4151,"version":"1.3.0"}'
ANSWER = b'{"broadcast_address":"lk","hostname":"lk","http_port":24161,"tcp_port":24160,"version":"1.3.0"}'


def test_the_real_nsqlookupd_breaks_no_rule_in_the_cluster_capture():
    judges = judge_lookupd_capture(PCAPS / "cluster.pcap", frozenset({LOOKUPD_TCP}), frozenset({LOOKUPD_HTTP}),
                                   whole=True, nsqd_clients=True)  # nsqd's registering too
    assert [judge.violations for judge in judges.values()] == [[]]
    (judge,) = judges.values()
    (connection,) = judge.connections.values()
    # IDENTIFY, a REGISTER of the topic and of each of its two channels, the ephemeral's UNREGISTER, a PING
    assert connection.identified and connection.replies == 6 and not judge.failures


def lookupd_capture(path, reply: bytes) -> None:
    capture = Capture(str(path), "pcap")
    conn = Connection(capture, "A", 40000, 1000)
    conn.ports = {"c2s": (40000, LOOKUPD_TCP), "s2c": (LOOKUPD_TCP, 40000)}
    conn.open(EPOCH_NS)
    conn.send("c2s", EPOCH_NS + MS, wire_v1.MAGIC_V1 + wire_v1.encode_command("IDENTIFY", body=IDENTIFY))
    conn.send("s2c", EPOCH_NS + 2 * MS, wire_v1.encode_reply(ANSWER))
    conn.send("c2s", EPOCH_NS + 3 * MS, wire_v1.encode_command("REGISTER", "bad!"))
    conn.send("s2c", EPOCH_NS + 4 * MS, wire_v1.encode_reply(reply))
    conn.close(EPOCH_NS + 5 * MS)
    capture.close()


def test_a_bad_name_registered_is_named_l_tcp_11(tmp_path):
    lookupd_capture(tmp_path / "bad.pcap", b"OK")
    judges = judge_lookupd_capture(tmp_path / "bad.pcap", frozenset({LOOKUPD_TCP}))
    assert {(v.item, v.side) for judge in judges.values() for v in judge.violations} == {("L-TCP-11", "broker")}
    lookupd_capture(tmp_path / "good.pcap", b"E_BAD_TOPIC REGISTER topic name 'bad!' is not valid")
    judges = judge_lookupd_capture(tmp_path / "good.pcap", frozenset({LOOKUPD_TCP}))
    assert [judge.violations for judge in judges.values()] == [[]]


def test_analyze_judges_nsqlookupd_as_the_monitors_do_without_spark(spark, tmp_path):
    """The same monitors inside analyze's Spark tasks: the real nsqlookupd of cluster.pcap breaks no rule; a lookupd
    that registers a bad name is named in the violations table, under its own server."""
    from spark_analysis.analysis import run_analysis

    summary = run_analysis(spark, [str(PCAPS / "cluster.pcap")], str(tmp_path / "cluster"), report=False)
    assert not any(side == "broker" for sides in summary["violations"].values() for side in sides)
    lookupd_capture(tmp_path / "bad.pcap", b"OK")
    summary = run_analysis(spark, [str(tmp_path / "bad.pcap")], str(tmp_path / "out"), report=False)
    assert summary["violations"] == {"L-TCP-11": {"broker": 1}}
    [row] = pq.read_table(tmp_path / "out" / "tables" / "violations").to_pylist()
    [judge] = judge_lookupd_capture(tmp_path / "bad.pcap", frozenset({LOOKUPD_TCP})).values()
    [violation] = judge.violations
    assert (row["server"], row["conn_id"], row["item"], row["ts_ns"]) == (
        f"{LOOKUPD_ADDRESS} {LOOKUPD_TCP}", violation.connection, "L-TCP-11", round(violation.ts * 1e9))
