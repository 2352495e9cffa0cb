"""Tables derived from the decoded events with DataFrame operations, message lifecycles above all.

A message on a channel is identified by (topic, channel, msg_id): every channel gets its own copy
with the same ID (C-11). Its lifecycle is the time-ordered union of its deliveries and the
successful FIN/REQ commands that settle them. A delivery followed directly by another delivery
was not settled, so it timed out (D-11); if its connection had already gone without CLS, it was
abandoned by that disconnect (D-15).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

MESSAGE_KEY = ["topic", "channel", "msg_id"]
DELIVERY_COLUMNS = [*MESSAGE_KEY, "conn_id", "ts_ns", "attempts", "msg_ts_ns", "body_len", "body_hash"]
NS_PER_MS = 1_000_000
# Spark jobs in flight at once for independent tables; enough to hide per-job latency on a few cores.
CONCURRENT_JOBS = 4


def tables(events: DataFrame, materialise: Callable[[str, DataFrame], DataFrame]) -> dict[str, DataFrame]:
    """All tables; ``materialise(name, frame)`` stores one and returns it read back."""
    projections = {
        "commands": events.where("kind = 'command'").select(
            "conn_id", "ts_ns", "name", "topic", "channel", "msg_id", "value", "status", "code", "detail"
        ),
        "frames": events.where("kind = 'frame'").select(
            "conn_id",
            "ts_ns",
            "name",
            "topic",
            "channel",
            "msg_id",
            "attempts",
            "msg_ts_ns",
            "body_len",
            "code",
            "detail",
        ),
        "publishes": events.where("kind = 'publish'").select(
            "conn_id",
            "ts_ns",
            F.col("name").alias("command"),
            "topic",
            "body_len",
            "body_hash",
            F.col("value").alias("defer_ms"),
            "status",
        ),
        "errors": errors(events),
        "heartbeats": heartbeats(events),
        "flow_control": events.where("(kind = 'command' AND name = 'RDY') OR kind = 'inflight'").select(
            "conn_id",
            "ts_ns",
            "topic",
            "channel",
            F.when(F.col("kind") == "command", F.col("value")).alias("rdy"),
            F.when(F.col("kind") == "inflight", F.col("value")).alias("in_flight"),
        ),
        "violations": events.where("kind = 'violation'").select(
            "conn_id", "ts_ns", F.col("name").alias("requirement"), "topic", "channel", "detail"
        ),
    }
    # Both cores stay busy through these jobs; running them side by side keeps them so while one job
    # waits on another's stage. Only messages reads another table: the deliveries it summarises.
    independent = {**projections, "connections": connections(events), "registrations": registrations(events)}
    with ThreadPoolExecutor(CONCURRENT_JOBS) as pool:
        stored = {name: pool.submit(materialise, name, frame) for name, frame in independent.items()}
        delivery = materialise("deliveries", deliveries(events))
        stored["messages"] = pool.submit(materialise, "messages", messages(events, delivery))
        return {"deliveries": delivery, **{name: future.result() for name, future in stored.items()}}


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


def registrations(events: DataFrame) -> DataFrame:
    """What producers told nsqlookupd (R-03..R-07, L-TCP-12..15): each REGISTER and UNREGISTER of a V1 connection
    with its producer and nsqlookupd's answer."""
    lookupd_connections = events.where("kind = 'connection' AND name = 'lookupd'").select("conn_id")
    return (
        events.where("kind = 'command' AND name IN ('REGISTER', 'UNREGISTER')")
        .join(lookupd_connections, "conn_id", "left_semi")
        .select(
            "conn_id",
            "ts_ns",
            F.col("detail").alias("producer"),
            F.col("name").alias("action"),
            "topic",
            "channel",
            "status",
            "code",
        )
    )


def deliveries(events: DataFrame) -> DataFrame:
    """Every delivery with its cause (first / req / timeout) and its outcome (FIN / REQ / timeout / open)."""
    delivered = events.where("kind = 'frame' AND name = 'message'").select(
        *DELIVERY_COLUMNS,
        F.lit("deliver").alias("event"),
        F.lit(1).alias("rank"),
    )
    settled = events.where("kind = 'command' AND name IN ('FIN', 'REQ') AND status = 'ok'").select(
        *MESSAGE_KEY,
        "conn_id",
        "ts_ns",
        F.lit(None).cast("int").alias("attempts"),
        F.lit(None).cast("bigint").alias("msg_ts_ns"),
        F.lit(None).cast("bigint").alias("body_len"),
        F.lit(None).cast("bigint").alias("body_hash"),
        F.col("name").alias("event"),
        F.lit(0).alias("rank"),
    )
    # At equal capture times a settlement precedes the delivery it made room for.
    window = Window.partitionBy(*MESSAGE_KEY).orderBy("ts_ns", "rank", "conn_id")
    ordered = delivered.unionByName(settled).select(
        "*",
        F.lag("event").over(window).alias("previous_event"),
        F.lead("event").over(window).alias("next_event"),
        F.lead("ts_ns").over(window).alias("next_ts_ns"),
    )
    ended = (
        events.where("kind = 'connection'")
        .select(
            "conn_id",
            (F.col("connection.cls") == 0).alias("no_cls"),
            F.col("connection.last_ts_ns").alias("conn_last_ts_ns"),
        )
    )
    return (
        ordered.where("event = 'deliver'")
        .join(ended, "conn_id", "left")
        .select(
            *DELIVERY_COLUMNS,
            F.when(F.col("previous_event").isNull(), "first")
            .when(F.col("previous_event") == "REQ", "req")
            .when(F.col("previous_event") == "deliver", "timeout")
            .otherwise("after_fin")
            .alias("cause"),
            F.when(
                F.col("next_event") == "deliver",
                F.when(F.col("no_cls") & (F.col("conn_last_ts_ns") < F.col("next_ts_ns")), "abandoned").otherwise(
                    "timeout"
                ),
            )
            .otherwise(F.coalesce(F.col("next_event"), F.lit("open")))
            .alias("outcome"),
            F.when(F.col("next_event").isin("FIN", "REQ"), F.col("next_ts_ns")).alias("settled_ts_ns"),
        )
    )


def messages(events: DataFrame, delivery: DataFrame) -> DataFrame:
    """One row per message and channel: publish, deliveries, settlement, latencies."""
    touches = (
        events.where("kind = 'command' AND name = 'TOUCH' AND status = 'ok'")
        .groupBy(*MESSAGE_KEY)
        .agg(F.count("*").alias("touches"))
    )
    published = (
        events.where("kind = 'publish' AND status = 'ok'")
        .groupBy("topic", "body_hash")
        .agg(F.min("ts_ns").alias("publish_command_ts_ns"), F.first("name").alias("publish_command"))
    )
    per_message = delivery.groupBy(*MESSAGE_KEY).agg(
        F.min("msg_ts_ns").alias("publish_ts_ns"),
        F.min_by("body_hash", "ts_ns").alias("body_hash"),
        F.min("ts_ns").alias("first_delivery_ts_ns"),
        F.max("ts_ns").alias("last_delivery_ts_ns"),
        F.count("*").alias("deliveries"),
        F.max("attempts").alias("max_attempts"),
        F.collect_set("conn_id").alias("consumers"),
        F.sum(F.when(F.col("outcome") == "REQ", 1).otherwise(0)).alias("reqs"),
        F.sum(F.when(F.col("outcome").isin("timeout", "abandoned"), 1).otherwise(0)).alias("timeouts"),
        F.max(F.when(F.col("outcome") == "FIN", F.col("settled_ts_ns"))).alias("fin_ts_ns"),
    )
    return (
        per_message.join(touches, MESSAGE_KEY, "left")
        .join(published, ["topic", "body_hash"], "left")
        .withColumn("touches", F.coalesce("touches", F.lit(0)))
        .withColumn(
            "publish_to_first_delivery_ms",
            (F.col("first_delivery_ts_ns") - F.col("publish_ts_ns")) / NS_PER_MS,
        )
        .withColumn("last_delivery_to_fin_ms", (F.col("fin_ts_ns") - F.col("last_delivery_ts_ns")) / NS_PER_MS)
        .withColumn("state", F.when(F.col("fin_ts_ns").isNotNull(), "finished").otherwise("unfinished"))
    )


def errors(events: DataFrame) -> DataFrame:
    """Capture/decode problems (named, counted) and the error frames nsqd sent."""
    return events.where("kind = 'error' OR (kind = 'frame' AND name = 'error')").select(
        "conn_id",
        "ts_ns",
        F.when(F.col("kind") == "frame", "nsqd")
        .when(F.col("direction") == "file", "capture")
        .otherwise("decode")
        .alias("source"),
        F.when(F.col("kind") == "frame", F.col("code")).otherwise(F.col("name")).alias("error"),
        "topic",
        "channel",
        "msg_id",
        "detail",
        "value",
        "stream_offset",
    )


def heartbeats(events: DataFrame) -> DataFrame:
    return events.where("kind = 'frame' AND name = 'heartbeat'").select(
        "conn_id", "ts_ns", "topic", "channel", (F.col("value") / NS_PER_MS).alias("gap_ms")
    )
