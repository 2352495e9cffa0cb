"""The tables that join connections: message lifecycles above all, and the connections' roles.

A message on a channel is identified by (topic, channel, msg_id): every channel gets its own copy
with the same ID (C-11). Its lifecycle is its deliveries in time order, each settled on its own
connection or not (connection_tables.delivered). A delivery that nothing settled and that another
delivery follows timed out (D-11); if its connection had already gone without CLS, it was abandoned
by that disconnect (D-15).

One shuffle: a message's publish and every delivery of it, on any channel, carry the same body, so
they meet in the partition of (topic, body_hash), the pair that joins a publish with its deliveries.
Each task orders its deliveries and writes `deliveries` and `messages` with Arrow compute and numpy,
in bulk, as the decoding tasks write theirs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

from spark_analysis.connection_tables import DELIVERED_SCHEMA, DELIVERY_FIELDS, TableWriter, codes, prepare_directories

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
ROWS_PER_TASK = 400_000  # ~300 MB of a Python worker's memory while it orders and aggregates them
LIFECYCLE_SCHEMAS = {"deliveries": DELIVERIES_SCHEMA, "messages": MESSAGES_SCHEMA}


def tables(
    written: dict[str, DataFrame], tables_dir: str, materialise: Callable[[str, DataFrame], DataFrame], row_count: int
) -> dict[str, DataFrame]:
    """The tables that join connections, from the per-connection ones (``row_count``: their deliveries and
    publishes); ``materialise(name, frame)`` stores a Spark table and returns it read back."""
    prepare_directories(tables_dir, LIFECYCLE_SCHEMAS)
    published = written["publishes"].where("status = 'ok'").select("topic", "body_hash", "ts_ns", "command")
    # how each delivery's connection ended, known once it has: whether it sent CLS (D-15), and when
    ends = written["events"].where("kind = 'connection'").select(
        "conn_id", (F.col("connection.cls") == 0).alias("no_cls"),
        F.col("connection.last_ts_ns").alias("conn_last_ts_ns"))
    delivered = written["delivered"].join(F.broadcast(ends), "conn_id", "left")
    rows = delivered.unionByName(published, allowMissingColumns=True)
    rows_schema = to_arrow_schema(rows.schema)

    def lifecycles(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        table = pa.Table.from_batches(batches, schema=rows_schema)
        is_publish = pc.is_valid(table["command"])
        delivery = deliveries(table.filter(pc.invert(is_publish)))
        with TableWriter(tables_dir, f"part-{TaskContext.get().partitionId():05d}", LIFECYCLE_SCHEMAS) as writer:
            writer.add("deliveries", delivery.select(DELIVERIES_SCHEMA.names))
            writer.add("messages", messages(delivery, table.filter(is_publish)))
        yield pa.RecordBatch.from_pydict({"deliveries": pa.array([delivery.num_rows], pa.int64())})

    spark = rows.sparkSession
    # a number of tasks, so that adaptive execution keeps them apart: their input is small for the work; and
    # enough of them that a task's rows, all in one Arrow table, stay few whatever the trace's size
    tasks = max(int(spark.conf.get("spark.sql.shuffle.partitions")), -(-row_count // ROWS_PER_TASK))
    with ThreadPoolExecutor(1) as pool:  # a small job beside the big one, to fill the cores' idle moments
        stored = pool.submit(materialise, "connections", connections(written["events"]))
        rows.repartition(tasks, "topic", "body_hash").mapInArrow(lifecycles, "deliveries BIGINT").collect()
        read = {name: spark.read.schema(from_arrow_schema(schema)).parquet(os.path.join(tables_dir, name))
                for name, schema in LIFECYCLE_SCHEMAS.items()}
        return {**read, "connections": stored.result()}


def deliveries(delivered: pa.Table) -> pa.Table:
    """Every delivery with its cause (first / req / timeout / after_fin) and its outcome (FIN / REQ / timeout /
    abandoned / open), in time order per message; the columns of ``DELIVERIES_SCHEMA`` and the TOUCHes."""
    rows = delivered.sort_by([(name, "ascending") for name in (*MESSAGE_KEY, "ts_ns", "conn_id")])
    if not rows.num_rows:
        empty = pa.array([], pa.string())
        return rows.append_column("cause", empty).append_column("outcome", empty)
    same = np.ones(rows.num_rows, bool)  # the same message on the same channel as the row before
    for name in MESSAGE_KEY:
        keys = codes(rows[name])
        same &= np.concatenate(([False], keys[1:] == keys[:-1]))
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


def _aggregate(rows: pa.Table, keys: list[str], aggregates: dict[str, tuple[str, str]]) -> pa.Table:
    """``rows`` grouped by ``keys`` in their order (so that "first" is the first row's): each output column
    ``name: (column, function)``."""
    grouped = rows.group_by(keys, use_threads=False).aggregate(list(aggregates.values()))
    return grouped.rename_columns({f"{column}_{function}": name for name, (column, function) in aggregates.items()})


def messages(delivery: pa.Table, published: pa.Table) -> pa.Table:
    """One row per message and channel: publish, deliveries, settlement, latencies."""
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
    first_publish = _aggregate(published.sort_by("ts_ns"), ["topic", "body_hash"], {
        "publish_command_ts_ns": ("ts_ns", "min"), "publish_command": ("command", "first")})
    # Arrow's join carries no list column (consumers): the publish is looked up by row number instead
    keys = per_message.select(["topic", "body_hash"]).append_column("row", pa.array(np.arange(per_message.num_rows)))
    found = keys.join(first_publish, ["topic", "body_hash"], join_type="left outer").sort_by("row")
    joined = per_message.append_column("publish_command_ts_ns", found["publish_command_ts_ns"]).append_column(
        "publish_command", found["publish_command"])
    def milliseconds(end: str, start: str):
        return pc.divide(pc.cast(pc.subtract(joined[end], joined[start]), pa.float64()), NS_PER_MS)

    return joined.append_column(
        "publish_to_first_delivery_ms", milliseconds("first_delivery_ts_ns", "publish_ts_ns")
    ).append_column("last_delivery_to_fin_ms", milliseconds("fin_ts_ns", "last_delivery_ts_ns")).append_column(
        "state", pc.if_else(pc.is_valid(joined["fin_ts_ns"]), "finished", "unfinished")
    ).select(MESSAGES_SCHEMA.names).cast(MESSAGES_SCHEMA)


def connections(events: DataFrame) -> DataFrame:
    """One row per TCP connection with its role, subscription and how it ended."""
    rows = (
        events.where("kind = 'connection'")
        .select(
            "conn_id",
            "client",
            "server",
            "client_port",
            "server_port",
            F.col("ts_ns").alias("first_ts_ns"),
            (F.col("name") == "nsq").alias("is_nsq"),
            (F.col("name") == "lookupd").alias("is_lookupd"),
            F.col("status").alias("close"),
            F.col("value").alias("packets"),
            "connection.*",
        )
    )
    # A server port counts as nsqd's TCP port when any connection to it spoke NSQ (the magic, C-01).
    return rows.withColumn("to_nsqd_port", F.max("is_nsq").over(Window.partitionBy("server"))).withColumn(
        "role",
        F.when(F.col("channel").isNotNull(), "consumer")
        .when(F.col("publish_commands") > 0, "producer")
        .when(F.col("is_nsq"), "nsq-other")
        .when(F.col("is_lookupd"), "lookupd-peer")
        .otherwise("not-nsq"),
    )
