"""``nsq-trace watch``'s lifecycles: a micro-batch orders only the deliveries of the messages still open, with its new
ones, instead of every message so far; a message's rows are written for good once it is final, its totals kept.

    OUT/watch/state/<batch>/lifecycles/delivered-NNNNN.arrow  a bucket's open messages' delivered rows (final ones
                                                              only: the open part is decoded again by every batch)
    OUT/watch/state/<batch>/lifecycles/published-NNNNN.arrow  the accepted publishes of the last
                                                              PUBLISH_HORIZON_NS of capture time (final ones only)
    OUT/watch/state/<batch>/lifecycles/totals-NNNNN.arrow     the bucket's totals over every message written for good
                                                              (lifecycle.TOTALS_SCHEMA, one row)
    OUT/tables/{deliveries,messages}/b<batch>-part-NNNNN.parquet       the messages that became final in the batch
    OUT/tables/{deliveries,messages}/open-b<batch>-part-NNNNN.parquet  the others, as if the capture ended with the
                                                                       batch: replaced by the next batch's

Each lifecycle task (one per body-hash bucket, as in derive/lifecycle.py) takes the bucket's carried rows, the batch's
final exchange rows and its open ones (watch/increments.py), orders them into deliveries and messages, and splits the
messages. How the connections ended for good, and the IDs E_FIN_FAILED named in final parts, it takes from the
driver's tallies (derive/tallies.py): reading every batch's parts again in every task would grow with the batches.

A message is final when nothing the capture may still hold can change its rows:

- none of its deliveries, and no publish of its body, is in the batch's open part (what the decoders still hold:
  a settlement, an answer, a connection's end may change it);
- no delivery of it is abandoned on a connection still open: whether that connection sends CLS or another packet
  later decides between abandoned and timeout (D-15);
- its last delivery was FINed at least ``FIN_HORIZON_NS`` of capture time before the latest capture time. nsqd
  forgets a message it FINs, and a FIN it failed is answered E_FIN_FAILED, which the decoder pairs with the FIN
  (then no settlement): only a faulty broker delivers a message after a FIN that succeeded (the lifecycle's
  ``after_fin`` cause). Every packet captured so far is decoded into the final or the open part, and a later
  file's packets come after the latest capture time, so one within the horizon is still seen; one later than
  that starts a lifecycle of its own (the message's second row), where the batch analysis calls it after_fin;
- or, FINed or not, its last delivery and settlement are ``UNFINISHED_HORIZON_NS`` before the latest capture time:
  a message REQ'd, timed out or unsettled is delivered again within nsqd's longest REQ delay (--max-req-timeout,
  1 h by default; a timed-out one within --max-msg-timeout, 15 min) unless no consumer is left to take it.

A message's publish command is the first accepted publish of its body in its topic (lifecycle.first_publishes);
the carried publishes are those of the last ``PUBLISH_HORIZON_NS``, so a message first delivered later than that
after its body was first published (a deep backlog) names no publish command, or a later one. Those are the
differences from the batch analysis of the same files: every batch's final rows with the last batch's open part
are otherwise the batch analysis's lifecycle tables, and the kept totals with the open messages' its totals.

E_FIN_FAILED (P-FIN-04): which of the IDs it named were delivered is kept with the totals; a new one is looked up
among the bucket's messages written for good before (their ``messages`` parts, only when the batch has one).

Replays are the decoding's (watch/increments.py): this state is the batch's, deleted with it, and the batch's
``index.json`` is written after it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from spark_analysis.derive import lifecycle
from spark_analysis.derive.connection_tables import TableWriter
from spark_analysis.derive.lifecycle import (
    DELIVERIES_SCHEMA,
    EXCHANGED_SCHEMAS,
    LIFECYCLE_SCHEMAS,
    MESSAGE_KEY,
    TOTALS_SCHEMA,
    Totals,
)
from spark_analysis.derive.settlements import DELIVERED_SCHEMA
from spark_analysis.derive.tallies import Tallies
from spark_analysis.memory import return_freed_memory
from spark_analysis.read.parquet_source import WrittenTables
from spark_analysis.read.storage import LOCAL, Storage, join
from spark_analysis.watch.increments import CARRIED_NS, NS_PER_S, OPEN, batch_of, part_name, part_prefix

# A FIN's error answer is paired within the window a file's end carries (increments.CARRIED_NS)
FIN_HORIZON_NS = CARRIED_NS
UNFINISHED_HORIZON_NS = 3600 * NS_PER_S  # nsqd's --max-req-timeout
PUBLISH_HORIZON_NS = 60 * NS_PER_S
PUBLISHED_SCHEMA = EXCHANGED_SCHEMAS["published"]


class LifecycleIncrements:
    """The lifecycle tables of each micro-batch of ``nsq-trace watch``, from the exchange its decoding wrote and the
    open messages carried from the batch before."""

    def __init__(self, spark: SparkSession, tables_dir: str, exchange_dir: str, state_dir: str, buckets: int,
                 storage: Storage = LOCAL):
        self.spark, self.storage, self.buckets = spark, storage, buckets
        self.tables_dir, self.exchange_dir, self.state_dir = tables_dir, exchange_dir, state_dir

    def tables(self, batch_id: int, index: dict, final: Tallies) -> tuple[Mapping[str, DataFrame], Totals]:
        """Batch ``batch_id``'s lifecycles, its decoding's ``index`` (watch/increments.py) naming the batch it carries
        on from and the latest capture time, ``final`` the tallies of every batch's final parts through this one (the
        connections that ended for good, the IDs E_FIN_FAILED named): the tables of every message so far, and their
        totals."""
        task = _BucketTask(self, batch_id, index["previous"], index["last_ts_ns"], final)
        rows = (self.spark.range(self.buckets, numPartitions=self.buckets)
                .mapInArrow(task, from_arrow_schema(TOTALS_SCHEMA)).collect())
        return WrittenTables(self.spark, self.tables_dir, LIFECYCLE_SCHEMAS, self.storage), Totals.of(rows)


class _BucketTask:
    """The function of a micro-batch's lifecycle tasks (pickled into them): each of their buckets' messages ordered,
    split into final and open, written; rows of totals per bucket: the kept ones (carried on), the open messages'."""

    def __init__(self, increments: LifecycleIncrements, batch_id: int, previous: int | None, last_ts_ns: int,
                 final: Tallies):
        self.storage, self.tables_dir = increments.storage, increments.tables_dir
        self.exchange_dir = increments.exchange_dir
        self.state_dir = join(increments.state_dir, f"{batch_id:010d}", "lifecycles")
        self.carried_dir = None if previous is None else join(increments.state_dir, f"{previous:010d}", "lifecycles")
        self.batch_id, self.last_ts_ns = batch_id, last_ts_ns
        # from the driver's tallies: every task reading every batch's final parts again would grow with the batches
        self.ended, self.fin_failed_final = final.connection_ends(), final.fin_failed_ids()

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        self.storage.make_directory(self.state_dir)
        exchange, storage = self.exchange_dir, self.storage
        final_prefix = part_prefix(self.batch_id)
        still_open = lifecycle.exchanged(exchange, "connections", storage=storage, prefix=OPEN + final_prefix)
        ends = pa.concat_tables([
            self.ended.append_column("conn_open", pa.repeat(False, self.ended.num_rows)),
            lifecycle.connection_ends(still_open).append_column("conn_open", pa.repeat(True, still_open.num_rows))])
        fin_failed = {"final": self.fin_failed_final,
                      "new": lifecycle.exchanged(exchange, "fin_failed", storage=storage, prefix=final_prefix),
                      "open": lifecycle.exchanged(exchange, "fin_failed", storage=storage,
                                                  prefix=OPEN + final_prefix)}
        for batch in batches:
            for bucket in batch.column("id").to_pylist():
                yield from self._bucket(bucket, ends, fin_failed)
        # the worker decodes the next batch's files: what the bucket's tables held goes back to the system first
        return_freed_memory()

    def _bucket(self, bucket: int, ends: pa.Table, fin_failed: dict[str, pa.Table]) -> Iterator[pa.RecordBatch]:
        exchange, storage, final_prefix = self.exchange_dir, self.storage, part_prefix(self.batch_id)
        new = {name: lifecycle.exchanged(exchange, name, bucket, storage, final_prefix)
               for name in ("delivered", "published")}
        opened = {name: lifecycle.exchanged(exchange, name, bucket, storage, OPEN + final_prefix)
                  for name in ("delivered", "published")}
        carried_delivered = self._carried("delivered", bucket, DELIVERED_SCHEMA)
        carried_published = self._carried("published", bucket, PUBLISHED_SCHEMA)
        delivered = pa.concat_tables([
            table.append_column("open_row", pa.repeat(is_open, table.num_rows))
            for table, is_open in ((carried_delivered, False), (new["delivered"], False),
                                   (opened["delivered"], True))])
        delivery = lifecycle.deliveries(delivered.join(ends, "conn_id", join_type="left outer"))
        published = pa.concat_tables([carried_published, new["published"], opened["published"]])
        # the publishes of the bodies delivered: the carried ones are most of the rows, and most deliver no more
        first = lifecycle.first_publishes(published.filter(pc.is_in(
            published["body_hash"], value_set=delivery["body_hash"].combine_chunks())))
        final = self._final(delivery, opened["published"])
        parts = {"final": delivery.filter(final), "open": delivery.filter(pc.invert(final))}
        messages = {name: lifecycle.messages(rows, first) for name, rows in parts.items()}
        for name, part in (("final", part_name(self.batch_id, bucket)), ("open", OPEN + part_name(self.batch_id,
                                                                                                   bucket))):
            with TableWriter(self.tables_dir, part, LIFECYCLE_SCHEMAS, storage) as writer:
                writer.add("deliveries", parts[name].select(DELIVERIES_SCHEMA.names))
                writer.add("messages", messages[name])

        named = self._fin_failed_written_before(bucket, pa.concat_tables([fin_failed["new"], fin_failed["open"]]))
        kept = Totals.of([
            *self._carried("totals", bucket, TOTALS_SCHEMA).to_pylist(),
            *lifecycle.bucket_totals(parts["final"], messages["final"], fin_failed["final"],
                                     new["published"]).to_pylist(),
            *_fin_failed_row(_among(fin_failed["new"], named)).to_pylist(),
        ]).as_row()
        carried = parts["open"].filter(pc.invert(parts["open"]["open_row"]))
        self._carry("delivered", bucket, carried.select(DELIVERED_SCHEMA.names).cast(DELIVERED_SCHEMA))
        publishes = pa.concat_tables([carried_published, new["published"]])
        self._carry("published", bucket, publishes.filter(
            pc.greater_equal(publishes["ts_ns"], self.last_ts_ns - PUBLISH_HORIZON_NS)))
        self._carry("totals", bucket, pa.Table.from_batches([kept]))
        yield kept
        yield lifecycle.bucket_totals(parts["open"], messages["open"],
                                      pa.concat_tables([fin_failed["final"], fin_failed["open"]]), opened["published"])
        yield _fin_failed_row(_among(fin_failed["open"], pa.concat_tables([named, messages["final"].select(
            MESSAGE_KEY)])))

    def _final(self, delivery: pa.Table, open_published: pa.Table) -> pa.Array:
        """Per delivery (ordered by message, then time): whether its message is final (the module's rule)."""
        count = delivery.num_rows
        if not count:
            return pa.array([], pa.bool_())
        message = np.cumsum(~lifecycle.same_message(delivery)) - 1
        last = np.concatenate((message[1:] != message[:-1], [True]))

        def flag(array) -> np.ndarray:
            return pc.fill_null(array, False).to_numpy(zero_copy_only=False)

        held = (flag(delivery["open_row"])
                | flag(pc.and_(pc.equal(delivery["outcome"], "abandoned"), delivery["conn_open"]))
                | flag(pc.is_in(delivery["body_hash"], open_published["body_hash"].combine_chunks())))
        settled_ts = pc.fill_null(delivery["settled_ts_ns"], 0).to_numpy()
        finished = (flag(pc.equal(delivery["outcome"], "FIN"))
                    & (settled_ts < self.last_ts_ns - FIN_HORIZON_NS))
        stale = np.maximum(delivery["ts_ns"].to_numpy(), settled_ts) < self.last_ts_ns - UNFINISHED_HORIZON_NS
        messages = message[-1] + 1
        blocked = np.bincount(message, weights=held, minlength=messages) > 0
        done = np.zeros(messages, bool)
        done[message[last]] = (finished | stale)[last]
        return pa.array((done & ~blocked)[message])

    def _fin_failed_written_before(self, bucket: int, fin_failed: pa.Table) -> pa.Table:
        """Of the IDs ``fin_failed`` names, those among the bucket's messages written for good by earlier batches."""
        if not fin_failed.num_rows:
            return fin_failed
        directory = join(self.tables_dir, "messages")
        files = [url for url in self.storage.files(directory, ".parquet")
                 if _written_before(url.rsplit("/", 1)[-1], self.batch_id, bucket)]
        return lifecycle.read_parts(files, LIFECYCLE_SCHEMAS["messages"], self.storage, columns=MESSAGE_KEY,
                                    filter=pc.field("msg_id").isin(fin_failed["msg_id"]))

    def _carried(self, name: str, bucket: int, schema: pa.Schema) -> pa.Table:
        if self.carried_dir is None:
            return schema.empty_table()
        with self.storage.open_input(join(self.carried_dir, f"{name}-{bucket:05d}.arrow")) as source:
            return pa.ipc.open_file(source).read_all()

    def _carry(self, name: str, bucket: int, table: pa.Table) -> None:
        with (self.storage.open_output(join(self.state_dir, f"{name}-{bucket:05d}.arrow")) as sink,
              pa.ipc.new_file(sink, table.schema) as writer):
            writer.write_table(table)


def _written_before(file_name: str, batch_id: int, bucket: int) -> bool:
    batch = batch_of(file_name)
    return (not file_name.startswith(OPEN) and batch is not None and batch < batch_id
            and file_name.removesuffix(".parquet").endswith(f"-{bucket:05d}"))


def _among(keys: pa.Table, messages: pa.Table) -> pa.Table:
    """The ``MESSAGE_KEY`` rows of ``keys`` that ``messages`` holds."""
    return keys.select(MESSAGE_KEY).join(messages.select(MESSAGE_KEY), MESSAGE_KEY, join_type="left semi")


def _fin_failed_row(delivered: pa.Table) -> pa.RecordBatch:
    """A totals row that counts nothing but these E_FIN_FAILED IDs as delivered."""
    totals = Totals()
    totals.fin_failed_delivered.update(zip(*(delivered[name].to_pylist() for name in MESSAGE_KEY), strict=True))
    return totals.as_row()
