"""``nsq-trace watch``'s judging: each micro-batch's final observed rows (judge/monitoring.py) through every nsqd's
judge, and its nsqlookupd connections' rows (judge/lookupd.py), with the exchanges with nsqlookupd's HTTP API where
they are read, through every nsqlookupd's, carried from the batch before.

The judges are pickled into the batch's state (``OUT/watch/state/<batch>/judges.pickle``, before ``index.json``
makes the state whole), so a replayed batch starts again from the judges of the batch it carried on from. A batch's
open parts (the last moments of the connections still open) are not judged: they come again, final, in the next
batch. So that the judges take every nsqd's rows in time order, they take a batch's rows, its final and its open
ones, up to the latest capture time less the 100 ms a connection's tail is carried (``CARRIED_NS``): no later batch
adds rows before that. The final rows after it wait, with the judges, for the next batch; the open rows before it,
judged now, come again as final ones, and are known by their connection and time (``Fed``). The
connections are opened from the connections table so far; a rule that needs a connection's whole traffic takes it
as whole when the capture so far shows no gap in it. The violations a batch finds are appended to
the ``violations`` table as the batch's part; the counts are of every violation so far.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from spark_analysis.derive import lifecycle
from spark_analysis.derive.connection_tables import TableWriter
from spark_analysis.derive.tallies import Tallies
from spark_analysis.judge.job import COUNTS_SCHEMA, Judged, written_counts
from spark_analysis.judge.lookupd import (
    LOOKUPD,
    LOOKUPD_HTTP,
    LOOKUPD_SCHEMA,
    LookupdJudging,
    lookupd_exchanges,
    lookupd_servers,
)
from spark_analysis.judge.monitoring import (
    HTTP,
    HTTP_SCHEMA,
    NS,
    OBSERVED,
    OBSERVED_SCHEMA,
    VIOLATIONS,
    VIOLATIONS_SCHEMA,
    ServerJudging,
    http_actions,
    http_actions_of,
    openings,
)
from spark_analysis.judge.ordering import JUDGING_ORDER
from spark_analysis.memory import without_cycle_collection
from spark_analysis.read.storage import LOCAL, Storage, join
from spark_analysis.watch.increments import CARRIED_NS, OPEN, part_name, part_prefix

JUDGES = "judges.pickle"


def judge_batch(spark: SparkSession, batch_id: int, previous: int | None, last_ts_ns: int, final: Tallies,
                tallied: Tallies, exchange_dir: str, tables_dir: str, state_dir: str, http_read: bool,
                nsq_ports: frozenset[int], storage: Storage = LOCAL, lookupd_http_read: bool = False,
                nsqd_clients: bool = True) -> Judged:
    """Batch ``batch_id``'s final observed rows (and HTTP requests, where the capture's HTTP traffic is read:
    ``http_read``; nsqlookupd's V1 rows, and its HTTP exchanges where they are read: ``lookupd_http_read``) judged,
    by the judges of batch ``previous`` (None: new ones), up to ``last_ts_ns``, the latest capture time so far,
    less ``CARRIED_NS``. ``tallied``: the tallies with the batch's open parts (every connection seen so far);
    ``final``: without them, whose errors are the bytes the decoder could not read (an open part ends a connection
    as if it had ended, inside a frame maybe). ``nsqd_clients``: the nsqlookupds' V1 clients are nsqds, judged
    against the changes of topics and channels the nsqds' judges found (in this batch or before)."""
    connections = tallied.connections()
    by_server = openings(connections, final.undecoded(), whole_capture=False)
    lookupds = sorted(lookupd_servers(connections, nsq_ports))
    schemas = {OBSERVED: OBSERVED_SCHEMA, LOOKUPD: LOOKUPD_SCHEMA}

    def batch_parts(directory: str, prefix: str = "") -> list[str]:
        return [url for url in storage.files(join(exchange_dir, directory), ".parquet")
                if url.rsplit("/", 1)[-1].startswith(prefix + part_prefix(batch_id))]

    def servers_parts(table: str, servers: Iterable[str], prefix: str = "") -> list[str]:
        return [url for server in servers for url in batch_parts(lifecycle.server_table(table, server), prefix)]

    files = {table: (servers_parts(table, servers), servers_parts(table, servers, OPEN))
             for table, servers in ((OBSERVED, by_server), (LOOKUPD, lookupds))}
    http_files, lookupd_http_files = batch_parts(HTTP), batch_parts(LOOKUPD_HTTP)
    hosts = [server.split(" ")[0] for server in by_server]
    lookupd_hosts = [server.split(" ")[0] for server in lookupds]
    carried = None if previous is None else join(state_dir, f"{previous:010d}", JUDGES)
    kept = join(state_dir, f"{batch_id:010d}", JUDGES)

    def judged() -> list[dict]:
        """The judges of batch ``previous`` read back, fed this batch's rows and written out; their counts."""
        judgings: dict[str, ServerJudging | LookupdJudging] = {}
        waiting, fed = {table: schema.empty_table() for table, schema in schemas.items()}, Fed()
        if carried is not None and storage.is_file(carried):
            with storage.open_input(carried) as source:
                judgings, waiting, fed = pickle.loads(source.read())
        until = last_ts_ns - CARRIED_NS
        ready = {}
        for table, schema in schemas.items():
            final_parts, open_parts = files[table]
            final_rows = pa.concat_tables([waiting[table], lifecycle.read_parts(final_parts, schema, storage)])
            waiting[table] = final_rows.filter(pc.greater_equal(final_rows["ts_ns"], until))
            rows = pa.concat_tables([final_rows, lifecycle.read_parts(open_parts, schema, storage)])
            # in the judge's order, sorted once for every server (a string key first would cost four times as much)
            ready[table] = rows.filter(pc.less(rows["ts_ns"], until)).sort_by(JUDGING_ORDER)
        observed, lookupd_rows = ready[OBSERVED], ready[LOOKUPD]
        http = http_actions(lifecycle.read_parts(http_files, HTTP_SCHEMA, storage)) if http_read else None
        lookupd_http = lookupd_exchanges(lifecycle.read_parts(lookupd_http_files, HTTP_SCHEMA, storage)) \
            if lookupd_http_read else None
        counts, changes = [], []
        with TableWriter(tables_dir, part_name(batch_id, 0), {VIOLATIONS: VIOLATIONS_SCHEMA}, storage) as writer:
            for server, connections in by_server.items():
                judging = judgings.get(server)
                if judging is None:
                    judging = judgings[server] = ServerJudging(connections, [] if http_read else None)
                judging.add(connections)
                if http_read:
                    judging.add_actions(http_actions_of(server, hosts, http))
                judging.feed(fed.new(_of_server(observed, server)))
                judging.advance(until / NS)
                counts += written_counts(server, judging, writer)
                changes += judging.new_changes(server).to_pylist() if nsqd_clients else []
            for server in lookupds:
                judging = judgings.get(server)
                if judging is None:
                    judging = judgings[server] = LookupdJudging([] if lookupd_http_read else None,
                                                                nsqd_clients=nsqd_clients)
                if lookupd_http_read:
                    judging.add_exchanges(http_actions_of(server, lookupd_hosts, lookupd_http))
                judging.add_changes(changes)
                judging.feed(fed.new(_of_server(lookupd_rows, server)))
                counts += written_counts(server, judging, writer)
        storage.make_directory(join(state_dir, f"{batch_id:010d}"))
        with storage.open_output(kept) as sink:
            sink.write(pickle.dumps((judgings, waiting, fed), protocol=pickle.HIGHEST_PROTOCOL))
        return counts

    def judge(_: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        # the judges are millions of objects: read back, fed, written out and freed (as ``judged`` returns) without
        # the cycle collector's passes over them, which would grow with their number (spark_analysis/memory.py)
        with without_cycle_collection():
            counts = judged()
        yield pa.RecordBatch.from_pylist(counts, schema=COUNTS_SCHEMA)

    rows = spark.range(1, numPartitions=1).mapInArrow(judge, from_arrow_schema(COUNTS_SCHEMA)).collect()
    return Judged().add([row.asDict() for row in rows])


def _of_server(rows: pa.Table, server: str) -> pa.Table:
    """``server``'s rows of ``rows``, in their order."""
    return rows.filter(pc.equal(rows["server"], server))


class Fed:
    """Each connection's rows the judges took: the time of the last one and how many at that time, so that an open
    row taken in one batch is known when it comes again, final, in a later one (in the same order)."""

    def __init__(self):
        self.last: dict[str, list[int]] = {}  # conn_id -> [ts_ns, rows taken at that time]

    def new(self, rows: pa.Table) -> pa.Table:
        """``rows`` (each connection's in time order) but those taken in an earlier call: column by column, each
        connection's rows one stretch of them."""
        if not rows.num_rows:
            return rows
        connections = rows["conn_id"].combine_chunks().dictionary_encode()
        codes = connections.indices.to_numpy()
        order = np.argsort(codes, kind="stable")
        times = rows["ts_ns"].to_numpy()[order]
        bounds = np.searchsorted(codes[order], np.arange(len(connections.dictionary) + 1)).tolist()
        taken = np.ones(rows.num_rows, bool)
        for conn_id, start, end in zip(connections.dictionary.to_pylist(), bounds, bounds[1:], strict=False):
            mine = times[start:end]
            taken_until, taken_there = self.last.get(conn_id, (-1, 0))
            before = int(mine.searchsorted(taken_until, "left"))  # rows before the last time taken: taken
            again = before + min(taken_there, int(mine.searchsorted(taken_until, "right")) - before)
            taken[order[start:start + again]] = False
            if again < len(mine):
                last = int(mine[-1])
                there = len(mine) - max(again, int(mine.searchsorted(last, "left")))
                self.last[conn_id] = [last, there + (taken_there if last == taken_until else 0)]
        return rows if taken.all() else rows.filter(pa.array(taken))
