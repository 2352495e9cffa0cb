"""The judging job: every nsqd's traffic through the catalogue's monitors, inside Spark tasks.

The decoding tasks left each V2 connection's observed rows in the exchange (judge/monitoring.py ``observed_rows``),
and each nsqlookupd connection's bytes (judge/lookupd.py ``V1Rows``), each server's into its own directory. A task
per server sorts them by time with Arrow (spilling to local disk, so a long capture's rows need not fit in memory:
judge/ordering.py) and streams them through its judging (``ServerJudging`` for an nsqd, ``LookupdJudging`` for an
nsqlookupd), writes the violations it finds into the ``violations`` table (item, side, connection, time, expected vs
observed, the frames that show it) and hands the driver their counts, and what the rules could not judge and why.
Where there are fewer nsqds than cores, each nsqd's monitors are spread over several tasks (``monitor_shares``),
each judging the same rows with its share of them: one nsqd's rows are one ordered stream, and its judge's work,
mostly the monitors', would otherwise keep one core busy while the others idle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from spark_analysis.derive import lifecycle
from spark_analysis.derive.connection_tables import TableWriter, prepare_directories
from spark_analysis.judge.lookupd import LOOKUPD, LOOKUPD_HTTP, LookupdJudging, lookupd_exchanges
from spark_analysis.judge.monitoring import (
    HTTP,
    NAMES,
    NAMES_SCHEMA,
    NS,
    OBSERVED,
    VIOLATIONS,
    VIOLATIONS_SCHEMA,
    Opening,
    ServerJudging,
    http_actions,
    http_actions_of,
)
from spark_analysis.judge.ordering import in_judging_order
from spark_analysis.judge.progress import task_progress
from spark_analysis.memory import without_cycle_collection
from spark_analysis.read.storage import LOCAL, Storage

MAX_SHARES = 4
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
        shares = monitor_shares(spark.sparkContext.defaultParallelism, len(by_server))

        def nsqd_judgings() -> Callable[[str, int], ServerJudging]:
            http = http_actions(lifecycle.exchanged(exchange_dir, HTTP, storage=storage)) if http_read else None
            hosts = [name.split(" ")[0] for name in by_server]
            return lambda name, share: ServerJudging(by_server.get(name, ()), http_actions_of(name, hosts, http),
                                                     share=(share, shares))

        # before the lookupds' job: its judges take the changes this one writes
        judged.add(_judged(spark, exchange_dir, tables_dir, OBSERVED, sorted(by_server), shares, nsqd_judgings,
                           storage))
    if lookupds:
        def lookupd_judgings() -> Callable[[str, int], LookupdJudging]:
            http = lookupd_exchanges(lifecycle.exchanged(exchange_dir, LOOKUPD_HTTP, storage=storage)) \
                if lookupd_http_read else None
            hosts = [name.split(" ")[0] for name in lookupds]
            changes = lifecycle.exchanged(exchange_dir, NAMES, storage=storage).to_pylist() if nsqd_clients else []

            def judging(name: str, _share: int) -> LookupdJudging:  # nsqlookupd's few monitors: one share
                made = LookupdJudging(http_actions_of(name, hosts, http), nsqd_clients=nsqd_clients)
                made.add_changes(changes)
                return made

            return judging

        judged.add(_judged(spark, exchange_dir, tables_dir, LOOKUPD, sorted(lookupds), 1, lookupd_judgings, storage))
    return judged


def monitor_shares(cores: int, servers: int) -> int:
    """In how many shares each nsqd's monitors are judged, each share a task: as many as leave no core idle, up to
    ``MAX_SHARES`` (each share repeats the judge's own work: the connections, the messages in flight)."""
    return max(1, min(MAX_SHARES, cores // servers))


def _judged(spark: SparkSession, exchange_dir: str, tables_dir: str, table: str, servers: list[str], shares: int,
            judgings: Callable[[], Callable[[str, int], ServerJudging | LookupdJudging]], storage: Storage
            ) -> list[dict]:
    """One job, a task per server of ``servers`` and share of its monitors (``shares`` of them): the server's rows of
    ``table``, which the decoding tasks wrote into its own directory of the exchange, in the judge's order
    (judge/ordering.py), through the judging that ``judgings()`` (called in the task: it may read what the task
    needs) makes for it and the share. A server without rows is not judged."""

    def judge_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        part = f"{table}-{TaskContext.get().partitionId():05d}"
        new_judging = judgings()
        counts: list[dict] = []
        # a judge holds up to MESSAGES_KEPT messages, none in a reference cycle: the cycle collector's passes over
        # them would grow with the capture (spark_analysis/memory.py)
        with TableWriter(tables_dir, part, {VIOLATIONS: VIOLATIONS_SCHEMA}, storage) as writer, \
                TableWriter(exchange_dir, part, {NAMES: NAMES_SCHEMA}, storage) as told, \
                without_cycle_collection():
            for batch in batches:
                for index in batch.column("id").to_pylist():
                    server = servers[index // shares]
                    counts += _judge_server(server, new_judging, index % shares, exchange_dir, table, storage,
                                            writer, told)
        yield pa.RecordBatch.from_pylist(counts, schema=COUNTS_SCHEMA)

    tasks = len(servers) * shares
    return [row.asDict() for row in spark.range(tasks, numPartitions=max(1, tasks))
            .mapInArrow(judge_partition, from_arrow_schema(COUNTS_SCHEMA)).collect()]


def _judge_server(server: str, new_judging: Callable[[str, int], ServerJudging | LookupdJudging], share: int,
                  exchange_dir: str, table: str, storage: Storage, writer: TableWriter, told: TableWriter
                  ) -> list[dict]:
    """``server``'s share ``share`` judged (a server without rows is not); its counts. The judge is freed on
    return, by reference counting, while the cycle collector is still off: alive when it comes on, its millions of
    objects would be walked by the collector's first pass."""
    files = lifecycle.server_files(exchange_dir, table, server, storage)
    progress = task_progress(exchange_dir, f"{lifecycle.server_table(table, server)}-{share}", server, files, storage)
    judging = None
    for rows in in_judging_order(lifecycle.server_rows(files, storage)):
        if judging is None:
            judging = new_judging(server, share)
        judging.feed(rows)
        progress.add(rows.num_rows)
    if judging is None:
        return []
    progress.write()
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
