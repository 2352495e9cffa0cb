"""``nsq-trace watch``: capture files analysed as they appear, with Spark Structured Streaming.

    capture files in a directory (tcpdump -G rotation: names that sort in the order they were written)
      -> the ``nsqcapturefiles`` streaming source: its offset is the last file name taken, so Spark's checkpoint
         (offsets logged before a micro-batch runs, committed after) hands each file to exactly one micro-batch,
         and a micro-batch replayed after a stop gets the same files again
      -> foreachBatch: the batch's files and their bytes written down under its id (``watch/batches/<id>.json``), its
         new files decoded with the connections carried from the batch before (watch/increments.py), its rows judged
         (watch/judging.py) and beside that the lifecycles of its new deliveries ordered with the messages still open
         (watch/lifecycle_increments.py), the batch's final parts added to the tallies of the final parts before it
         and its open parts to a copy (derive/tallies.py: the connections table, the summary's counts, the violations
         by minute), per-minute metrics from the lifecycles' totals and the violations' tally, the batch's state
         committed, and ``summary.json``, ``minutes.json``, a self-refreshing ``report.html`` and, last,
         ``latest.json`` replaced

Whatever moment the watcher stops at, the published results are those of the batch analysis of a prefix of the
files, none read twice.
"""

from __future__ import annotations

import functools
import json
import signal
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxBytes

from spark_analysis.analysis import derive, side_by_side
from spark_analysis.derive.connection_tables import TableWriter
from spark_analysis.derive.lifecycle import MINUTE_COUNTS, NS_PER_MINUTE, Totals
from spark_analysis.derive.quantiles import EMPTY
from spark_analysis.derive.tallies import SUMMARY_TALLIES, Tallies, Tally
from spark_analysis.judge.monitoring import VIOLATIONS
from spark_analysis.read.storage import LOCAL, Storage, join
from spark_analysis.report.summary import message_events, violations_line
from spark_analysis.watch.increments import OPEN, WATCH_BUCKETS, Increments, batch_of, part_prefix
from spark_analysis.watch.judging import judge_batch
from spark_analysis.watch.lifecycle_increments import LifecycleIncrements

NO_FILE_YET = ""
# A micro-batch takes files up to this many bytes (at least one file): its decoding workers' memory grows with it
# (~530 MB each at 5 of the bench's 29 MB files, ~690 MB at 13), and a watcher behind, or started on a backlog,
# would otherwise take every file at once.
BATCH_BYTES = 192 << 20
REFRESH_SECONDS = 10
MINUTES_SCHEMA = pa.schema([
    ("minute", pa.timestamp("us", tz="UTC")),
    ("published", pa.int64()),
    ("delivered", pa.int64()),
    ("redelivered", pa.int64()),
    ("timeouts", pa.int64()),
    # publish -> first delivery of the messages first delivered in the minute, within 0.1 % (derive/quantiles.py)
    ("latency_p50_ms", pa.float64()),
    ("latency_p99_ms", pa.float64()),
    ("violations", pa.map_(pa.string(), pa.int64())),  # the monitors': catalogue item -> count
])


@dataclass
class CaptureFile(InputPartition):
    path: str


class CaptureFilesDataSource(DataSource):
    """One row per capture file, ``path``; options: ``path`` (a directory or glob), ``settleSeconds`` (a file is
    taken once unchanged that long, and only with every file whose name sorts before it), ``maxBytesPerTrigger``
    (``BATCH_BYTES``), ``storage``."""

    @classmethod
    def name(cls) -> str:
        return "nsqcapturefiles"

    def schema(self) -> str:
        return "path STRING"

    def streamReader(self, schema) -> DataSourceStreamReader:
        return CaptureFilesReader(self.options)


class CaptureFilesReader(DataSourceStreamReader):
    def __init__(self, options):
        self.source = options["path"]
        self.settle_ns = int(float(options.get("settleSeconds", "2")) * 1e9)
        self.batch_bytes = int(options.get("maxBytesPerTrigger", str(BATCH_BYTES)))
        self.storage = Storage(json.loads(options.get("storage", "{}")))

    def initialOffset(self) -> dict:
        return {"last": NO_FILE_YET}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxBytes(self.batch_bytes)

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        """The last of the settled files, taken in name order, within ``limit``'s bytes: a file still being written
        holds back the ones after it, so that a name, once passed, never has a file behind it."""
        last = (start or self.initialOffset())["last"]
        settled_before = time.time_ns() - self.settle_ns
        budget = limit.max_bytes if isinstance(limit, ReadMaxBytes) else None
        taken = 0
        for path in self._files_after(last):
            info = self.storage.info(path)
            if info.mtime_ns > settled_before or (budget is not None and taken and taken + info.size > budget):
                break
            taken += info.size
            last = path
        return {"last": last}

    def partitions(self, start: dict, end: dict) -> list[CaptureFile]:
        return [CaptureFile(path) for path in self._files_after(start["last"]) if path <= end["last"]]

    def read(self, partition: CaptureFile):
        yield (partition.path,)

    def _files_after(self, last: str) -> list[str]:
        return sorted(path for path in self.storage.expand([self.source]) if path > last)


def _by_minute(violations: pa.Table) -> pa.Table:
    return pa.table({"minute": pc.divide(violations["ts_ns"], NS_PER_MINUTE), "item": violations["item"]})


# the summary's, and the monitors' violations counted by minute and item (added once the batch is judged)
WATCH_TALLIES = {**SUMMARY_TALLIES, VIOLATIONS: Tally("tables", VIOLATIONS, ("minute", "item"), _by_minute)}


def minutes(totals: Totals, violations: pa.Table) -> pa.Table:
    """Per-minute metrics (``MINUTES_SCHEMA``): the lifecycle tasks' per-minute totals (derive/lifecycle.py), and the
    ``violations`` tally (``WATCH_TALLIES``)."""
    found = defaultdict(dict)
    for row in violations.to_pylist():
        found[row["minute"]][row["item"]] = row["count"]
    rows = []
    for number in sorted(set(totals.minutes) | set(found)):
        counts = totals.minutes.get(number, {})
        p50, p99 = totals.minute_latencies.get(number, EMPTY).quantiles([0.5, 0.99]) or (None, None)
        rows.append({"minute": datetime.fromtimestamp(number * 60, UTC),
                     **{name: counts.get(name, 0) for name in MINUTE_COUNTS},
                     "latency_p50_ms": p50, "latency_p99_ms": p99, "violations": found.get(number, {})})
    return pa.Table.from_pylist(rows, schema=MINUTES_SCHEMA)


class Watcher:
    """The foreachBatch of ``watch``: each micro-batch's files recorded under its id and decoded with the connections
    carried from the batch before (watch/increments.py), its lifecycles with the messages carried
    (watch/lifecycle_increments.py), the tallies added up (derive/tallies.py), the batch's state committed and the
    results published."""

    def __init__(self, spark: SparkSession, out_dir: str, analysis_options: dict, storage: Storage = LOCAL,
                 step: Callable[[str], None] = lambda message: None):
        self.spark, self.out_dir, self.storage, self.step = spark, out_dir, storage, step
        self.report = analysis_options.get("report", True)
        self.nsqd_clients = analysis_options.get("nsqd_clients", True)
        self.increments = Increments(spark, out_dir, storage, **{
            name: value for name, value in analysis_options.items() if name not in ("report", "nsqd_clients")})
        foreign = self.increments.foreign_state()
        if foreign is not None:
            raise WatchError(f"{out_dir} holds the state of a watch (batch {foreign}) by another version of nsq-trace, "
                             "which cannot carry on from it: watch into a fresh --out")
        self.lifecycles = LifecycleIncrements(spark, self.increments.tables_dir, self.increments.exchange_dir,
                                              self.increments.state_dir, WATCH_BUCKETS, storage)
        self.batches_dir = join(out_dir, "watch", "batches")
        storage.make_directory(self.batches_dir)
        self.directories = {"tables": self.increments.tables_dir, "exchange": self.increments.exchange_dir}
        self.last_active = time.monotonic()
        self.so_far = _SoFar(None, [], 0, Tallies(WATCH_TALLIES))

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        new_files = sorted(row.path for row in batch.collect())
        self.last_active = time.monotonic()
        if not new_files:
            return
        started = time.monotonic()
        record = {"files": new_files, "bytes": sum(self.storage.size(path) for path in new_files)}
        # Spark replays a batch id with the same files: this file is rewritten, never added to.
        self.storage.write_text(join(self.batches_dir, f"{batch_id:010d}.json"), json.dumps(record))
        before = self._before(batch_id)
        files = sorted(before.files + new_files)
        self.step(f"batch {batch_id}: decoding {len(new_files)} new file(s) ({len(files)} so far)")
        carried = self.increments.decode(batch_id, new_files)
        decoded = time.monotonic()
        tables_dir = self.increments.tables_dir
        self.step(f"batch {batch_id}: deriving tables ({len(carried['flows'])} connection(s) carried on)")
        final, tallied = self._tallies(batch_id, before.tallies)
        self.step(f"batch {batch_id}: judging (the catalogue's monitors) and message lifecycles beside it")
        judged, lifecycles = side_by_side(self.spark, lambda: judge_batch(
            self.spark, batch_id, carried["previous"], carried["last_ts_ns"], final, tallied,
            self.increments.exchange_dir, tables_dir, self.increments.state_dir, bool(self.increments.http_ports),
            self.increments.ports, self.storage, bool(self.increments.lookupd_http_ports), self.nsqd_clients),
            lambda: self.lifecycles.tables(batch_id, carried, final))
        this_batch = part_prefix(batch_id)
        judged_part = functools.partial(Tallies.plus, name=VIOLATIONS, directories=self.directories,
                                        storage=self.storage, chosen=lambda name: name.startswith(this_batch))
        final, tallied = judged_part(final), judged_part(tallied)
        tables, totals, result = derive(self.spark, tables_dir, lifecycles, tallied, judged, self.storage,
                                        lambda message: self.step(f"batch {batch_id}: {message}"))
        derived = time.monotonic()
        self.increments.commit(batch_id, carried)
        self.so_far = _SoFar(batch_id, files, before.bytes + record["bytes"], final)
        result["input"] = {"files": files, "bytes": self.so_far.bytes,
                           "analysis_seconds": round(time.monotonic() - started, 3)}
        self.step(f"batch {batch_id}: per-minute metrics")
        per_minute = minutes(totals, tallied.tables["violations"])
        self.storage.reset_directory(join(tables_dir, "minutes"))
        with TableWriter(tables_dir, "part-00000", {"minutes": MINUTES_SCHEMA}, self.storage) as writer:
            writer.add("minutes", per_minute)
        self._publish(batch_id, files, tables, totals, result, per_minute, {
            "new_files": new_files, "message_events": message_events(result["totals"]),
            "carried_connections": len(carried["flows"]),
            "decode_seconds": round(decoded - started, 3), "derive_seconds": round(derived - decoded, 3),
            "seconds": round(time.monotonic() - started, 3)})
        self.last_active = time.monotonic()
        totals = result["totals"]
        self.step(f"batch {batch_id}: {totals['messages_published']:,} published, {totals['deliveries']:,} "
                  f"deliveries, {violations_line(result)} in {len(files)} file(s)")

    def _before(self, batch_id: int) -> _SoFar:
        """What the batches before ``batch_id`` add up to: carried from the batch before, or at a run's first batch
        read back from their records and final parts (a later id's record is one a stop left behind: it will be
        rewritten when its batch runs again)."""
        if self.so_far.batch_id == batch_id - 1:
            return self.so_far
        files, size = [], 0
        for path in self.storage.files(self.batches_dir, ".json"):
            if int(path.rsplit("/", 1)[-1].removesuffix(".json")) < batch_id:
                record = json.loads(self.storage.read_text(path))
                files, size = files + record["files"], size + record["bytes"]
        tallies = Tallies(WATCH_TALLIES).read(self.directories, self.storage, lambda name: not name.startswith(OPEN)
                                              and batch_of(name) is not None and batch_of(name) < batch_id)
        return _SoFar(batch_id - 1, sorted(files), size, tallies)

    def _tallies(self, batch_id: int, before: Tallies) -> tuple[Tallies, Tallies]:
        """The batch's final parts added to ``before``, the tallies of the batches before; and those with its open
        parts. Made before the lifecycles' job, whose tasks take the connections ended for good from them."""
        read = functools.partial(Tallies(WATCH_TALLIES).read, self.directories, self.storage)
        final = before + read(lambda name: name.startswith(part_prefix(batch_id)))
        return final, final + read(lambda name: name.startswith(OPEN + part_prefix(batch_id)))

    def _publish(self, batch_id: int, files: list[str], tables: Mapping[str, DataFrame], totals, result: dict,
                 per_minute: pa.Table, batch: dict):
        rows = per_minute.to_pylist()
        for row in rows:
            row["minute"] = row["minute"].isoformat()
            row["violations"] = dict(row["violations"] or [])
        self.storage.replace_text(join(self.out_dir, "summary.json"), json.dumps(result, indent=1))
        self.storage.replace_text(join(self.out_dir, "minutes.json"), json.dumps(rows, indent=1))
        if self.report:
            from spark_analysis.report import html

            html.write(tables, totals, result, self.out_dir, self.storage)
            page = join(self.out_dir, "report.html")
            self.storage.replace_text(page, live_page(self.storage.read_text(page), batch_id, per_minute))
        # latest.json last: the batch it names is whole once it is written
        self.storage.replace_text(join(self.out_dir, "latest.json"), json.dumps(
            {"batch_id": batch_id, "files": files, **batch}, indent=1))


@dataclass
class _SoFar:
    """What the batches through ``batch_id`` add up to: their files, the files' bytes, the tallies of their final
    parts. Carried from batch to batch, so that no batch reads every one before it again."""

    batch_id: int | None
    files: list[str]
    bytes: int
    tallies: Tallies


def live_page(page: str, batch_id: int, per_minute: pa.Table) -> str:
    """The snapshot's report, refreshing itself, with the per-minute metrics first."""
    from spark_analysis.report import html

    section = f"<h2>Per minute (batch {batch_id})</h2>{html.minutes_section(per_minute)}"
    refresh = f'<meta http-equiv="refresh" content="{REFRESH_SECONDS}">'
    page = page.replace("<head>", f"<head>{refresh}", 1)
    heading_end = page.find("<h2>")
    return page[:heading_end] + section + page[heading_end:] if heading_end >= 0 else page + section


class WatchError(RuntimeError):
    """The streaming query failed: its first line."""


def run_watch(spark: SparkSession, source: str, out_dir: str, analysis_options: dict, storage: Storage = LOCAL,
              settle_seconds: float = 2.0, trigger_seconds: float = 5.0, until_idle: float | None = None,
              step: Callable[[str], None] = lambda message: None) -> None:
    """Watch ``source`` until interrupted, or until no file has been taken for ``until_idle`` seconds."""
    from pyspark.errors import StreamingQueryException

    spark.dataSource.register(CaptureFilesDataSource)
    watcher = Watcher(spark, out_dir, analysis_options, storage, step)
    query = (
        spark.readStream.format("nsqcapturefiles")
        .option("path", source)
        .option("settleSeconds", str(settle_seconds))
        .option("storage", json.dumps(storage.options))
        .load()
        .writeStream.foreachBatch(watcher)
        .option("checkpointLocation", join(out_dir, "watch", "checkpoint"))
        .trigger(processingTime=f"{trigger_seconds} seconds")
        .start()
    )
    waiting_since = None
    stopping = _StopRequests()
    try:
        while not query.awaitTermination(0.5):
            if stopping.requests == 1 and query.status["isTriggerActive"]:
                # a micro-batch cut short is replayed whole by the next run: finishing it loses nothing
                stopping.announce(step, "finishing the micro-batch under way, then stopping (signal again: now)")
                continue
            if stopping:
                step("stopping: the same command resumes where this one stopped")
                break
            # idle only between triggers: starting up and replaying a batch a stop cut short are work
            waiting = query.status["message"].startswith("Waiting") and not query.status["isTriggerActive"]
            waiting_since = (waiting_since or time.monotonic()) if waiting else None
            if until_idle is not None and waiting_since is not None and (
                    time.monotonic() - max(waiting_since, watcher.last_active) > until_idle):
                step(f"no new file for {until_idle:g} s: stopping")
                break
    except StreamingQueryException as exc:
        raise WatchError(str(exc).strip().splitlines()[0]) from None
    finally:
        query.stop()
        stopping.restore()


class _StopRequests:
    """SIGINT and SIGTERM noted, to be acted on between two waits: SparkContext's own SIGINT handler calls into the
    JVM from inside the call the main thread is waiting in (py4j then fails with tracebacks)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.requests = 0
        self.announced = False
        self.previous = {number: signal.signal(number, self._note) for number in self.SIGNALS}

    def _note(self, number, frame):
        self.requests += 1

    def __bool__(self) -> bool:
        return self.requests > 0

    def announce(self, step: Callable[[str], None], message: str):
        if not self.announced:
            step(message)
            self.announced = True

    def restore(self):
        for number, handler in self.previous.items():
            signal.signal(number, handler)
