"""``nsq-trace watch``'s judging: each micro-batch's final observed rows (judge/monitoring.py) through every nsqd's
judge, carried from the batch before.

The judges are pickled into the batch's state (``OUT/watch/state/<batch>/judges.pickle``, before ``index.json``
makes the state whole), so a replayed batch starts again from the judges of the batch it carried on from. A batch's
open parts (the last moments of the connections still open) are not judged: they come again, final, in the next
batch. So that the judges take every nsqd's rows in time order, a batch's final rows from the earliest of its open
rows on wait, with the judges, for the next batch: a connection still open may yet add rows from that time. The
connections are opened from the connections table so far; a rule that needs a connection's whole traffic takes it
as whole when the capture so far shows no gap in it. The violations a batch finds are appended to
the ``violations`` table as the batch's part; the counts are of every violation so far.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from spark_analysis.derive import lifecycle
from spark_analysis.derive.connection_tables import TableWriter
from spark_analysis.derive.tallies import Tallies
from spark_analysis.judge.job import COUNTS_SCHEMA, Judged, written_counts
from spark_analysis.judge.monitoring import (
    HTTP,
    HTTP_SCHEMA,
    OBSERVED,
    OBSERVED_SCHEMA,
    VIOLATIONS,
    VIOLATIONS_SCHEMA,
    ServerJudging,
    http_actions,
    http_actions_of,
    openings,
    sorted_rows,
)
from spark_analysis.read.storage import LOCAL, Storage, join
from spark_analysis.watch.increments import OPEN, part_name, part_prefix

JUDGES = "judges.pickle"


def judge_batch(spark: SparkSession, batch_id: int, previous: int | None, tallied: Tallies, exchange_dir: str,
                tables_dir: str, state_dir: str, http_read: bool, storage: Storage = LOCAL) -> Judged:
    """Batch ``batch_id``'s final observed rows (and HTTP requests, where the capture's HTTP traffic is read:
    ``http_read``) judged, by the judges of batch ``previous`` (None: new ones); ``tallied``: the tallies with the
    batch's open parts (every connection seen so far)."""
    by_server = openings(tallied.connections(), tallied.undecoded())

    def batch_parts(table: str, prefix: str = "") -> list[str]:
        return [url for url in storage.files(join(exchange_dir, table), ".parquet")
                if url.rsplit("/", 1)[-1].startswith(prefix + part_prefix(batch_id))]

    files, open_files, http_files = batch_parts(OBSERVED), batch_parts(OBSERVED, OPEN), batch_parts(HTTP)
    hosts = [server.split(" ")[0] for server in by_server]
    carried = None if previous is None else join(state_dir, f"{previous:010d}", JUDGES)
    kept = join(state_dir, f"{batch_id:010d}", JUDGES)

    def judge(_: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        judgings: dict[str, ServerJudging] = {}
        waiting = OBSERVED_SCHEMA.empty_table()
        if carried is not None and storage.is_file(carried):
            with storage.open_input(carried) as source:
                judgings, waiting = pickle.loads(source.read())
        observed = pa.concat_tables([waiting, lifecycle.read_parts(files, OBSERVED_SCHEMA, storage)])
        from_then = pc.min(lifecycle.read_parts(open_files, OBSERVED_SCHEMA, storage)["ts_ns"]).as_py()
        if from_then is not None:
            ready = pc.less(observed["ts_ns"], from_then)
            observed, waiting = observed.filter(ready), observed.filter(pc.invert(ready))
        else:
            waiting = OBSERVED_SCHEMA.empty_table()
        http = http_actions(lifecycle.read_parts(http_files, HTTP_SCHEMA, storage)) if http_read else None
        counts = []
        with TableWriter(tables_dir, part_name(batch_id, 0), {VIOLATIONS: VIOLATIONS_SCHEMA}, storage) as writer:
            for server, connections in by_server.items():
                judging = judgings.get(server)
                if judging is None:
                    judging = judgings[server] = ServerJudging(connections, [] if http_read else None)
                judging.add(connections)
                if http_read:
                    judging.add_actions(http_actions_of(server, hosts, http))
                judging.feed(sorted_rows(observed.filter(pc.equal(observed["server"], server))))
                counts += written_counts(server, judging, writer)
        storage.make_directory(join(state_dir, f"{batch_id:010d}"))
        with storage.open_output(kept) as sink:
            sink.write(pickle.dumps((judgings, waiting), protocol=pickle.HIGHEST_PROTOCOL))
        yield pa.RecordBatch.from_pylist(counts, schema=COUNTS_SCHEMA)

    rows = spark.range(1, numPartitions=1).mapInArrow(judge, from_arrow_schema(COUNTS_SCHEMA)).collect()
    return Judged().add([row.asDict() for row in rows])
