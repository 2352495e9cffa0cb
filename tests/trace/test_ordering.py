"""A server's rows in the judge's order: sorted in memory, or in parts spilled to disk and merged, the same order."""

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_analysis.judge.monitoring import OBSERVED_SCHEMA
from spark_analysis.judge.ordering import JUDGING_ORDER, in_judging_order

ROW = st.tuples(st.integers(0, 6), st.sampled_from(["a", "b", "ab", "c"]), st.integers(0, 40))


def batches_of(rows: list[tuple], cuts: list[int]) -> list[pa.RecordBatch]:
    """Rows unique by key, as a decoding task's windows: batches cut at ``cuts``."""
    table = pa.Table.from_pylist([{"server": "s 4150", "ts_ns": ts, "conn_id": conn, "seq": seq, "name": f"{ts}{conn}"}
                                  for ts, conn, seq in dict.fromkeys(rows)], schema=OBSERVED_SCHEMA)
    bounds = sorted({0, table.num_rows, *(cut % (table.num_rows + 1) for cut in cuts)})
    return [table.slice(start, end - start).to_batches()[0]
            for start, end in zip(bounds, bounds[1:], strict=False) if end > start]


@settings(max_examples=200, deadline=None)
@given(st.lists(ROW, max_size=120), st.lists(st.integers(0, 200), max_size=8), st.integers(1, 3000))
def test_rows_spilled_and_merged_come_in_the_order_sorted_in_memory(rows, cuts, memory_bytes):
    batches = batches_of(rows, cuts)
    ordered = list(in_judging_order(iter(batches), memory_bytes=memory_bytes))
    expected = pa.Table.from_batches(batches, schema=OBSERVED_SCHEMA).sort_by(JUDGING_ORDER)
    got = pa.concat_tables(ordered) if ordered else OBSERVED_SCHEMA.empty_table()
    assert got.to_pylist() == expected.to_pylist()


def test_a_part_too_large_for_memory_is_spilled_and_still_merged():
    rows = [(ts % 7, conn, ts) for ts in range(300) for conn in ("x", "y")]
    batches = batches_of(rows, list(range(0, 600, 50)))
    ordered = list(in_judging_order(iter(batches), memory_bytes=batches[0].nbytes))
    assert len(ordered) > 1, "merged a batch at a time"
    assert pa.concat_tables(ordered).to_pylist() == pa.Table.from_batches(batches).sort_by(JUDGING_ORDER).to_pylist()
