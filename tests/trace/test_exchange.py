"""The decoding tasks' side of the exchange (derive/lifecycle.py MessageExchange): every row lands in its bucket (by
body hash) or its server's directory, once, in the order the task added it, whether the rows it gathered came in that
order already or not."""

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_analysis.derive import lifecycle
from spark_analysis.judge.monitoring import OBSERVED, OBSERVED_SCHEMA

SERVERS = ["127.0.0.1 4150", "127.0.0.1 5150", "10.0.0.2 4150"]


def rows(schema: pa.Schema, **columns) -> pa.Table:
    count = len(next(iter(columns.values())))
    return pa.table({field.name: columns.get(field.name, pa.nulls(count, field.type)) for field in schema},
                    schema=schema)


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(st.lists(st.tuples(st.integers(-(1 << 63), (1 << 63) - 1), st.sampled_from(SERVERS)),
                                 min_size=1, max_size=30), min_size=1, max_size=5),
       buckets=st.integers(1, 4), in_order=st.booleans())
def test_each_row_lands_once_in_its_bucket_and_its_servers_directory_in_the_order_added(tmp_path_factory, batches,
                                                                                      buckets, in_order):
    if in_order:  # as a decoding task's rows of one server come: already in their buckets' order
        batches = [sorted(batch, key=lambda row: (row[0] % buckets, SERVERS.index(row[1]))) for batch in batches]
    directory = str(tmp_path_factory.mktemp("exchange"))
    lifecycle.prepare_exchange(directory)
    added = [(body_hash, server, seq) for seq, (body_hash, server) in enumerate(row for batch in batches
                                                                               for row in batch)]
    with lifecycle.MessageExchange(directory, "part-00000", buckets) as exchange:
        start = 0
        for batch in batches:
            part = added[start:start + len(batch)]
            start += len(batch)
            exchange.add("delivered", rows(lifecycle.EXCHANGED_SCHEMAS["delivered"],
                                           body_hash=pa.array([row[0] for row in part], pa.int64()),
                                           ts_ns=pa.array([row[2] for row in part], pa.int64())))
            exchange.add(OBSERVED, rows(OBSERVED_SCHEMA, server=pa.array([row[1] for row in part], pa.string()),
                                        seq=pa.array([row[2] for row in part], pa.int64())))
    for bucket in range(buckets):
        landed = lifecycle.exchanged(directory, "delivered", bucket)
        assert list(zip(landed["body_hash"].to_pylist(), landed["ts_ns"].to_pylist(), strict=True)) == \
            [(body_hash, seq) for body_hash, _, seq in added if body_hash % buckets == bucket]
    for server in SERVERS:
        landed = [seq for batch in lifecycle.server_rows(lifecycle.server_files(directory, OBSERVED, server))
                  for seq in batch.column("seq").to_pylist()]
        assert landed == [seq for _, of, seq in added if of == server]
