"""The Spark session the analysis runs on."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from trace_helpers import PCAPS, REPO

from spark_analysis.session import FULL_CODE_CACHE, QUICK_JIT, archive_path, worker_python

# A tuned session must launch its own JVM, so it runs in a process of its own.
TUNED_SESSION = """
import json, sys, threading, pyarrow as pa
from spark_analysis.session import WARM_UP_JOB, spark_session

def where_pyspark_comes_from(batches):
    import pyspark
    for _ in batches:
        yield pa.RecordBatch.from_pydict({"origin": [pyspark.__file__],
                                          "warm": ["spark_analysis.analysis" in sys.modules]})

with spark_session("local[2]", driver_memory="1g", show_progress=False, tuned=True) as spark:
    jvm = spark._jvm.java.lang.management.ManagementFactory
    bean = spark._jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")
    diagnostics = jvm.getPlatformMXBean(bean)
    next(thread for thread in threading.enumerate() if thread.name == WARM_UP_JOB).join(timeout=120)
    rows = spark.range(2, numPartitions=2).mapInArrow(where_pyspark_comes_from, "origin STRING, warm BOOLEAN").collect()
    print(json.dumps({
        "arguments": list(jvm.getRuntimeMXBean().getInputArguments()),
        "code_cache": int(diagnostics.getVMOption("ReservedCodeCacheSize").getValue()),
        "worker_pyspark": sorted({row.origin for row in rows}),
        "workers_warm": [row.warm for row in rows],
    }))
"""


@pytest.fixture(scope="module")
def class_archive(tmp_path_factory):
    """A class archive that ``nsq-trace prepare`` built in a cache of this test module's own."""
    cache = str(tmp_path_factory.mktemp("nsq-trace-cache"))
    environment = {**os.environ, "NSQ_TRACE_CACHE": cache}
    prepared = subprocess.run(
        [sys.executable, "-m", "spark_analysis", "prepare"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
        env=environment,
    )
    assert prepared.returncode == 0, prepared.stderr[-2000:]
    assert "wrote " in prepared.stderr
    os.environ["NSQ_TRACE_CACHE"], previous = cache, os.environ.get("NSQ_TRACE_CACHE")
    try:
        return archive_path()
    finally:
        if previous is None:
            del os.environ["NSQ_TRACE_CACHE"]
        else:
            os.environ["NSQ_TRACE_CACHE"] = previous


def test_the_plain_session_is_not_tuned(spark):
    arguments = list(spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert QUICK_JIT not in arguments
    assert not any(argument.startswith("-XX:SharedArchiveFile=") for argument in arguments)


def test_a_tuned_session_has_the_quick_jit_the_full_code_cache_the_archive_installed_pyspark_and_warm_workers(
        class_archive):
    import pyspark

    environment = {**os.environ, "NSQ_TRACE_CACHE": os.path.dirname(class_archive)}
    environment.pop("PYSPARK_PYTHON", None)
    run = subprocess.run(
        [sys.executable, "-c", TUNED_SESSION], capture_output=True, text=True, cwd=REPO, timeout=300, env=environment
    )
    assert run.returncode == 0, run.stderr[-2000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert {QUICK_JIT, FULL_CODE_CACHE, f"-XX:SharedArchiveFile={class_archive}"} <= set(seen["arguments"])
    assert seen["code_cache"] == 240 * 1024 * 1024
    assert seen["worker_pyspark"] == [pyspark.__file__]
    # the workers the warm-up job started, reused: the analysis already imported
    assert seen["workers_warm"] == [True, True]


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
