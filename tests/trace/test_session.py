"""The Spark session the analysis runs on."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pyarrow as pa
import pytest
from trace_helpers import PCAPS

from spark_analysis.analysis import FULL_CODE_CACHE, QUICK_JIT
from spark_analysis.worker_python import worker_python


def test_the_driver_jvm_runs_with_the_quick_jit_only(spark):
    runtime = spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    assert QUICK_JIT in list(runtime.getInputArguments())


def test_the_quick_jit_keeps_the_full_code_cache(spark):
    runtime = spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    assert FULL_CODE_CACHE in list(runtime.getInputArguments())
    code_cache = spark._jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
        spark._jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")
    ).getVMOption("ReservedCodeCacheSize")
    assert int(code_cache.getValue()) == 240 * 1024 * 1024


def test_python_workers_import_the_installed_pyspark_not_the_zip(spark):
    def where_pyspark_comes_from(batches):
        import pyspark

        for _ in batches:
            yield pa.RecordBatch.from_pydict({"origin": [pyspark.__file__]})

    origins = {row.origin for row in spark.range(2).mapInArrow(where_pyspark_comes_from, "origin STRING").collect()}
    import pyspark

    assert origins == {pyspark.__file__}


def test_the_worker_launcher_drops_only_sparks_zips_from_pythonpath(tmp_path):
    kept = [str(tmp_path / "user lib"), str(tmp_path / "other.zip")]
    spark_zips = [str(tmp_path / "python" / "lib" / "pyspark.zip"), str(tmp_path / "lib" / "py4j-0.10.9.9-src.zip")]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([spark_zips[0], kept[0], spark_zips[1], kept[1]])}
    with worker_python() as launcher:
        printed = subprocess.run(
            [launcher, "-c", "import os, sys; print(os.environ['PYTHONPATH']); print(sys.executable)"],
            env=environment,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
    assert printed == [os.pathsep.join(kept), sys.executable]
    assert not os.path.exists(launcher)


def test_the_driver_jvm_maps_the_prepared_class_archive(spark, class_archive):
    runtime = spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    assert f"-XX:SharedArchiveFile={class_archive}" in list(runtime.getInputArguments())


@pytest.mark.parametrize(
    "prepared,source",
    [(True, r"shared objects file"), (False, r"file:.*/spark-core_[^/]*\.jar")],
    ids=["prepared", "none"],
)
def test_spark_classes_load_from_the_archive_once_prepared(class_archive, tmp_path, prepared, source):
    cache = os.path.dirname(class_archive) if prepared else str(tmp_path / "empty-cache")
    environment = {
        **os.environ,
        "NSQ_TRACE_CACHE": cache,
        "JAVA_TOOL_OPTIONS": f"-Xlog:class+load=info:file={tmp_path}/classes-%p.log",
    }
    analysis = subprocess.run(
        [sys.executable, "-m", "spark_analysis", "analyze", str(PCAPS / "compressed.pcap")]
        + ["--out", str(tmp_path / "out"), "--no-report"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert analysis.returncode == 0, analysis.stderr[-2000:]
    sources = [
        line.split(" source: ")[1].strip()
        for log in tmp_path.glob("classes-*.log")
        for line in log.read_text().splitlines()
        if " org.apache.spark.SparkContext source: " in line
    ]
    assert len(sources) == 1  # the driver JVM's; the launcher JVM loads no Spark classes
    assert re.fullmatch(source, sources[0])
    assert ("run `nsq-trace prepare` once" in analysis.stderr) is not prepared
