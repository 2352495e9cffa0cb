"""One judge: `nsq-trace analyze` runs the catalogue's monitors inside its Spark tasks (spark_analysis/judge/job.py)
and finds what the same monitors find over the capture without Spark (judge_capture), violation for violation; a
broker bug written into a real pcap is named in the violations table with the frames that show it; the brokers'
HTTP API is read where its port is named."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_monitoring import Exchange
from trace_helpers import PCAPS

from spark_analysis.analysis import run_analysis
from spark_analysis.judge.monitoring import judge_capture

PORT = 24150  # the recordings' nsqd; its HTTP API one above


def found_by_spark(out) -> list[tuple]:
    table = pq.read_table(out / "tables" / "violations")
    return sorted(zip(*(table[name].to_pylist() for name in ("item", "side", "conn_id", "ts_ns")), strict=True))


def found_in_process(path, http_ports) -> tuple[list[tuple], dict[str, dict[str, int]]]:
    """The violations, and what was not judged (item -> why -> count), as the summary has it."""
    judges = judge_capture(path, frozenset({PORT}), frozenset(http_ports)).values()
    not_judged: dict[str, dict[str, int]] = {}
    for judge in judges:
        for (item, why), count in judge.not_judged.items():
            not_judged.setdefault(item, {}).setdefault(why, 0)
            not_judged[item][why] += count
    return sorted((v.item, v.side, v.connection, round(v.ts * 1e9)) for judge in judges for v in judge.violations), \
        not_judged


@pytest.mark.parametrize(("capture", "http_ports"), [("workload-small", ()), ("transcripts", (PORT + 1,))])
def test_analyze_finds_what_the_monitors_find_without_spark(spark, tmp_path, capture, http_ports):
    summary = run_analysis(spark, [str(PCAPS / f"{capture}.pcap")], str(tmp_path), frozenset({PORT}), report=False,
                           http_ports=frozenset(http_ports))
    in_process, not_judged = found_in_process(PCAPS / f"{capture}.pcap", http_ports)
    assert found_by_spark(tmp_path) == in_process
    assert summary["not_judged"] == not_judged and not_judged  # the judging tasks' shares counted once each
    assert all(side == "client" for _, side, _, _ in in_process)  # the real nsqd breaks no rule
    counted = {}
    for item, side, _, _ in in_process:
        counted.setdefault(item, {}).setdefault(side, 0)
        counted[item][side] += 1
    assert summary["violations"] == counted


def test_a_planted_broker_bug_is_named_with_its_frames(spark, tmp_path):
    """Attempts stuck at 1 on a redelivery (C-12), and the broker's HTTP API in the capture, read."""
    exchange = Exchange(tmp_path / "a.pcap").subscribed().message(10, 1).heartbeats(3000).message(1600, 1)
    exchange.http(20, b"POST /pub?topic=other HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx").end(3000)
    summary = run_analysis(spark, [str(tmp_path / "a.pcap")], str(tmp_path / "out"), report=False,
                           http_ports=frozenset({4151}))
    assert summary["violations"] == {"C-12": {"broker": 1}}
    [row] = pq.read_table(tmp_path / "out" / "tables" / "violations").to_pylist()
    assert row["conn_id"].endswith(":4150#0")  # the consumer's connection, not the HTTP one
    [redelivery] = row["evidence"]
    assert redelivery.startswith("< message ") and "attempts=1" in redelivery and row["side"] == "broker"
    # the HTTP API read: the rules about every publish judged (the /pub went to a topic nobody consumes)
    assert "some publishes to this nsqd may not be in the traffic" not in summary["not_judged"].get("C-09", {})


def test_watch_takes_each_row_once_across_batches():
    """An open row judged in one batch comes again, final, in the next: known by its connection and time, also
    where several rows share a time (one segment's frames)."""
    from spark_analysis.watch.judging import Fed

    def rows(*times, conn="A"):
        return pa.table({"conn_id": [conn] * len(times), "ts_ns": list(times), "n": list(range(len(times)))})

    fed = Fed()
    assert fed.new(rows(1, 2, 2, 2))["ts_ns"].to_pylist() == [1, 2, 2, 2]
    again = pa.concat_tables([rows(2, 2, 2, 2, 3), rows(1, conn="B")])  # the three at 2 again, a fourth, new ones
    taken = fed.new(again)
    assert list(zip(taken["conn_id"].to_pylist(), taken["ts_ns"].to_pylist(), strict=True)) == [
        ("A", 2), ("A", 3), ("B", 1)]
    assert fed.new(rows(3)).num_rows == 0


class RowByRow:
    """What ``Fed`` does, one row at a time: the oracle its column-wise ``new`` is held to."""

    def __init__(self):
        self.last: dict[str, list[int]] = {}

    def new(self, rows: list[tuple[str, int]]) -> list[bool]:
        before = {conn_id: tuple(last) for conn_id, last in self.last.items()}
        again: dict[str, int] = {}
        taken = []
        for conn_id, ts_ns in rows:
            taken_until, taken_there = before.get(conn_id, (-1, 0))
            if ts_ns < taken_until or (ts_ns == taken_until and again.get(conn_id, 0) < taken_there):
                again[conn_id] = again.get(conn_id, 0) + (ts_ns == taken_until)
                taken.append(False)
                continue
            last = self.last.get(conn_id)
            if last is not None and last[0] == ts_ns:
                last[1] += 1
            else:
                self.last[conn_id] = [ts_ns, 1]
            taken.append(True)
        return taken


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.tuples(st.sampled_from("ABC"), st.integers(0, 8)), max_size=30), max_size=6))
def test_watch_takes_each_row_once_as_row_by_row(batches):
    """Batch after batch, each connection's rows in time order (the rows of a batch overlap the last ones of the
    batch before, as open rows come again final), Fed keeps what the row-by-row reading keeps."""
    from spark_analysis.watch.judging import Fed

    fed, oracle = Fed(), RowByRow()
    for batch in batches:
        rows = sorted(batch, key=lambda row: row[1])
        table = pa.table({"conn_id": pa.array([conn for conn, _ in rows], pa.string()),
                          "ts_ns": pa.array([ts for _, ts in rows], pa.int64()), "n": list(range(len(rows)))})
        kept = oracle.new(rows)
        assert fed.new(table)["n"].to_pylist() == [n for n, taken in enumerate(kept) if taken]
        assert fed.last == oracle.last


def test_analyze_judges_the_command_lines_shape_and_body_sizes(spark, tmp_path):
    """C-14, C-17, P-AUTH-02, P-AUTH-03, P-MPUB-04 through analyze's decoder and rows: the line's CRLF and
    parameters, AUTH's body size, MPUB's size word; a broker that breaks each is named as without Spark."""
    from test_monitoring import LINE_SHAPES, shaped_capture

    shaped_capture(tmp_path / "a.pcap", {item: broken for item, (_, _, broken) in LINE_SHAPES.items()})
    summary = run_analysis(spark, [str(tmp_path / "a.pcap")], str(tmp_path / "out"), report=False)
    assert summary["violations"] == {item: {"broker": 1} for item in LINE_SHAPES}
    assert found_by_spark(tmp_path / "out") == sorted(
        (v.item, v.side, v.connection, round(v.ts * 1e9))
        for judge in judge_capture(tmp_path / "a.pcap", frozenset({4150})).values() for v in judge.violations)
    assert not set(LINE_SHAPES) & set(summary["not_judged"])
