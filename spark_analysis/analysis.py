"""The Spark job: pcaps -> packets -> (shuffle by flow) -> connections decoded -> tables and summary.

Data flows one way:

    nsqpcap source (one partition per file / byte range, Arrow batches of TCP segment metadata;
                    payload="reference": the bytes stay in the files)
      -> groupBy(flow).applyInArrow: payload bytes read back by offset, reassembly (reassembly.py),
         NSQ decoding (decode.py), per-connection checks (violations.py) -> one events table (Parquet)
      -> tables and summary.json derived from it with DataFrame operations (lifecycle.py, summary.py)

Connections spanning several files meet in the shuffle: the reader keeps no state across files.
Shuffling offsets instead of payloads needs the capture files readable by every executor (local
mode, or a shared file system on a cluster).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

import pyarrow as pa
from pyspark import SparkContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from spark_analysis import jvm_archive
from spark_analysis.datasource import DEFAULT_SPLIT_BYTES, NsqPcapDataSource, expand_paths
from spark_analysis.decode import EVENT_SCHEMA, decode_connection
from spark_analysis.pcapfile import PACKET_DDL, read_payloads
from spark_analysis.reassembly import reassemble
from spark_analysis.worker_python import spark_is_this_installation, worker_python

DEFAULT_NSQ_PORTS = frozenset({4150})
QUICK_JIT = "-XX:TieredStopAtLevel=1"
# C1 alone shrinks the default code cache from 240 MB to 48 MB. A long session (the trace tests run
# dozens of analyses in one JVM) then filled it: "Out of space in CodeCache for adapters", which
# Spark reported as InternalError: no such method MethodHandle.linkToStatic.
FULL_CODE_CACHE = "-XX:ReservedCodeCacheSize=240m"
SEGMENT_COLUMNS = ["ts_ns", "src", "dst", "sport", "dport", "seq", "flags", "payload"]


@contextmanager
def spark_session(
    master: str | None = "local[2]",
    shuffle_partitions: int = 4,
    driver_memory: str = "4g",
    show_progress: bool = True,
    driver_java_options: str | None = None,
) -> Iterator[SparkSession]:
    """A Spark session; ``driver_java_options`` replaces the class archive's options (jvm_archive.py)."""
    builder = SparkSession.builder if master is None else SparkSession.builder.master(master)
    # Only a JVM that pyspark launches here takes start-up options; spark-submit's is already running.
    launching = SparkContext._gateway is None and "PYSPARK_GATEWAY_PORT" not in os.environ
    if launching:
        # An analysis is too short for C2's slower, better code to pay off: C1 alone saved ~10 s of
        # 40 on a 1 GB trace. defaultJavaOptions, so that a user's extraJavaOptions still apply.
        options = jvm_archive.java_options() if driver_java_options is None else driver_java_options
        builder = builder.config("spark.driver.defaultJavaOptions", f"{QUICK_JIT} {FULL_CODE_CACHE} {options}".strip())
    elif driver_java_options is not None:
        raise RuntimeError("driver JVM options need a process whose Spark JVM has not started yet")
    with ExitStack() as stack:
        # Python workers must run this interpreter (the one with pyarrow and this package), not "python3".
        python = os.environ.get("PYSPARK_PYTHON") or sys.executable
        if "PYSPARK_PYTHON" not in os.environ and launching and (master or "").startswith("local"):
            if spark_is_this_installation():
                python = stack.enter_context(worker_python())
        with _environment_variable("PYSPARK_PYTHON", python):
            session = (
                builder.appName("nsq-trace")
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", str(show_progress).lower())
                .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
                .config("spark.sql.adaptive.enabled", "true")
                .config("spark.driver.memory", driver_memory)
                .config("spark.sql.execution.arrow.maxRecordsPerBatch", "20000")
                .config("spark.sql.session.timeZone", "UTC")
                .getOrCreate()
            )
        try:
            session.sparkContext.setLogLevel("ERROR")
            session.dataSource.register(NsqPcapDataSource)
            yield session
        finally:
            session.stop()


@contextmanager
def _environment_variable(name: str, value: str) -> Iterator[None]:
    """``name`` set to ``value`` while a session starts (the session keeps its own copy)."""
    previous = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            del os.environ[name]
        else:
            os.environ[name] = previous


def packets(
    spark: SparkSession, paths: list[str], split_bytes: int = DEFAULT_SPLIT_BYTES, payload: str = "bytes"
) -> DataFrame:
    return (
        spark.read.format("nsqpcap")
        # the schema is fixed: stating it spares a Python worker that would only report it
        .schema(PACKET_DDL)
        .option("splitBytes", str(split_bytes))
        .option("payload", payload)
        .load(paths if len(paths) > 1 else paths[0])
    )


def events(packet_frame: DataFrame, nsq_ports: frozenset[int] = DEFAULT_NSQ_PORTS) -> DataFrame:
    """Shuffle segments by flow and decode every connection; walker errors become error events."""
    ports = frozenset(nsq_ports)

    def decode_flow(table: pa.Table) -> pa.Table:
        if table.column("flow")[0].as_py() is None:
            return _walker_errors(table)
        columns = [table.column(name).to_pylist() for name in SEGMENT_COLUMNS]
        if table.column("payload").null_count:
            columns[-1] = read_payloads(
                *(table.column(name).to_pylist() for name in ("file", "payload_offset", "payload_length"))
            )
        connections = reassemble(table.column("flow")[0].as_py(), list(zip(*columns, strict=False)), ports)
        return pa.concat_tables([decode_connection(conn, ports) for conn in connections])

    return packet_frame.groupBy("flow").applyInArrow(decode_flow, from_arrow_schema(EVENT_SCHEMA))


def _walker_errors(table: pa.Table) -> pa.Table:
    count = table.num_rows
    files, offsets = table.column("file").to_pylist(), table.column("offset").to_pylist()
    columns = {name: [None] * count for name in EVENT_SCHEMA.names}
    columns.update(
        ts_ns=table.column("ts_ns").to_pylist(),
        direction=["file"] * count,
        kind=["error"] * count,
        name=table.column("error").to_pylist(),
        stream_offset=offsets,
        detail=[f"{f} @{o}: {d}" for f, o, d in zip(files, offsets, table.column("detail").to_pylist(), strict=False)],
    )
    return pa.Table.from_pydict(columns, schema=EVENT_SCHEMA)


def run_analysis(
    spark: SparkSession,
    paths: list[str],
    out_dir: str,
    nsq_ports=DEFAULT_NSQ_PORTS,
    split_bytes: int = DEFAULT_SPLIT_BYTES,
    report: bool = True,
    step: Callable[[str], None] = lambda message: None,
) -> dict:
    """Decode ``paths`` into ``out_dir``: tables/*.parquet, summary.json and (optionally) report.html."""
    from spark_analysis import lifecycle, summary

    os.makedirs(out_dir, exist_ok=True)
    tables_dir = os.path.join(out_dir, "tables")
    started = time.monotonic()
    step("decoding packets (read, shuffle by flow, reassemble, decode)")
    # Payloads stay in the files until the decoder needs them: only segment metadata is shuffled.
    events(packets(spark, paths, split_bytes, payload="reference"), nsq_ports).write.mode("overwrite").parquet(
        os.path.join(tables_dir, "events")
    )
    decoded = spark.read.schema(from_arrow_schema(EVENT_SCHEMA)).parquet(os.path.join(tables_dir, "events"))
    step("deriving tables")

    def materialise(name: str, frame: DataFrame) -> DataFrame:
        frame.write.mode("overwrite").parquet(os.path.join(tables_dir, name))
        # the known schema spares Spark a job that would read the Parquet footers to infer it
        return spark.read.schema(frame.schema).parquet(os.path.join(tables_dir, name))

    tables = lifecycle.tables(decoded, materialise)
    step("summarising")
    result = summary.summarise(decoded, tables)
    result["input"] = {
        "files": paths,
        "bytes": sum(os.path.getsize(p) for p in expand_paths(paths)),
        "analysis_seconds": round(time.monotonic() - started, 3),
    }
    with open(os.path.join(out_dir, "summary.json"), "w") as handle:
        json.dump(result, handle, indent=1, sort_keys=False)
    if report:
        from spark_analysis import report as html_report

        step("writing report")
        html_report.write(tables, result, out_dir)
    return result
