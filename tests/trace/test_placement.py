"""The decoding job places flows in tasks through Spark's hash partitioning, whose function it computes itself."""

from __future__ import annotations

from pyspark.sql import functions as F

from spark_analysis.analysis import spark_hash_long


def test_spark_hash_long_is_sparks_hash_of_a_bigint(spark):
    values = [0, 1, -1, 42, 2**31, -(2**31), 2**40 + 7, 2**63 - 1, -(2**63), *range(100, 356)]
    frame = spark.createDataFrame([(value,) for value in values], "value BIGINT")
    assert {value: spark_hash_long(value) for value in values} == dict(frame.select("value", F.hash("value")).collect())


def test_a_key_lands_in_the_partition_its_hash_names(spark):
    tasks = 7
    keys = spark.createDataFrame([(key,) for key in range(200)], "key BIGINT")
    placed = keys.repartition(tasks, "key").select("key", F.spark_partition_id().alias("task")).collect()
    assert {key: spark_hash_long(key) % tasks for key in range(200)} == dict(placed)
