"""The Spark session the analysis runs on."""

from __future__ import annotations

from spark_analysis.analysis import QUICK_JIT


def test_the_driver_jvm_runs_with_the_quick_jit_only(spark):
    runtime = spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    assert QUICK_JIT in list(runtime.getInputArguments())
