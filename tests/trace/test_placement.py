"""The decoding job places flows in tasks through Spark's hash partitioning, whose function it computes itself."""

from __future__ import annotations

from pyspark.sql import functions as F

from spark_analysis.analysis import placed_by_size, spark_hash_long


def test_spark_hash_long_is_sparks_hash_of_a_bigint(spark):
    values = [0, 1, -1, 42, 2**31, -(2**31), 2**40 + 7, 2**63 - 1, -(2**63), *range(100, 356)]
    frame = spark.createDataFrame([(value,) for value in values], "value BIGINT")
    assert {value: spark_hash_long(value) for value in values} == dict(frame.select("value", F.hash("value")).collect())


def test_a_key_lands_in_the_partition_its_hash_names(spark):
    tasks = 7
    keys = spark.createDataFrame([(key,) for key in range(200)], "key BIGINT")
    placed = keys.repartition(tasks, "key").select("key", F.spark_partition_id().alias("task")).collect()
    assert {key: spark_hash_long(key) % tasks for key in range(200)} == dict(placed)


def test_flows_are_balanced_by_their_sizes_and_an_unsized_one_is_still_one_tasks(spark):
    """watch sizes only the connections it carries (by their bytes of the batch before): the others are hashed."""
    flows = [f"flow-{number}" for number in range(16)]
    segments = spark.createDataFrame([(flow, offset) for flow in flows for offset in range(5)],
                                     "flow STRING, offset BIGINT")

    def tasks_of(sizes: dict[str, int]) -> dict[str, int]:
        task_of = {}
        for row in placed_by_size(segments, sizes).select("flow", F.spark_partition_id().alias("task")).collect():
            assert task_of.setdefault(row.flow, row.task) == row.task, f"{row.flow} split between tasks"
        assert set(task_of) == set(flows)
        return task_of

    hashed = tasks_of({})
    first, second = next((a, b) for a in flows for b in flows if a < b and hashed[a] == hashed[b])
    sized = tasks_of({first: 900, second: 800})
    assert sized[first] != sized[second], "the two largest flows share a task"
