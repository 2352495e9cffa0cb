"""The Spark job: pcaps -> packets -> (shuffle by flow) -> connections decoded -> tables and summary.

Data flows one way:

    nsqpcap source (one partition per file / byte range, Arrow batches of TCP segment metadata;
                    payload="reference": the bytes stay in the files)
      -> repartition(flow), sorted by flow and capture time, mapInArrow: payload bytes read back by offset,
         reassembly (read/reassembly.py) handing out a connection in windows of ``window_bytes``, NSQ decoding
         (decode/v2.py) and per-connection checks (judge/violations.py) carrying their state from window to window ->
         the events and the tables each connection makes alone (derive/connection_tables.py), written as Parquet by the
         task itself, window by window, and its deliveries and publishes into the lifecycles' buckets by body hash
      -> in the driver, the connections table and the small sums of the decoding tasks' tables (derive/tallies.py);
         the judging, a task per nsqd or share of its monitors (judge/job.py), and beside it, on the cores it leaves
         idle, one task per bucket: message lifecycles and their totals (derive/lifecycle.py); summary.json from them
         (report/summary.py)

Connections spanning several files meet in the shuffle: the reader keeps no state across files.
Inputs and outputs are paths or URLs (read/storage.py): every task opens the captures and writes its tables itself,
through the same filesystem layer, so executors need no disk shared with the driver nor with each other. Only
local captures shuffle offsets instead of payloads (the decoder reads the bytes back from the files); from object
storage the payloads travel with the segments, read once by ranged reads.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections import ChainMap
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_analysis.decode.events import EVENT_SCHEMA
from spark_analysis.decode.kinds import Direction, Kind
from spark_analysis.decode.v1 import is_lookupd
from spark_analysis.decode.v2 import ConnectionDecoder
from spark_analysis.derive import lifecycle
from spark_analysis.derive.connection_tables import SCHEMAS, TableWriter, prepare_directories, project
from spark_analysis.derive.settlements import DELIVERED_SCHEMA
from spark_analysis.derive.tallies import SUMMARY_TALLIES, Tallies
from spark_analysis.judge.job import Judged, judge_traffic
from spark_analysis.judge.lookupd import LOOKUPD, LOOKUPD_HTTP, LookupdHttpReading, V1Rows, lookupd_servers
from spark_analysis.judge.monitoring import HTTP, HTTP_SCHEMA, OBSERVED, HttpReading, observed_rows, openings
from spark_analysis.judge.progress import progress_shown
from spark_analysis.memory import return_freed_memory, without_cycle_collection
from spark_analysis.read.datasource import DEFAULT_SPLIT_BYTES, NsqPcapDataSource
from spark_analysis.read.parquet_source import WrittenTables
from spark_analysis.read.pcapfile import PACKET_DDL, read_payloads
from spark_analysis.read.reassembly import Connection, FlowReassembly
from spark_analysis.read.storage import LOCAL, Storage, is_local, join

DEFAULT_NSQ_PORTS = frozenset({4150})
# a segment as reassembly takes it; the ACK number last (older tuples without it stay valid)
SEGMENT_COLUMNS = ["ts_ns", "src", "dst", "sport", "dport", "seq", "flags", "payload", "ack"]
_PAYLOAD = SEGMENT_COLUMNS.index("payload")
# what the decoding hands the judging (the exchange's), not tables of its own
FOR_THE_JUDGE = frozenset({OBSERVED, HTTP, LOOKUPD, LOOKUPD_HTTP})
# A connection's bytes decoded at a time: what its decoding holds is a few windows' worth, however long it lives.
DEFAULT_WINDOW_BYTES = 16 << 20
STARTED_POLL_S = 0.05  # how often side_by_side looks whether its first job runs yet
First, Then = TypeVar("First"), TypeVar("Then")


def packets(
    spark: SparkSession, paths: list[str], split_bytes: int = DEFAULT_SPLIT_BYTES, payload: str = "bytes",
    storage: Storage = LOCAL,
) -> DataFrame:
    spark.dataSource.register(NsqPcapDataSource)  # any session will do: this one may not know the source yet
    return (
        spark.read.format("nsqpcap")
        # the schema is fixed: stating it spares a Python worker that would only report it
        .schema(PACKET_DDL)
        .option("splitBytes", str(split_bytes))
        .option("payload", payload)
        .option("storage", json.dumps(storage.options))
        .load(paths if len(paths) > 1 else paths[0])
    )


def decode_to_tables(packet_frame: DataFrame, tables_dir: str, exchange_dir: str,
                     nsq_ports: frozenset[int] = DEFAULT_NSQ_PORTS, window_bytes: int = DEFAULT_WINDOW_BYTES,
                     storage: Storage = LOCAL, with_payloads: bool = False,
                     http_ports: frozenset[int] = frozenset(), lookupd_http_ports: frozenset[int] = frozenset()
                     ) -> int:
    """Shuffle segments by flow; each task decodes its flows' connections, ``window_bytes`` of a connection at a
    time, writes their tables (derive/connection_tables.py) into ``tables_dir`` and what the lifecycles join into
    ``exchange_dir`` (lifecycle.MessageExchange), with the exchanges with the brokers' HTTP APIs (``http_ports``)
    and nsqlookupds' (``lookupd_http_ports``). Walker errors become error events. Returns the exchange's bucket
    count."""
    ports = frozenset(nsq_ports)
    prepare_directories(tables_dir, SCHEMAS, storage)
    lifecycle.prepare_exchange(exchange_dir, storage)
    # Read once: the placement sizes the flows, then the tasks decode them. Segments that carry their payloads
    # (``with_payloads``: captures on object storage) are kept on the executors' disks: in memory they would be the
    # whole capture.
    packet_frame = packet_frame.persist(StorageLevel.DISK_ONLY if with_payloads else StorageLevel.MEMORY_AND_DISK_DESER)
    sizes = flow_sizes(packet_frame)
    placed = placed_by_size(packet_frame, sizes)
    buckets = lifecycle.bucket_count(sum(sizes.values()))

    def decode_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        part = f"part-{TaskContext.get().partitionId():05d}"
        with (TableWriter(tables_dir, part, SCHEMAS, storage) as writer,
              lifecycle.MessageExchange(exchange_dir, part, buckets, storage) as exchange):
            for flow, runs in flow_runs(batches):
                for name, table in decode_flow(flow, runs, ports, window_bytes, http_ports, lookupd_http_ports):
                    if name not in FOR_THE_JUDGE:
                        writer.add(name, table)
                    exchange.add(name, table)
        return_freed_memory()
        yield from ()  # the task's output is its files

    # Sorted by flow, then by capture time (the capture's order among equal times): a task meets each of its flows'
    # segments in one run (the shuffle put them in one partition), in the order the reassembly streams them.
    placed.sortWithinPartitions("flow", "ts_ns", "file", "offset").mapInArrow(decode_partition, "none INT").collect()
    packet_frame.unpersist()
    return buckets


def flow_sizes(packet_frame: DataFrame) -> dict[str, int]:
    """Each flow's payload bytes: a job over all the segments."""
    sizes = packet_frame.groupBy("flow").agg(F.sum("payload_length").alias("bytes")).collect()
    return {row.flow: row.bytes or 0 for row in sizes}


def placed_by_size(packet_frame: DataFrame, sizes: Mapping[str, int]) -> DataFrame:
    """Segments shuffled so that each flow is one task's, and the tasks' payload bytes (``sizes``) are balanced: the
    largest flow first, each to the task with the fewest bytes so far. A few long connections are common (nsq's bench
    tools use four), and a connection is decoded by one task, so hashing flows to tasks would often give two
    of them to one task while another core idles; and adaptive execution would merge the tasks, whose input
    (segment metadata) is small for the work it stands for. A flow ``sizes`` does not name is hashed to a task."""
    spark = packet_frame.sparkSession
    tasks = int(spark.conf.get("spark.sql.shuffle.partitions"))
    loads = [0] * tasks
    task_of = {}
    for flow, size in sorted(sizes.items(), key=lambda pair: -pair[1]):
        task_of[flow] = loads.index(min(loads))
        loads[task_of[flow]] += size
    # Spark hashes a key to the task pmod(hash(key), tasks): one key per task, chosen so that it lands there.
    keys = {}
    for key in range(64 * tasks):
        keys.setdefault(spark_hash_long(key) % tasks, key)
    # from Arrow: a local relation, where a list of rows would be a job of Python tasks
    placement = spark.createDataFrame(pa.table({
        "flow": pa.array(list(task_of), pa.string()),
        "task": pa.array([keys[task] for task in task_of.values()], pa.int64()),
    }))
    placed = packet_frame.join(F.broadcast(placement), "flow", "left")
    return placed.withColumn("task", F.coalesce("task", F.hash("flow").cast("long"))).repartition(tasks, "task")


_MASK32 = 0xFFFFFFFF


def spark_hash_long(value: int, seed: int = 42) -> int:
    """Spark's ``hash()`` of a BIGINT, the one its hash partitioning uses (Murmur3 x86 32-bit of the value's two
    halves, seed 42), as a signed 32-bit integer: computed here, it costs no Spark job."""

    def rotated(x: int, bits: int) -> int:
        return ((x << bits) | (x >> (32 - bits))) & _MASK32

    h1 = seed
    for half in (value & _MASK32, (value >> 32) & _MASK32):
        k1 = rotated(half * 0xCC9E2D51 & _MASK32, 15) * 0x1B873593 & _MASK32
        h1 = (rotated(h1 ^ k1, 13) * 5 + 0xE6546B64) & _MASK32
    h1 ^= 8
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & _MASK32
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & _MASK32
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >= 1 << 31 else h1


def flow_runs(batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[str | None, Iterator[pa.RecordBatch]]]:
    """Each flow with its runs of rows, across batch boundaries; a flow's runs are to be read before the next flow."""
    def runs():
        for batch in batches:
            flows = batch.column("flow").to_pylist()
            start = 0
            for end in range(1, len(flows) + 1):
                if end == len(flows) or flows[end] != flows[start]:
                    yield flows[start], batch.slice(start, end - start)
                    start = end

    for flow, group in itertools.groupby(runs(), key=lambda run: run[0]):
        yield flow, (run for _, run in group)


def decode_flow(flow: str | None, runs: Iterable[pa.RecordBatch], ports: frozenset[int],
                window_bytes: int | None = DEFAULT_WINDOW_BYTES, http_ports: frozenset[int] = frozenset(),
                lookupd_http_ports: frozenset[int] = frozenset()) -> Iterator[tuple[str, pa.Table]]:
    """A flow's tables, ``(name, rows)`` one window of a connection at a time (``window_bytes``; None: each
    connection whole). ``runs``: its segments in capture-time order."""
    if flow is None:
        for run in runs:
            yield from project(_walker_errors(run), DELIVERED_SCHEMA.empty_table(), lookupd=False)
        return
    flow_decoder = FlowDecoder(flow, ports, window_bytes, http_ports=http_ports, lookupd_http_ports=lookupd_http_ports)
    yield from flow_decoder.feed(runs)
    yield from flow_decoder.end()


class FlowDecoder:
    """A flow's reassembly and its connection's decoder, fed the flow's segments in parts (``feed``, then
    ``end``): between two parts it is plain data, which ``nsq-trace watch`` pickles (``carried``) to carry a
    connection from one capture file to the next."""

    def __init__(self, flow: str, ports: frozenset[int], window_bytes: int | None, carried: bool = False,
                 http_ports: frozenset[int] = frozenset(), lookupd_http_ports: frozenset[int] = frozenset()):
        self.reassembly = FlowReassembly(flow, ports | http_ports | lookupd_http_ports, window_bytes)
        self.ports, self.carried = ports, carried
        self.http_ports, self.lookupd_http_ports = http_ports, lookupd_http_ports
        self.http: HttpReading | None = None  # a connection to a broker's or an nsqlookupd's HTTP API: its exchanges
        self.decoder: ConnectionDecoder | None = None
        self.v1_rows: V1Rows | None = None  # an nsqlookupd connection's rows for its judge
        self.released_rows = 0  # of the connection being decoded

    def feed(self, runs: Iterable[pa.RecordBatch]) -> Iterator[tuple[str, pa.Table]]:
        """The tables these segments (the flow's next ones, in capture-time order) make final."""
        with without_cycle_collection():
            for conn in self.reassembly.feed(_segments(runs)):
                yield from self._decoded(conn)

    def cut(self, carried_ns: int) -> Iterator[tuple[str, pa.Table]]:
        """Where a capture file ends: what the connection has placed handed out as two windows, all but its last
        ``carried_ns`` of capture time, then those. The first is released (paired with the second), so that what
        is carried to the next file is the second window's rows, and the bytes still waiting behind a hole."""
        conn = self.reassembly.conn
        if conn is None:
            return
        with without_cycle_collection():
            for before_ts_ns in (conn.last_ts_ns - carried_ns, conn.last_ts_ns + 1):
                for window in self.reassembly.cut(before_ts_ns):
                    yield from self._decoded(window)

    def end(self) -> Iterator[tuple[str, pa.Table]]:
        """The flow has ended: the rest of its tables."""
        with without_cycle_collection():
            for conn in self.reassembly.end():
                yield from self._decoded(conn)

    def _decoded(self, conn: Connection) -> Iterator[tuple[str, pa.Table]]:
        if self.decoder is None or self.decoder.conn is not conn:
            self.decoder, self.released_rows = ConnectionDecoder(conn, self.ports, self.carried), 0
            self.http = HttpReading(conn.server[0]) if conn.server[1] in self.http_ports else \
                LookupdHttpReading(conn.server[0]) if conn.server[1] in self.lookupd_http_ports else None
            # "  V1" sent to an nsqd is a client's bad magic (C-02), for nsqd's judge
            self.v1_rows = V1Rows() if is_lookupd(conn) and conn.server[1] not in self.ports else None
        if self.v1_rows is not None:
            yield LOOKUPD, self.v1_rows.window(conn)
        if self.http is not None:
            yield self.http.TABLE, pa.Table.from_pylist(
                self.http.feed(conn) + (self.http.end() if conn.complete else []), schema=HTTP_SCHEMA)
        released = self.decoder.window()
        if released is not None:
            yield from self._tables(*released)
        if conn.complete:
            yield from self._tables(*self.decoder.finish())

    def _tables(self, events: pa.Table, delivered: pa.Table) -> Iterator[tuple[str, pa.Table]]:
        """A released window's tables, and for a V2 connection what the monitors read of it (``OBSERVED``)."""
        yield from project(events, delivered, lookupd=self.decoder.protocol == "lookupd")
        if self.decoder.protocol == "nsq":
            yield OBSERVED, observed_rows(events, self.released_rows)
        self.released_rows += events.num_rows


def _segments(runs: Iterable[pa.RecordBatch]) -> Iterator[tuple]:
    for run in runs:
        columns = [run.column(name).to_pylist() for name in SEGMENT_COLUMNS]
        if run.column("payload").null_count:
            columns[_PAYLOAD] = read_payloads(
                *(run.column(name).to_pylist() for name in ("file", "payload_offset", "payload_length"))
            )
        yield from zip(*columns, strict=True)


def _walker_errors(table: pa.RecordBatch) -> pa.Table:
    count = table.num_rows
    files, offsets = table.column("file").to_pylist(), table.column("offset").to_pylist()
    columns = {name: [None] * count for name in EVENT_SCHEMA.names}
    columns.update(
        ts_ns=table.column("ts_ns").to_pylist(),
        direction=[Direction.FILE] * count,
        kind=[Kind.ERROR] * count,
        name=table.column("error").to_pylist(),
        stream_offset=offsets,
        explanation=[f"{f} @{o}: {d}"
                     for f, o, d in zip(files, offsets, table.column("detail").to_pylist(), strict=False)],
    )
    return pa.Table.from_pydict(columns, schema=EVENT_SCHEMA)


def run_analysis(
    spark: SparkSession,
    paths: list[str],
    out_dir: str,
    nsq_ports=DEFAULT_NSQ_PORTS,
    split_bytes: int = DEFAULT_SPLIT_BYTES,
    window_bytes: int = DEFAULT_WINDOW_BYTES,
    report: bool = True,
    step: Callable[[str], None] = lambda message: None,
    storage: Storage = LOCAL,
    http_ports: frozenset[int] = frozenset(),
    lookupd_http_ports: frozenset[int] = frozenset(),
    nsqd_clients: bool = True,
) -> dict:
    """Decode ``paths`` into ``out_dir``: tables/*.parquet, summary.json and (optionally) report.html. Paths and
    ``out_dir`` may be URLs of ``storage``'s filesystems. ``http_ports``: the brokers' HTTP API ports, when the
    capture holds their traffic whole (the monitors then know every publish, pause and empty); ``lookupd_http_ports``
    the nsqlookupds' (their monitors then judge its answers, and registrations made over it); ``nsqd_clients``: the
    nsqlookupds' V1 clients are nsqds (judged by nsqd's rules of registering), not test programs."""
    storage.make_directory(out_dir)
    tables_dir = join(out_dir, "tables")
    started = time.monotonic()
    step("decoding packets (read, shuffle by flow, reassemble, decode, per-connection tables)")
    files = storage.expand(paths)
    # Local payloads stay in the files until the decoder needs them: only segment metadata is shuffled.
    payload = payload_kind(files)
    exchange_dir = join(out_dir, "exchange")
    buckets = decode_to_tables(packets(spark, paths, split_bytes, payload, storage), tables_dir, exchange_dir,
                               nsq_ports, window_bytes, storage, with_payloads=payload == "bytes",
                               http_ports=http_ports, lookupd_http_ports=lookupd_http_ports)
    step("deriving tables")
    # before the lifecycles' job: its tasks take how connections ended, and the IDs E_FIN_FAILED named, from them
    tallied = Tallies(SUMMARY_TALLIES).read({"tables": tables_dir, "exchange": exchange_dir}, storage)
    step("judging (the catalogue's monitors: a task per nsqd, or per share of its monitors) and message lifecycles "
         "beside it (a task per bucket of bodies)")
    connections = tallied.connections()

    def judging() -> Judged:
        return judge_traffic(spark, exchange_dir, tables_dir, openings(connections, tallied.undecoded()),
                             bool(http_ports), storage, lookupd_servers(connections, nsq_ports),
                             bool(lookupd_http_ports), nsqd_clients)

    def message_lifecycles() -> tuple[Mapping[str, DataFrame], lifecycle.Totals]:
        return lifecycle.tables(spark, tables_dir, exchange_dir, buckets, tallied.connection_ends(),
                                tallied.fin_failed_ids(), storage)

    with progress_shown(exchange_dir, step, storage):
        judged, lifecycles = side_by_side(spark, judging, message_lifecycles)
    tables, totals, result = derive(spark, tables_dir, lifecycles, tallied, judged, storage, step)
    storage.delete_directory(exchange_dir)
    result["input"] = {
        "files": paths,
        "bytes": sum(storage.size(path) for path in files),
        "analysis_seconds": round(time.monotonic() - started, 3),
    }
    storage.write_text(join(out_dir, "summary.json"), json.dumps(result, indent=1, sort_keys=False))
    if report:
        from spark_analysis.report import html

        step("writing report")
        html.write(tables, totals, result, out_dir, storage)
    return result


def side_by_side(spark: SparkSession, first: Callable[[], First], then: Callable[[], Then]) -> tuple[First, Then]:
    """``first`` and ``then``, each running Spark jobs, at once: ``then`` from when a job of ``first`` runs. Spark
    offers a free core to the job that came first, so ``then``'s tasks take only the cores ``first``'s leave idle
    (the judging's tasks do not end together; ``watch`` judges a batch in one task)."""
    context, group = spark.sparkContext, f"first of side_by_side {uuid.uuid4()}"

    def first_in_group() -> First:
        context.setJobGroup(group, "run beside another job", interruptOnCancel=True)
        return first()

    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(first_in_group)
        try:
            while not context.statusTracker().getJobIdsForGroup(group) and not running.done():
                time.sleep(STARTED_POLL_S)
            second = then()
        except BaseException:
            context.cancelJobGroup(group)  # not left running to its end: its jobs fail, and this error is raised
            raise
        return running.result(), second


def payload_kind(files: list[str]) -> str:
    """``reference``: the decoder reads payloads back from the (local) files; ``bytes``: they travel with the
    segments."""
    return "reference" if all(is_local(path) for path in files) else "bytes"


def derive(spark: SparkSession, tables_dir: str, lifecycles: tuple[Mapping[str, DataFrame], lifecycle.Totals],
           tallied: Tallies, judged: Judged, storage: Storage = LOCAL,
           step: Callable[[str], None] = lambda message: None,
           ) -> tuple[Mapping[str, DataFrame], lifecycle.Totals, dict]:
    """From the decoding tasks' tables: the lifecycle tables and their totals (``lifecycles``), and from the summary's
    small tables (``tallied``, derive/tallies.py) the connections table written; with the monitors' counts
    (``judged``), returns all the tables as DataFrames, the lifecycles' totals and the summary."""
    from spark_analysis.report import summary

    derived, totals = lifecycles
    step("summarising")
    connections = tallied.connections()
    storage.reset_directory(join(tables_dir, "connections"))
    with TableWriter(tables_dir, "part-00000", {"connections": connections.schema}, storage) as writer:
        writer.add("connections", connections)
    rows = {name: table.to_pylist() for name, table in tallied.tables.items() if name != "connections"}
    rows["connections"] = connections.to_pylist()
    tables = ChainMap(derived, WrittenTables(spark, tables_dir, SCHEMAS, storage))
    return tables, totals, summary.summarise(rows, totals, judged).as_json()
