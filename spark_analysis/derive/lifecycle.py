"""The tables that join connections: message lifecycles (the connections' roles: derive/tallies.py).

A message on a channel is identified by (topic, channel, msg_id): every channel gets its own copy
with the same ID (C-11). Its lifecycle is its deliveries in time order, each settled on its own
connection or not (connection_tables.delivered). A delivery that nothing settled and that another
delivery follows timed out (D-11); if its connection had already gone without CLS, it was abandoned
by that disconnect (D-15).

One exchange: a message's publish and every delivery of it, on any channel, carry the same body, so
they meet in the bucket of its body hash. The decoding tasks write their deliveries and accepted
publishes into the buckets' files as they go (``MessageExchange``), and one lifecycle task per bucket
orders its deliveries and writes `deliveries` and `messages` with Arrow compute and numpy, in bulk.
The rows never leave Arrow: a Spark shuffle would turn them into the JVM's rows and back, which cost
~4 s of two cores for the bench trace's 1.5 M rows while the ordering and aggregation take ~1.5 s.
Each lifecycle task also returns its bucket's totals (``TOTALS_SCHEMA``: deliveries by attempts and
outcome, messages delivered and finished, latency histograms): what summary.json and the report
count over all messages, with no Spark job reading the tables again (~1.5-2 s of 2 cores for the
bench trace). Like the decoding tasks' tables, the exchange needs the output directory on every
executor's file system. ``nsq-trace watch`` orders each micro-batch's new deliveries with the messages still open
instead (watch/lifecycle_increments.py).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from spark_analysis.decode.kinds import Kind, Status
from spark_analysis.derive.connection_tables import SCHEMAS, TableWriter, parquet_writer, prepare_directories
from spark_analysis.derive.quantiles import EMPTY, HISTOGRAM_TYPE, Histogram
from spark_analysis.derive.settlements import DELIVERED_SCHEMA, DELIVERY_FIELDS, codes
from spark_analysis.judge.lookupd import LOOKUPD, LOOKUPD_HTTP, LOOKUPD_SCHEMA
from spark_analysis.judge.monitoring import HTTP, HTTP_SCHEMA, NAMES, NAMES_SCHEMA, OBSERVED, OBSERVED_SCHEMA
from spark_analysis.read.parquet_source import WrittenTables
from spark_analysis.read.storage import LOCAL, Storage, join

MESSAGE_KEY = ["topic", "channel", "msg_id"]
NS_PER_MS = 1_000_000

DELIVERIES_SCHEMA = pa.schema(
    [
        *(DELIVERED_SCHEMA.field(name) for name in DELIVERY_FIELDS),
        ("cause", pa.string()),  # first | req | timeout | after_fin
        ("outcome", pa.string()),  # FIN | REQ | timeout | abandoned | open
        ("settled_ts_ns", pa.int64()),
    ]
)
MESSAGES_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("channel", pa.string()),
        ("msg_id", pa.string()),
        ("publish_ts_ns", pa.int64()),  # the timestamp nsqd gave it (C-09)
        ("body_hash", pa.int64()),
        ("first_delivery_ts_ns", pa.int64()),
        ("last_delivery_ts_ns", pa.int64()),
        ("deliveries", pa.int64()),
        ("max_attempts", pa.int32()),
        ("consumers", pa.list_(pa.string())),
        ("reqs", pa.int64()),
        ("timeouts", pa.int64()),
        ("fin_ts_ns", pa.int64()),
        ("touches", pa.int64()),
        ("publish_command_ts_ns", pa.int64()),
        ("publish_command", pa.string()),
        ("publish_to_first_delivery_ms", pa.float64()),
        ("last_delivery_to_fin_ms", pa.float64()),
        ("state", pa.string()),  # finished | unfinished
    ]
)
LIFECYCLE_SCHEMAS = {"deliveries": DELIVERIES_SCHEMA, "messages": MESSAGES_SCHEMA}
# A bucket's rows are ordered and aggregated in one Arrow table: ~400,000 rows (~300 MB of a Python worker's memory)
# for the bench tools' 200-byte messages.
BYTES_PER_BUCKET = 64 << 20
EXCHANGED_SCHEMAS = {
    "delivered": DELIVERED_SCHEMA,
    "published": pa.schema([SCHEMAS["publishes"].field(name) for name in ("topic", "body_hash", "ts_ns", "command")]),
    # each connection's own event row, once it has ended: the connections table, and how each ended for the
    # lifecycles (whether it sent CLS, D-15, and when)
    "connections": SCHEMAS["events"],
    # the messages each E_FIN_FAILED named (P-FIN-04): whether the channel ever delivered them is the buckets' to say
    "fin_failed": pa.schema([SCHEMAS["frames"].field(name) for name in MESSAGE_KEY]),
    # what the monitors read of each V2 connection, for the judging job (judge/job.py)
    OBSERVED: OBSERVED_SCHEMA,
    HTTP: HTTP_SCHEMA,  # the requests to the brokers' HTTP APIs that change delivery (judge/monitoring.py)
    LOOKUPD: LOOKUPD_SCHEMA,  # nsqlookupd's connections, for the judging job (judge/lookupd.py)
    LOOKUPD_HTTP: HTTP_SCHEMA,  # the exchanges with nsqlookupd's HTTP API, for its judge (judge/lookupd.py)
    NAMES: NAMES_SCHEMA,  # the nsqds' topics and channels changed, for the lookupds' judges (judge/job.py)
}
UNBUCKETED = ("connections", "fin_failed", HTTP, LOOKUPD_HTTP)
# one directory per server (``server_table``): each judging task reads its server's rows alone (judge/job.py)
BY_SERVER = (OBSERVED, LOOKUPD)
EXCHANGE_ROWS = 1 << 18  # rows a decoding task gathers before it writes them into the buckets
SERVER_BATCH_ROWS = 1 << 16  # a server's rows read at a time (``server_rows``)


def bucket_count(trace_bytes: int) -> int:
    """One bucket per BYTES_PER_BUCKET of the trace: a small trace's lifecycles are one task, not one per core."""
    return max(1, -(-trace_bytes // BYTES_PER_BUCKET))


class MessageExchange:
    """One decoding task's side of the exchange (``directory``): ``add`` takes its tables as ``project`` yields
    them, keeps what the lifecycles need, and writes it, ``EXCHANGE_ROWS`` at a time, one row group per bucket into
    ``<table>-<bucket>/<part>.parquet``; what the judges read, one row group per server into the server's directory
    (``server_table``); its connections' own rows, and the IDs its E_FIN_FAILED frames named, go to
    ``connections/`` and ``fin_failed/<part>.parquet``, for every bucket and the connections table."""

    def __init__(self, directory: str, part: str, buckets: int, storage: Storage = LOCAL):
        self.directory, self.part, self.buckets, self.storage = directory, part, buckets, storage
        self._gathered: dict[str, list[pa.Table]] = {"delivered": [], "published": [], OBSERVED: [], LOOKUPD: []}
        self._rows = 0
        self._writers: dict[str, pq.ParquetWriter] = {}
        self._unbucketed = TableWriter(directory, part, {name: EXCHANGED_SCHEMAS[name] for name in UNBUCKETED},
                                       storage)

    def add(self, name: str, table: pa.Table) -> None:
        if name == "events":
            self._unbucketed.add("connections", table.filter(pc.equal(table["kind"], Kind.CONNECTION)))
            return
        if name in (HTTP, LOOKUPD_HTTP):
            self._unbucketed.add(name, table)
            return
        if name == "frames":
            failed = table.filter(pc.and_(pc.equal(table["name"], "error"), pc.equal(table["code"], "E_FIN_FAILED")))
            self._unbucketed.add("fin_failed", failed.select(MESSAGE_KEY))
            return
        if name == "publishes":
            name, table = "published", table.filter(pc.equal(table["status"], Status.OK))
        elif name not in self._gathered:
            return
        if table.num_rows:
            self._gathered[name].append(table.select(EXCHANGED_SCHEMAS[name].names))
            self._rows += table.num_rows
            if self._rows >= EXCHANGE_ROWS:
                self._write()

    def _write(self) -> None:
        for name, tables in self._gathered.items():
            if not tables:
                continue
            rows = pa.concat_tables(tables).cast(EXCHANGED_SCHEMAS[name])
            if name in BY_SERVER:
                servers = rows["server"].combine_chunks().dictionary_encode()
                tables_of = [server_table(name, server) for server in servers.dictionary.to_pylist()]
                bucket = servers.indices.to_numpy()
            else:
                tables_of = [f"{name}-{index:05d}" for index in range(self.buckets)]
                bucket = np.mod(rows["body_hash"].to_numpy(), self.buckets)
            if np.any(bucket[1:] < bucket[:-1]):  # a task's rows of one server are in order: no copy of them
                order = np.argsort(bucket, kind="stable")
                rows, bucket = rows.take(order), bucket[order]
            bounds = np.searchsorted(bucket, np.arange(len(tables_of) + 1))
            for table, start, stop in zip(tables_of, bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
                if start < stop:
                    self._writer(name, table).write_table(rows.slice(start, stop - start))
            tables.clear()
        self._rows = 0

    def _writer(self, name: str, table: str) -> pq.ParquetWriter:
        if table not in self._writers:
            path = join(self.directory, table)
            self.storage.make_directory(path)
            self._writers[table] = parquet_writer(join(path, f"{self.part}.parquet"), EXCHANGED_SCHEMAS[name],
                                                  self.storage)
        return self._writers[table]

    def close(self) -> None:
        self._write()
        for writer in self._writers.values():
            writer.close()
        self._unbucketed.close()

    def __enter__(self) -> MessageExchange:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def prepare_exchange(directory: str, storage: Storage = LOCAL) -> None:
    storage.delete_directory(directory)
    for name in UNBUCKETED:
        storage.reset_directory(join(directory, name))


def server_table(name: str, server: str) -> str:
    """The exchange's directory of table ``name``'s rows of ``server`` (an nsqd's or nsqlookupd's "host port")."""
    return f"{name}-{hashlib.blake2s(server.encode(), digest_size=8).hexdigest()}"


def server_files(directory: str, name: str, server: str, storage: Storage = LOCAL) -> list[str]:
    """Every decoding task's file of table ``name``'s rows of ``server``."""
    return storage.files(join(directory, server_table(name, server)), ".parquet")


def server_rows(files: list[str], storage: Storage = LOCAL) -> Iterator[pa.RecordBatch]:
    """The rows in a server's ``files`` (``server_files``: its directory holds its rows alone), a batch at a time:
    file after file, where a dataset's scan reads ahead (~500 MB more of a worker's memory for the bench trace's
    2.2 M rows), in batches of ``SERVER_BATCH_ROWS`` (a row group whole takes ~3x their memory)."""
    for url in files:
        with storage.open_input(url) as source:
            yield from pq.ParquetFile(source).iter_batches(batch_size=SERVER_BATCH_ROWS)


def exchanged(directory: str, name: str, bucket: int | None = None, storage: Storage = LOCAL,
              prefix: str = "") -> pa.Table:
    """Every decoding task's rows of table ``name`` (in ``bucket``), of the parts whose names start with
    ``prefix``."""
    files = storage.files(join(directory, name if bucket is None else f"{name}-{bucket:05d}"), ".parquet")
    return read_parts([url for url in files if url.rsplit("/", 1)[-1].startswith(prefix)], EXCHANGED_SCHEMAS[name],
                      storage)


def read_parts(files: list[str], schema: pa.Schema, storage: Storage = LOCAL, **scan) -> pa.Table:
    """Parquet ``files`` as one table of ``schema`` (``scan``: a dataset's ``to_table`` arguments: columns,
    filter)."""
    if not files:
        return schema.empty_table().select(scan.get("columns", schema.names))
    filesystem = storage.locate(files[0])[0]
    return ds.dataset([storage.locate(url)[1] for url in files], schema=schema, format="parquet",
                      filesystem=filesystem).to_table(**scan)


def tables(spark: SparkSession, tables_dir: str, exchange_dir: str, buckets: int, ends: pa.Table,
           fin_failed: pa.Table, storage: Storage = LOCAL) -> tuple[Mapping[str, DataFrame], Totals]:
    """The lifecycle tables, from the exchange the decoding tasks wrote (``exchange_dir``, in ``buckets``), and their
    totals; ``ends``: how the connections ended, ``fin_failed``: the IDs E_FIN_FAILED named (derive/tallies.py)."""
    prepare_directories(tables_dir, LIFECYCLE_SCHEMAS, storage)

    def lifecycles(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for bucket in batch.column("id").to_pylist():
                delivered = exchanged(exchange_dir, "delivered", bucket, storage).join(ends, "conn_id",
                                                                                      join_type="left outer")
                delivery = deliveries(delivered)
                published = exchanged(exchange_dir, "published", bucket, storage)
                message = messages(delivery, first_publishes(published))
                with TableWriter(tables_dir, f"part-{bucket:05d}", LIFECYCLE_SCHEMAS, storage) as writer:
                    writer.add("deliveries", delivery.select(DELIVERIES_SCHEMA.names))
                    writer.add("messages", message)
                yield bucket_totals(delivery, message, fin_failed, published)

    totals = Totals.of(spark.range(buckets, numPartitions=buckets)
                       .mapInArrow(lifecycles, from_arrow_schema(TOTALS_SCHEMA)).collect())
    return WrittenTables(spark, tables_dir, LIFECYCLE_SCHEMAS, storage), totals


def connection_ends(ended: pa.Table) -> pa.Table:
    """How each connection ended, from its own event row: whether it sent CLS (D-15), and when."""
    facts = ended["connection"].combine_chunks()
    return _ends(ended["conn_id"], facts.field("cls"), facts.field("last_ts_ns"))


def connection_ends_of(connections: pa.Table) -> pa.Table:
    """How each connection ended, from the connections' tally (derive/tallies.py)."""
    return _ends(connections["conn_id"], connections["cls"], connections["last_ts_ns"])


def _ends(conn_id, cls, last_ts_ns) -> pa.Table:
    return pa.table({"conn_id": conn_id, "no_cls": pc.equal(cls, 0), "conn_last_ts_ns": last_ts_ns})


_CHANNEL = [("topic", pa.string()), ("channel", pa.string())]
LATENCY_COLUMNS = ("publish_to_first_delivery_ms", "last_delivery_to_fin_ms")
MINUTE_COUNTS = ("published", "delivered", "redelivered", "timeouts")
NS_PER_MINUTE = 60 * 1_000_000_000
# One row per bucket: what summary.json and the report count over all messages, in the buckets' own aggregates.
TOTALS_SCHEMA = pa.schema([
    ("deliveries", pa.list_(pa.struct([*_CHANNEL, ("attempts", pa.int32()), ("outcome", pa.string()),
                                       ("count", pa.int64())]))),
    ("messages", pa.list_(pa.struct([*_CHANNEL, ("delivered", pa.int64()), ("finished", pa.int64())]))),
    ("latencies", pa.list_(pa.struct([*_CHANNEL, ("latency", pa.string()), ("histogram", HISTOGRAM_TYPE)]))),
    ("fin_failed_delivered", pa.list_(pa.struct([*_CHANNEL, ("msg_id", pa.string())]))),
    # per minute of capture time (minutes since the epoch): messages accepted, deliveries, redeliveries (a cause
    # other than the first), those a timeout caused, and publish -> first delivery of the messages first delivered
    ("minutes", pa.list_(pa.struct([("minute", pa.int64()), *((name, pa.int64()) for name in MINUTE_COUNTS),
                                    ("latency", HISTOGRAM_TYPE)]))),
])


def bucket_totals(delivery: pa.Table, message: pa.Table, fin_failed: pa.Table, published: pa.Table) -> pa.RecordBatch:
    """A bucket's row of ``TOTALS_SCHEMA``: deliveries by attempts and outcome, messages delivered and finished, the
    latencies' histograms per channel, which of the messages named by E_FIN_FAILED it delivered, and per minute."""
    latencies = []
    for column in LATENCY_COLUMNS:
        measured = message.filter(pc.is_valid(message[column]))
        per_channel = _aggregate(measured, ["topic", "channel"], {"values": (column, "list")})
        for topic, channel, values in zip(per_channel["topic"].to_pylist(), per_channel["channel"].to_pylist(),
                                          per_channel["values"].combine_chunks().to_numpy(zero_copy_only=False),
                                          strict=True):
            latencies.append({"topic": topic, "channel": channel, "latency": column,
                              "histogram": Histogram.of(values).as_arrow()})
    return pa.RecordBatch.from_pylist([{
        "deliveries": _aggregate(delivery, ["topic", "channel", "attempts", "outcome"],
                                 {"count": ("ts_ns", "count")}).to_pylist(),
        "messages": _aggregate(message, ["topic", "channel"],
                               {"delivered": ("msg_id", "count"), "finished": ("fin_ts_ns", "count")}).to_pylist(),
        "latencies": latencies,
        "fin_failed_delivered": fin_failed.join(message.select(MESSAGE_KEY), MESSAGE_KEY,
                                                join_type="left semi").to_pylist(),
        "minutes": _per_minute(delivery, message, published),
    }], schema=TOTALS_SCHEMA)


def _per_minute(delivery: pa.Table, message: pa.Table, published: pa.Table) -> list[dict]:
    def minute(ts_ns) -> pa.Array:
        return pc.divide(ts_ns, NS_PER_MINUTE)  # integer division: capture times are after the epoch

    counted = {}
    for table, counts in (
        (pa.table({"minute": minute(published["ts_ns"])}), {"published": ("minute", "count")}),
        (pa.table({"minute": minute(delivery["ts_ns"]),
                   "redelivered": pc.cast(pc.not_equal(delivery["cause"], "first"), pa.int64()),
                   "timeouts": pc.cast(pc.equal(delivery["cause"], "timeout"), pa.int64())}),
         {"delivered": ("minute", "count"), "redelivered": ("redelivered", "sum"), "timeouts": ("timeouts", "sum")}),
    ):
        for row in _aggregate(table, ["minute"], counts).to_pylist():
            counted.setdefault(row.pop("minute"), dict.fromkeys(MINUTE_COUNTS, 0)).update(row)
    latency = "publish_to_first_delivery_ms"
    measured = message.filter(pc.is_valid(message[latency]))
    per_minute = _aggregate(pa.table({"minute": minute(measured["first_delivery_ts_ns"]), "values": measured[latency]}),
                            ["minute"], {"values": ("values", "list")})
    histograms = dict(zip(per_minute["minute"].to_pylist(),
                          per_minute["values"].combine_chunks().to_numpy(zero_copy_only=False), strict=True))
    return [{"minute": number, **counts, "latency": Histogram.of(histograms.get(number, [])).as_arrow()}
            for number, counts in sorted(counted.items())]


@dataclass
class Totals:
    """The buckets' ``TOTALS_SCHEMA`` rows merged, keyed by channel (topic, channel)."""

    deliveries: Counter = field(default_factory=Counter)  # (topic, channel, attempts, outcome) -> deliveries
    delivered: Counter = field(default_factory=Counter)  # channel -> messages delivered at least once
    finished: Counter = field(default_factory=Counter)  # channel -> messages FINed
    latencies: dict[tuple[str, str, str], Histogram] = field(default_factory=dict)  # (latency, topic, channel)
    fin_failed_delivered: set[tuple[str, str, str]] = field(default_factory=set)  # MESSAGE_KEY
    minutes: dict[int, Counter] = field(default_factory=dict)  # minute -> MINUTE_COUNTS
    minute_latencies: dict[int, Histogram] = field(default_factory=dict)  # minute -> publish -> first delivery

    @classmethod
    def of(cls, rows) -> Totals:
        totals = cls()
        for row in rows:
            for d in row["deliveries"]:
                totals.deliveries[(d["topic"], d["channel"], d["attempts"], d["outcome"])] += d["count"]
            for m in row["messages"]:
                totals.delivered[(m["topic"], m["channel"])] += m["delivered"]
                totals.finished[(m["topic"], m["channel"])] += m["finished"]
            for latency in row["latencies"]:
                key = (latency["latency"], latency["topic"], latency["channel"])
                histogram = Histogram.from_row(latency["histogram"])
                totals.latencies[key] = totals.latencies.get(key, EMPTY).merged(histogram)
            totals.fin_failed_delivered.update(tuple(key[name] for name in MESSAGE_KEY)
                                               for key in row["fin_failed_delivered"])
            for minute in row["minutes"]:
                number = minute["minute"]
                totals.minutes.setdefault(number, Counter()).update({name: minute[name] for name in MINUTE_COUNTS})
                histogram = Histogram.from_row(minute["latency"])
                totals.minute_latencies[number] = totals.minute_latencies.get(number, EMPTY).merged(histogram)
        return totals

    def as_row(self) -> pa.RecordBatch:
        """These totals as one row of ``TOTALS_SCHEMA`` (``of`` reads it back): what a watch keeps of the messages
        it has written for good."""
        channels = sorted(self.delivered.keys() | self.finished.keys())
        return pa.RecordBatch.from_pylist([{
            "deliveries": [{"topic": topic, "channel": channel, "attempts": attempts, "outcome": outcome,
                            "count": count} for (topic, channel, attempts, outcome), count in self.deliveries.items()],
            "messages": [{"topic": topic, "channel": channel, "delivered": self.delivered[(topic, channel)],
                          "finished": self.finished[(topic, channel)]} for topic, channel in channels],
            "latencies": [{"topic": topic, "channel": channel, "latency": latency, "histogram": histogram.as_arrow()}
                          for (latency, topic, channel), histogram in self.latencies.items()],
            "fin_failed_delivered": [dict(zip(MESSAGE_KEY, key, strict=True))
                                     for key in sorted(self.fin_failed_delivered)],
            "minutes": [{"minute": number, **{name: counts[name] for name in MINUTE_COUNTS},
                         "latency": self.minute_latencies.get(number, EMPTY).as_arrow()}
                        for number, counts in sorted(self.minutes.items())],
        }], schema=TOTALS_SCHEMA)

    def latency(self, column: str) -> Histogram:
        """``column``'s histogram over every channel."""
        merged = EMPTY
        for (name, _, _), histogram in self.latencies.items():
            if name == column:
                merged = merged.merged(histogram)
        return merged


def deliveries(delivered: pa.Table) -> pa.Table:
    """Every delivery with its cause (first / req / timeout / after_fin) and its outcome (FIN / REQ / timeout /
    abandoned / open), in time order per message; the columns of ``DELIVERIES_SCHEMA`` and the TOUCHes."""
    rows = delivered.sort_by([(name, "ascending") for name in (*MESSAGE_KEY, "ts_ns", "conn_id")])
    if not rows.num_rows:
        empty = pa.array([], pa.string())
        return rows.append_column("cause", empty).append_column("outcome", empty)
    same = same_message(rows)
    follows = np.concatenate((same[1:], [False]))  # another delivery of the message on its channel comes next
    settlement = rows["settlement"].to_numpy(zero_copy_only=False)
    settled = settlement != None  # noqa: E711 (an object array)
    previous = np.concatenate(([None], settlement[:-1]))
    cause = np.where(~same, "first", np.where(previous == "REQ", "req", np.where(previous == "FIN", "after_fin",
                                                                                     "timeout")))
    ts = rows["ts_ns"].to_numpy()
    next_ts = np.concatenate((ts[1:], [0]))
    abandoned = rows["no_cls"].to_numpy(zero_copy_only=False) & (rows["conn_last_ts_ns"].to_numpy() < next_ts)
    outcome = np.where(settled, settlement, np.where(follows, np.where(abandoned, "abandoned", "timeout"), "open"))
    return rows.append_column("cause", pa.array(cause, pa.string())).append_column(
        "outcome", pa.array(outcome, pa.string()))


def same_message(rows: pa.Table) -> np.ndarray:
    """For rows ordered by ``MESSAGE_KEY``: whether each is of the same message on the same channel as the row
    before."""
    same = np.ones(rows.num_rows, bool)
    for name in MESSAGE_KEY:
        keys = codes(rows[name])
        same &= np.concatenate(([False], keys[1:] == keys[:-1]))
    return same


def _aggregate(rows: pa.Table, keys: list[str], aggregates: dict[str, tuple[str, str]]) -> pa.Table:
    """``rows`` grouped by ``keys`` in their order (so that "first" is the first row's): each output column
    ``name: (column, function)``."""
    grouped = rows.group_by(keys, use_threads=False).aggregate(list(aggregates.values()))
    return grouped.rename_columns({f"{column}_{function}": name for name, (column, function) in aggregates.items()})


def messages(delivery: pa.Table, first_published: pa.Table) -> pa.Table:
    """One row per message and channel: publish (``first_published``: ``first_publishes``' rows), deliveries,
    settlement, latencies."""
    outcome = delivery["outcome"]
    counted = delivery.append_column("is_req", pc.cast(pc.equal(outcome, "REQ"), pa.int64())).append_column(
        "is_timeout", pc.cast(pc.is_in(outcome, pa.array(["timeout", "abandoned"])), pa.int64())
    ).append_column("fin_ts_ns", pc.if_else(pc.equal(outcome, "FIN"), delivery["settled_ts_ns"],
                                            pa.scalar(None, pa.int64())))
    # ordered by time within each message (deliveries()), so "first" is the earliest delivery's
    aggregates = {
        "publish_ts_ns": ("msg_ts_ns", "min"),
        "body_hash": ("body_hash", "first"),
        "first_delivery_ts_ns": ("ts_ns", "min"),
        "last_delivery_ts_ns": ("ts_ns", "max"),
        "deliveries": ("ts_ns", "count"),
        "max_attempts": ("attempts", "max"),
        "consumers": ("conn_id", "distinct"),
        "reqs": ("is_req", "sum"),
        "timeouts": ("is_timeout", "sum"),
        "fin_ts_ns": ("fin_ts_ns", "max"),
        "touches": ("touches", "sum"),
    }
    per_message = _aggregate(counted, MESSAGE_KEY, aggregates)
    # Arrow's join carries no list column (consumers): the publish is looked up by row number instead
    keys = per_message.select(["topic", "body_hash"]).append_column("row", pa.array(np.arange(per_message.num_rows)))
    found = keys.join(first_published, ["topic", "body_hash"], join_type="left outer").sort_by("row")
    joined = per_message.append_column("publish_command_ts_ns", found["ts_ns"]).append_column(
        "publish_command", found["command"])
    def milliseconds(end: str, start: str):
        # a broker's timestamp (C-09) may be anything: a difference beyond 2**53 ns (104 days) is kept as the nearest
        # double, not refused
        return pc.divide(pc.cast(pc.subtract(joined[end], joined[start]), pa.float64(), safe=False), NS_PER_MS)

    return joined.append_column(
        "publish_to_first_delivery_ms", milliseconds("first_delivery_ts_ns", "publish_ts_ns")
    ).append_column("last_delivery_to_fin_ms", milliseconds("fin_ts_ns", "last_delivery_ts_ns")).append_column(
        "state", pc.if_else(pc.is_valid(joined["fin_ts_ns"]), "finished", "unfinished")
    ).select(MESSAGES_SCHEMA.names).cast(MESSAGES_SCHEMA)


def first_publishes(published: pa.Table) -> pa.Table:
    """The first accepted publish of each body in each topic (``EXCHANGED_SCHEMAS["published"]``): the command a
    message's row names."""
    return _aggregate(published.sort_by("ts_ns"), ["topic", "body_hash"], {
        "ts_ns": ("ts_ns", "min"), "command": ("command", "first")}).select(
        EXCHANGED_SCHEMAS["published"].names).cast(EXCHANGED_SCHEMAS["published"])
