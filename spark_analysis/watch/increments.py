"""``nsq-trace watch``'s decoding: a micro-batch decodes only its new capture files, the connections that files
before them left open carried over, pickled.

    OUT/watch/state/<batch>/part-NNNNN.pickle  each open flow's FlowDecoder (analysis.py) after the batch: its
                                               reassembly (bytes not handed out yet, holes), its decoder (the held
                                               window's rows, the walks, pairing, checks, settlements and counts)
    OUT/watch/state/<batch>/lifecycles/        the open messages carried (watch/lifecycle_increments.py)
    OUT/watch/state/<batch>/index.json         flow -> (file, offset, length, payload bytes of the batch), the
                                               latest capture time and the batch carried on from: written last
                                               (``commit``, after the lifecycles' state), it makes the batch's
                                               state whole
    OUT/tables/<table>/b<batch>-part-NNNNN.parquet       the rows that became final in the batch: appended
    OUT/tables/<table>/open-b<batch>-part-NNNNN.parquet  the open connections' rest, as if they ended with the
                                                         batch's files: replaced by the next batch's
    OUT/watch/exchange/                        the lifecycles' exchange (derive/lifecycle.py), in the same two
                                               kinds of part

A micro-batch's tasks get its new files' segments and one stand-in row per carried flow, shuffled by flow
(analysis.placed_by_size: a carried flow weighs its bytes of the batch before, a new one is hashed); each flow's
FlowDecoder is unpickled from the batch before (or new), fed its new segments and cut at their end (what they make
final is appended: all but the connection's last 100 ms, ``CARRIED_NS``), pickled, then ended: what ending it adds
is the open part. Every batch's final rows with the last batch's open part are the batch analysis of all the files
so far. A flow whose connection closed (RST, or a FIN each way) ``CLOSED_HORIZON_NS`` of capture time before the
latest capture time of the batches before is ended for good and carried no more: a segment of it after that starts
it anew (the one way a watch can differ from the batch analysis).

A state is carried on from only by the code that wrote it (``state_format``, in its index): another version's
pickles may not read back as they were written, or at all.

Replays: batch N reads the state of the last whole batch before it, after deleting whatever a batch >= N left (a
stop cut it short). A batch's state is deleted only in a later batch's run, when Spark has committed the batch
after it.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import sys
from collections.abc import Callable, Iterable, Iterator
from functools import cache
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession
from pyspark.sql.pandas.types import to_arrow_schema

from spark_analysis.analysis import (
    DEFAULT_NSQ_PORTS,
    DEFAULT_WINDOW_BYTES,
    FOR_THE_JUDGE,
    FlowDecoder,
    decode_flow,
    flow_runs,
    packets,
    payload_kind,
    placed_by_size,
)
from spark_analysis.derive import lifecycle
from spark_analysis.derive.connection_tables import SCHEMAS, TableWriter
from spark_analysis.memory import return_freed_memory, without_cycle_collection
from spark_analysis.read.datasource import DEFAULT_SPLIT_BYTES
from spark_analysis.read.storage import LOCAL, Storage, join

NS_PER_S = 1_000_000_000
# TCP's TIME_WAIT lasts 2 MSL (60-240 s): a flow closed that long before gets no more segments
CLOSED_HORIZON_NS = 120 * NS_PER_S
# Where a capture file ends, each connection's last 100 ms are carried as decoded rows (a window: answers to their
# commands may come in the next file), what came before is final. An answer more than 100 ms after its command,
# with a file's end between them, is a horizon, as an answer more than a window later is in ``analyze``.
CARRIED_NS = NS_PER_S // 10
# The exchange's buckets: fixed, as every batch's rows of a message must meet in one bucket
WATCH_BUCKETS = 8
STAND_IN = "carried_flow"  # the error column of a row that stands for a carried flow
OPEN = "open-"


def part_prefix(batch_id: int) -> str:
    """How the names of batch ``batch_id``'s final parts start (``OPEN`` before it: its open parts')."""
    return f"b{batch_id:010d}-"


def part_name(batch_id: int, task: int) -> str:
    return f"{part_prefix(batch_id)}part-{task:05d}"


def batch_of(file_name: str) -> int | None:
    """The batch whose part a file is (final or open); None: a derived table's file, rewritten by every batch."""
    name = file_name.removeprefix(OPEN)
    return int(name[1:11]) if name.startswith("b") and name[1:11].isdigit() else None


@cache
def state_format() -> str:
    """The code a watch's state is pickled by: a digest of the source of the packages whose objects it holds."""
    import nsq_protocol
    import spark_analysis

    digest = hashlib.blake2s(digest_size=8)
    for package in (nsq_protocol, spark_analysis):
        root = Path(package.__file__).parent
        for path in sorted(root.rglob("*.py")):
            digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


class Increments:
    """Each micro-batch's new files decoded into ``out_dir``'s tables with the flows carried from the batch before."""

    def __init__(self, spark: SparkSession, out_dir: str, storage: Storage = LOCAL,
                 nsq_ports: frozenset[int] = DEFAULT_NSQ_PORTS, split_bytes: int = DEFAULT_SPLIT_BYTES,
                 window_bytes: int = DEFAULT_WINDOW_BYTES, http_ports: frozenset[int] = frozenset(),
                 lookupd_http_ports: frozenset[int] = frozenset()):
        self.spark, self.storage = spark, storage
        self.ports, self.split_bytes, self.window_bytes = frozenset(nsq_ports), split_bytes, window_bytes
        self.http_ports, self.lookupd_http_ports = frozenset(http_ports), frozenset(lookupd_http_ports)
        self.tables_dir = join(out_dir, "tables")
        self.exchange_dir = join(out_dir, "watch", "exchange")
        self.state_dir = join(out_dir, "watch", "state")
        self.table_names = [*SCHEMAS, *lifecycle.LIFECYCLE_SCHEMAS]
        for directory in (self.state_dir, *(join(self.exchange_dir, name) for name in lifecycle.UNBUCKETED),
                          *(join(self.tables_dir, name) for name in self.table_names)):
            storage.make_directory(directory)

    def decode(self, batch_id: int, files: list[str]) -> dict:
        """Batch ``batch_id``'s ``files`` decoded. Returns its state's index (``commit`` writes it): the flows carried
        to the next batch, the latest capture time, the batch carried on from."""
        previous = self._last_whole_state(batch_id)
        # what a stop left of this batch or a later one, and the states a committed batch has superseded
        self._forget(lambda name, batch: batch >= batch_id,
                     lambda batch: batch >= batch_id or (previous is not None and batch < previous))
        carried = self._index(previous) if previous is not None else {"flows": {}, "last_ts_ns": 0}
        frame = packets(self.spark, files, self.split_bytes, payload_kind(files), self.storage)
        if carried["flows"]:
            frame = frame.unionByName(self._stand_ins(frame, carried["flows"]))
        # Read once, in the decoding job's shuffle: a carried flow is placed by the bytes it had in the batch before
        # (a long connection's rate changes slowly), a new one hashed; sizing this batch's flows first would be a
        # job of its own, a second of every micro-batch's.
        placed = placed_by_size(frame, {flow: fed for flow, (_, _, _, fed) in carried["flows"].items()})
        task = _DecodeTask(self, batch_id, carried)
        indexes = placed.sortWithinPartitions("flow", "ts_ns", "file", "offset").mapInArrow(
            task, "state STRING").collect()
        index = {"flows": {}, "last_ts_ns": carried["last_ts_ns"], "previous": previous}
        for row in indexes:
            part = json.loads(row.state)
            index["flows"].update(part["flows"])
            index["last_ts_ns"] = max(index["last_ts_ns"], part["last_ts_ns"])
        self._forget(lambda name, batch: name.startswith(OPEN) and batch < batch_id, lambda batch: False)
        return index

    def commit(self, batch_id: int, index: dict) -> None:
        """Batch ``batch_id``'s state made whole, once everything carried from it is written."""
        self.storage.write_text(join(self.state_dir, f"{batch_id:010d}", "index.json"),
                                json.dumps({**index, "format": state_format()}))

    def foreign_state(self) -> int | None:
        """The batch of the latest whole state, where other code wrote it (its ``format`` is not ``state_format``)."""
        latest = self._last_whole_state(sys.maxsize)
        return latest if latest is not None and self._index(latest).get("format") != state_format() else None

    def _stand_ins(self, frame, carried_flows: dict):
        """One row per carried flow, that brings the flow to its task."""
        schema = to_arrow_schema(frame.schema)
        count = len(carried_flows)
        columns = {field.name: pa.nulls(count, field.type) for field in schema}
        columns["flow"] = pa.array(list(carried_flows), pa.string())
        columns["error"] = pa.array([STAND_IN] * count, pa.string())
        return self.spark.createDataFrame(pa.table(columns, schema=schema))

    def _last_whole_state(self, batch_id: int) -> int | None:
        whole = [int(directory.rsplit("/", 1)[-1]) for directory in self.storage.directories(self.state_dir)
                 if self.storage.is_file(join(directory, "index.json"))]
        return max((batch for batch in whole if batch < batch_id), default=None)

    def _index(self, batch_id: int) -> dict:
        return json.loads(self.storage.read_text(join(self.state_dir, f"{batch_id:010d}", "index.json")))

    def _forget(self, parts: Callable[[str, int], bool], states: Callable[[int], bool]) -> None:
        """Deletes the table and exchange parts that ``parts`` selects (by file name and batch), and the states of
        the batches ``states`` selects."""
        directories = [join(self.tables_dir, name) for name in self.table_names]
        directories += self.storage.directories(self.exchange_dir)
        for directory in directories:
            for path in self.storage.files(directory, ".parquet"):
                name = path.rsplit("/", 1)[-1]
                batch = batch_of(name)
                if batch is not None and parts(name, batch):
                    self.storage.delete_file(path)
        for directory in self.storage.directories(self.state_dir):
            if states(int(directory.rsplit("/", 1)[-1])):
                self.storage.delete_directory(directory)


class _DecodeTask:
    """The function of a micro-batch's decoding tasks (pickled into them): their flows decoded, carried on, ended."""

    def __init__(self, increments: Increments, batch_id: int, carried: dict):
        self.storage, self.ports, self.window_bytes = increments.storage, increments.ports, increments.window_bytes
        self.http_ports, self.lookupd_http_ports = increments.http_ports, increments.lookupd_http_ports
        self.tables_dir, self.exchange_dir = increments.tables_dir, increments.exchange_dir
        self.state_dir = join(increments.state_dir, f"{batch_id:010d}")
        self.batch_id, self.carried = batch_id, carried
        self.horizon_ns = carried["last_ts_ns"] - CLOSED_HORIZON_NS

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        task = TaskContext.get().partitionId()
        part = part_name(self.batch_id, task)
        storage = self.storage
        storage.make_directory(self.state_dir)
        state_path = join(self.state_dir, f"part-{task:05d}.pickle")
        index, last_ts_ns = {}, self.carried["last_ts_ns"]
        with (TableWriter(self.tables_dir, part, SCHEMAS, storage) as final_tables,
              lifecycle.MessageExchange(self.exchange_dir, part, WATCH_BUCKETS, storage) as final_exchange,
              TableWriter(self.tables_dir, OPEN + part, SCHEMAS, storage) as open_tables,
              lifecycle.MessageExchange(self.exchange_dir, OPEN + part, WATCH_BUCKETS, storage) as open_exchange,
              storage.open_output(state_path) as pickles):
            final, opened = (final_tables, final_exchange), (open_tables, open_exchange)
            for flow, runs in flow_runs(batches):
                if flow is None:
                    _write(decode_flow(None, runs, self.ports), final)
                    continue
                flow_decoder = self._carried(flow)
                segments = _NewSegments(runs)
                _write(flow_decoder.feed(segments), final)
                _write(flow_decoder.cut(CARRIED_NS), final)
                last_ts_ns = max(last_ts_ns, flow_decoder.reassembly.conn.last_ts_ns)
                if flow_decoder.reassembly.closed_before(self.horizon_ns):
                    _write(flow_decoder.end(), final)
                    continue
                offset = pickles.tell()
                with without_cycle_collection():
                    pickles.write(pickle.dumps(flow_decoder, protocol=pickle.HIGHEST_PROTOCOL))
                index[flow] = [state_path, offset, pickles.tell() - offset, segments.bytes]
                _write(flow_decoder.end(), opened)
        return_freed_memory()
        yield pa.RecordBatch.from_pylist([{"state": json.dumps({"flows": index, "last_ts_ns": last_ts_ns})}])

    def _carried(self, flow: str) -> FlowDecoder:
        if flow not in self.carried["flows"]:
            return FlowDecoder(flow, self.ports, self.window_bytes, carried=True, http_ports=self.http_ports,
                               lookupd_http_ports=self.lookupd_http_ports)
        path, offset, length, _ = self.carried["flows"][flow]
        with self.storage.open_input(path) as source, without_cycle_collection():
            return pickle.loads(source.read_at(length, offset))


class _NewSegments:
    """A flow's runs without its stand-in row; ``bytes``, once read: their payload bytes, the flow's weight in the
    next batch's placement."""

    def __init__(self, runs: Iterable[pa.RecordBatch]):
        self.runs, self.bytes = runs, 0

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        for run in self.runs:
            segments = run.filter(pc.is_null(run.column("error")))
            self.bytes += pc.sum(segments.column("payload_length")).as_py() or 0
            yield segments


def _write(tables: Iterable[tuple[str, pa.Table]], writers) -> None:
    """``writers``: a TableWriter and a MessageExchange."""
    table_writer, exchange = writers
    for name, table in tables:
        if name not in FOR_THE_JUDGE:
            table_writer.add(name, table)
        exchange.add(name, table)
