"""The tables that one connection's events make on their own, written by the task that decoded the connection.

They are projections of the events (commands, frames, publishes, ...) and per-connection counts (activity): no
other connection changes a row of them, so they are cut from each connection's Arrow table with pyarrow and
written as Parquet where the events are, and no Spark job reads the events back to make them. The tables that
join connections (deliveries, messages, connections) are derive/lifecycle.py's.

A task writes one file per table (``<table>/<part>.parquet``, ``TableWriter``) in row groups of ``ROW_GROUP_ROWS``, so
that a trace of many small connections does not become many small files. The file's name is the task's
partition: a retried task overwrites its failed attempt's file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from spark_analysis.decode.events import EVENT_SCHEMA, kind_mask
from spark_analysis.decode.kinds import Direction, Kind
from spark_analysis.derive.settlements import DELIVERED_SCHEMA
from spark_analysis.judge.monitoring import VIOLATIONS, VIOLATIONS_SCHEMA
from spark_analysis.read.storage import LOCAL, Storage, join

NS_PER_MS = 1_000_000
ROW_GROUP_ROWS = 1 << 18
# Strings unique to a row: dictionary-encoding them is Parquet's default, and a quarter of a table's write time.
_UNIQUE_STRINGS = frozenset({"msg_id", "text", "arguments", "explanation"})
Projection = Callable[[pa.Table], pa.Table]


def _columns(events: pa.Table, mask, **columns) -> pa.Table:
    """The rows of ``mask`` with ``columns``: an event column's name (kept or renamed) or a function of the rows."""
    rows = _Filtered(events, mask)
    return pa.table({name: rows[source] if isinstance(source, str) else source(rows)
                     for name, source in columns.items()})


class _Filtered:
    """The rows of ``mask``, column by column as they are read: filtering all of an event table's columns, the
    connection's struct among them, was most of a projection's work."""

    def __init__(self, events: pa.Table, mask):
        self.events, self.mask = events, mask
        self._columns: dict[str, pa.ChunkedArray] = {}

    def __getitem__(self, name: str) -> pa.ChunkedArray:
        if name not in self._columns:
            self._columns[name] = pc.filter(self.events[name], self.mask)
        return self._columns[name]


def _same(*names: str) -> dict[str, str]:
    return {name: name for name in names}


def commands(events: pa.Table) -> pa.Table:
    return _columns(events, kind_mask(events, Kind.COMMAND),
                    **_same("conn_id", "ts_ns", "name", "topic", "channel", "msg_id", "rdy", "delay_ms",
                            "message_count", "status", "code", "arguments", "identify"))


def frames(events: pa.Table) -> pa.Table:
    return _columns(events, kind_mask(events, Kind.FRAME),
                    **_same("conn_id", "ts_ns", "name", "topic", "channel", "msg_id", "attempts", "msg_ts_ns",
                            "body_len", "code", "text"))


def publishes(events: pa.Table) -> pa.Table:
    return _columns(events, kind_mask(events, Kind.PUBLISH), **_same("conn_id", "ts_ns"), command="name",
                    **_same("topic", "body_len", "body_hash"), defer_ms="delay_ms", status="status")


def errors(events: pa.Table) -> pa.Table:
    """Capture/decode problems (named, counted) and the error frames nsqd sent."""

    def source(rows):
        from_file = pc.if_else(pc.equal(rows["direction"], Direction.FILE), "capture", "decode")
        return pc.if_else(pc.equal(rows["kind"], Kind.FRAME), "nsqd", from_file)

    def explanation(rows):
        return pc.if_else(pc.equal(rows["kind"], Kind.FRAME), rows["text"], rows["explanation"])

    return _columns(events, pc.or_kleene(kind_mask(events, Kind.ERROR), kind_mask(events, Kind.FRAME, "error")),
                    **_same("conn_id", "ts_ns"), source=source,
                    error=lambda rows: pc.if_else(pc.equal(rows["kind"], Kind.FRAME), rows["code"], rows["name"]),
                    **_same("topic", "channel", "msg_id"), explanation=explanation,
                    **_same("byte_count", "stream_offset"))


def heartbeats(events: pa.Table) -> pa.Table:
    return _columns(events, kind_mask(events, Kind.FRAME, "heartbeat"),
                    **_same("conn_id", "ts_ns", "topic", "channel"),
                    gap_ms=lambda rows: pc.divide(pc.cast(rows["heartbeat_interval_ns"], pa.float64()), NS_PER_MS))


def flow_control(events: pa.Table) -> pa.Table:
    """RDY as the client set it, and in flight per second (derive/in_flight.py counts it)."""

    return _columns(events, pc.or_kleene(kind_mask(events, Kind.COMMAND, "RDY"), kind_mask(events, Kind.IN_FLIGHT)),
                    **_same("conn_id", "ts_ns", "topic", "channel", "rdy", "in_flight"))


def registrations(events: pa.Table) -> pa.Table:
    """What a producer told nsqlookupd (R-03, R-04, R-05, R-06, R-07, L-TCP-12, L-TCP-13, L-TCP-14, L-TCP-15): each
    REGISTER and UNREGISTER of a V1 connection with its producer and nsqlookupd's answer (``project`` gives it only a
    V1 connection's events)."""
    return _columns(events, kind_mask(events, Kind.COMMAND, "REGISTER", "UNREGISTER"), **_same("conn_id", "ts_ns"),
                    producer="producer", action="name",
                    **_same("topic", "channel", "status", "code"))


ACTIVITY_KEYS = ["conn_id", "kind", "name", "status", "code", "topic", "req_delay0"]


def activity(events: pa.Table) -> pa.Table:
    """How many events of each kind, name, status and error code, per connection and topic: what report/summary.py
    counts. ``req_delay0``: a REQ with delay 0 (D-20's immediate requeue)."""
    counted = [Kind.COMMAND, Kind.FRAME, Kind.PUBLISH, Kind.ERROR]
    rows = events.select([*ACTIVITY_KEYS[:-1], "delay_ms"]).filter(pc.is_in(events["kind"], pa.array(counted)))
    is_req = pc.equal(rows["name"], "REQ")
    rows = rows.append_column("req_delay0", pc.if_else(is_req, pc.equal(rows["delay_ms"], 0),
                                                       pa.scalar(None, pa.bool_())))
    counted = rows.group_by(ACTIVITY_KEYS, use_threads=False).aggregate([([], "count_all")])
    return counted.select([*ACTIVITY_KEYS, "count_all"]).rename_columns([*ACTIVITY_KEYS, "count"])


PROJECTIONS: dict[str, Projection] = {
    "commands": commands,
    "frames": frames,
    "publishes": publishes,
    "errors": errors,
    "heartbeats": heartbeats,
    "flow_control": flow_control,
    "registrations": registrations,
    "activity": activity,
}
SCHEMAS: dict[str, pa.Schema] = {
    "events": EVENT_SCHEMA,
    **{name: project(EVENT_SCHEMA.empty_table()).schema for name, project in PROJECTIONS.items()},
    "delivered": DELIVERED_SCHEMA,
    VIOLATIONS: VIOLATIONS_SCHEMA,  # the monitors' findings: written by the judging (judge/job.py), not by ``project``
}


def project(events: pa.Table, delivered: pa.Table, lookupd: bool) -> Iterator[tuple[str, pa.Table]]:
    """A window of a connection's tables: its events, their projections, and the deliveries it settled. Only an
    nsqlookupd connection (``lookupd``) registers anything: a V2 client's unknown verb may be REGISTER too."""
    yield "events", events
    for name, projection in PROJECTIONS.items():
        yield name, projection(events if lookupd or name != "registrations" else events.slice(0, 0))
    yield "delivered", delivered


def prepare_directories(tables_dir: str, schemas: dict[str, pa.Schema], storage: Storage = LOCAL) -> None:
    """Empty directories for the tasks' files (a table no task writes to reads as empty with its schema)."""
    for name in schemas:
        storage.reset_directory(join(tables_dir, name))


def parquet_writer(path: str, schema: pa.Schema, storage: Storage = LOCAL) -> pq.ParquetWriter:
    """A Parquet file whose label columns (kinds, names, topics, connections) are dictionary-encoded, and no other;
    its row groups carry the time range of their rows (what a reader skips them by), no other statistics (each
    column's cost a fifth of the write time, and a row group mixes every kind of row)."""
    labels = [field.name for field in schema if field.type == pa.string() and field.name not in _UNIQUE_STRINGS]
    statistics = ["ts_ns"] if "ts_ns" in schema.names else False
    filesystem, located = storage.locate(path)
    return pq.ParquetWriter(located, schema, filesystem=filesystem, use_dictionary=labels,
                            write_statistics=statistics)


class TableWriter:
    """One task's file of each of the tables of ``schemas``, each in ``tables_dir/<table>/``: ``add`` buffers rows,
    ``close`` writes what is still buffered."""

    def __init__(self, tables_dir: str, part: str, schemas: dict[str, pa.Schema], storage: Storage = LOCAL):
        self.schemas, self.storage = schemas, storage
        self.paths = {name: join(tables_dir, name, f"{part}.parquet") for name in schemas}
        self._writers: dict[str, pq.ParquetWriter] = {}
        self._buffered: dict[str, list[pa.Table]] = {name: [] for name in schemas}
        self._buffered_rows = dict.fromkeys(schemas, 0)

    def add(self, name: str, table: pa.Table) -> None:
        if not table.num_rows:
            return
        self._buffered[name].append(table)
        self._buffered_rows[name] += table.num_rows
        if self._buffered_rows[name] >= ROW_GROUP_ROWS:
            self._flush(name)

    def _flush(self, name: str) -> None:
        if not self._buffered[name]:
            return
        if name not in self._writers:
            self._writers[name] = parquet_writer(self.paths[name], self.schemas[name], self.storage)
        rows = pa.concat_tables(self._buffered[name]).cast(self.schemas[name])
        self._writers[name].write_table(rows, row_group_size=ROW_GROUP_ROWS)
        self._buffered[name], self._buffered_rows[name] = [], 0

    def close(self) -> None:
        for name in self.schemas:
            self._flush(name)
        for writer in self._writers.values():
            writer.close()

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
