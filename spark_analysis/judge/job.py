"""The judging job: every nsqd's traffic through the catalogue's monitors, inside Spark tasks.

The decoding tasks left each V2 connection's observed rows in the exchange (judge/monitoring.py ``observed_rows``),
and each nsqlookupd connection's bytes (judge/lookupd.py ``V1Rows``). Spark shuffles them by server and sorts them by
time (spilling to disk, so a long capture's rows need not fit in memory); one task per server streams them through
its judging (``ServerJudging`` for an nsqd, ``LookupdJudging`` for an nsqlookupd), writes the violations it finds
into the ``violations`` table (item, side, connection, time, expected vs observed, the frames that show it) and hands
the driver their counts, and what the rules could not judge and why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from spark_analysis.derive import lifecycle
from spark_analysis.derive.connection_tables import TableWriter, prepare_directories
from spark_analysis.judge.lookupd import LOOKUPD, LOOKUPD_HTTP, LOOKUPD_SCHEMA, LookupdJudging, lookupd_exchanges
from spark_analysis.judge.monitoring import (
    HTTP,
    NAMES,
    NAMES_SCHEMA,
    NS,
    OBSERVED,
    OBSERVED_SCHEMA,
    VIOLATIONS,
    VIOLATIONS_SCHEMA,
    Opening,
    ServerJudging,
    http_actions,
    http_actions_of,
)
from spark_analysis.memory import without_cycle_collection
from spark_analysis.read.parquet_source import read_table
from spark_analysis.read.storage import LOCAL, Storage, join

# what a judging task tells the driver: per nsqd, violations counted by item and side, rules not judged by item and why
COUNTS_SCHEMA = pa.schema([("server", pa.string()), ("what", pa.string()), ("item", pa.string()),
                           ("detail", pa.string()), ("count", pa.int64())])


@dataclass
class Judged:
    """The judging's counts: ``violations`` item -> side -> count, ``not_judged`` item -> why -> count; and the
    monitors that failed on the traffic (``failures``: a bug of theirs, each then not judging its items)."""

    violations: dict[str, dict[str, int]] = field(default_factory=dict)
    not_judged: dict[str, dict[str, int]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def add(self, rows: list) -> Judged:
        for row in rows:
            if row["what"] == "failure":
                self.failures.append(f"{row['server']}: {row['detail']}")
                continue
            counted = self.violations if row["what"] == "violation" else self.not_judged
            by_detail = counted.setdefault(row["item"], {})
            by_detail[row["detail"]] = by_detail.get(row["detail"], 0) + row["count"]
        return self


def judge_traffic(spark: SparkSession, exchange_dir: str, tables_dir: str, by_server: dict[str, list[Opening]],
                  http_read: bool, storage: Storage = LOCAL, lookupds: frozenset[str] = frozenset(),
                  lookupd_http_read: bool = False, nsqd_clients: bool = True) -> Judged:
    """Judges every nsqd of ``by_server`` (judge/monitoring.py ``openings``) over the observed rows in
    ``exchange_dir``, and the HTTP requests there where the capture's HTTP traffic was read (``http_read``), and
    every nsqlookupd of ``lookupds`` (their "host port") over its connections' rows, and the exchanges with its
    host's HTTP API where the capture's were read (``lookupd_http_read``); writes ``tables_dir/violations``.
    ``nsqd_clients``: the lookupds' V1 clients are nsqds, judged by nsqd's rules of registering, against the
    changes of topics and channels the nsqds' judging found (the ``names`` table it leaves in the exchange)."""
    prepare_directories(tables_dir, {VIOLATIONS: VIOLATIONS_SCHEMA}, storage)
    prepare_directories(exchange_dir, {NAMES: NAMES_SCHEMA}, storage)
    judged = Judged()
    if by_server:
        def nsqd_judgings() -> Callable[[str], ServerJudging]:
            http = http_actions(lifecycle.exchanged(exchange_dir, HTTP, storage=storage)) if http_read else None
            hosts = [name.split(" ")[0] for name in by_server]
            return lambda name: ServerJudging(by_server.get(name, ()), http_actions_of(name, hosts, http))

        # before the lookupds' job: its judges take the changes this one writes
        judged.add(_judged(spark, exchange_dir, tables_dir, OBSERVED, OBSERVED_SCHEMA, len(by_server), nsqd_judgings,
                           storage))
    if lookupds:
        def lookupd_judgings() -> Callable[[str], LookupdJudging]:
            http = lookupd_exchanges(lifecycle.exchanged(exchange_dir, LOOKUPD_HTTP, storage=storage)) \
                if lookupd_http_read else None
            hosts = [name.split(" ")[0] for name in lookupds]
            changes = lifecycle.exchanged(exchange_dir, NAMES, storage=storage).to_pylist() if nsqd_clients else []

            def judging(name: str) -> LookupdJudging:
                made = LookupdJudging(http_actions_of(name, hosts, http), nsqd_clients=nsqd_clients)
                made.add_changes(changes)
                return made

            return judging

        judged.add(_judged(spark, exchange_dir, tables_dir, LOOKUPD, LOOKUPD_SCHEMA, len(lookupds), lookupd_judgings,
                           storage))
    return judged


def _judged(spark: SparkSession, exchange_dir: str, tables_dir: str, table: str, schema: pa.Schema, servers: int,
            judgings: Callable[[], Callable[[str], ServerJudging | LookupdJudging]], storage: Storage) -> list[dict]:
    """One job: ``table``'s rows of the exchange shuffled by server, each server's through the judging that
    ``judgings()`` (called in the task: it may read what the task needs) makes for it."""

    def judge_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        part = f"{table}-{TaskContext.get().partitionId():05d}"
        new_judging = judgings()
        counts: list[dict] = []
        judging = None
        server = None
        # a judge holds up to MESSAGES_KEPT messages, none in a reference cycle: the cycle collector's passes over
        # them would grow with the capture (spark_analysis/memory.py)
        with TableWriter(tables_dir, part, {VIOLATIONS: VIOLATIONS_SCHEMA}, storage) as writer, \
                TableWriter(exchange_dir, part, {NAMES: NAMES_SCHEMA}, storage) as told, \
                without_cycle_collection():
            for batch in batches:
                if not batch.num_rows:
                    continue
                names = batch.column("server")
                # rows are sorted by server first: each server's stretch of the batch goes to its judging
                starts = [0, *(np.flatnonzero(pc.not_equal(names[1:], names[:-1]).to_numpy(zero_copy_only=False))
                               + 1).tolist(), batch.num_rows]
                for start, end in zip(starts, starts[1:], strict=False):
                    name = names[start].as_py()
                    if name != server:
                        if judging is not None:
                            counts += _finished(server, judging, writer, told)
                        server, judging = name, new_judging(name)
                    judging.feed(batch.slice(start, end - start))
            if judging is not None:
                counts += _finished(server, judging, writer, told)
        yield pa.RecordBatch.from_pylist(counts, schema=COUNTS_SCHEMA)

    rows = read_table(spark, join(exchange_dir, table), schema, storage)
    return [row.asDict() for row in (rows.repartition(servers, "server")
                                     .sortWithinPartitions("server", "ts_ns", "conn_id", "seq")
                                     .mapInArrow(judge_partition, from_arrow_schema(COUNTS_SCHEMA))
                                     .collect())]


def _finished(server: str, judging: ServerJudging | LookupdJudging, writer: TableWriter, told: TableWriter
              ) -> list[dict]:
    judging.finish()
    if isinstance(judging, ServerJudging):
        told.add(NAMES, judging.new_changes(server))
    return written_counts(server, judging, writer)


def written_counts(server: str, judging: ServerJudging | LookupdJudging, writer: TableWriter) -> list[dict]:
    """The violations found since the last call written into ``writer``; the counts of all found so far, and of
    what was not judged."""
    writer.add(VIOLATIONS, pa.Table.from_pylist([
        {"server": server, "conn_id": v.connection, "ts_ns": round(v.ts * NS), "item": v.item, "side": v.side,
         "expected": v.expected, "observed": v.observed, "evidence": list(v.evidence)}
        for v in judging.new_violations()], schema=VIOLATIONS_SCHEMA))
    judge = judging.judge
    counts: dict[tuple, int] = {}
    for v in judge.violations:
        counts["violation", v.item, v.side] = counts.get(("violation", v.item, v.side), 0) + 1
    for (item, why), count in judge.not_judged.items():
        counts["not_judged", item, why] = count
    for failure in judge.failures:
        counts["failure", "", failure] = 1
    return [{"server": server, "what": what, "item": item, "detail": detail, "count": count}
            for (what, item, detail), count in counts.items()]
