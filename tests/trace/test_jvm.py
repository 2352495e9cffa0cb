"""The driver JVM's start-up options and its class-data-sharing archive, with real JVMs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from trace_helpers import REPO

from spark_analysis.jvm import QUICK_JIT, DriverJvm

# One small job, then the JVM's own view of its options and of the archive it mapped.
SESSION_SCRIPT = """
import json
from spark_analysis.analysis import spark_session
with spark_session("local[1]", shuffle_partitions=1, driver_memory="512m", show_progress=False) as spark:
    count = spark.range(1000).where("id % 7 = 0").count()
    runtime = spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    arguments = list(runtime.getInputArguments())
print(json.dumps({"count": count, "arguments": arguments}))
"""


def _run_session(cache_dir) -> dict:
    env = {**os.environ, "NSQ_TRACE_JVM_CACHE": str(cache_dir), "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(
        [sys.executable, "-c", SESSION_SCRIPT], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_first_session_records_the_archive_and_the_next_maps_it(tmp_path):
    first = _run_session(tmp_path)
    assert first["count"] == 143
    assert QUICK_JIT in first["arguments"]
    assert any(argument.startswith("-XX:ArchiveClassesAtExit=") for argument in first["arguments"])
    archives = sorted(path.name for path in tmp_path.iterdir())
    assert len(archives) == 1 and archives[0].endswith(".jsa"), archives  # renamed whole, no partial left
    assert (tmp_path / archives[0]).stat().st_size > 1 << 20

    second = _run_session(tmp_path)
    assert second["count"] == 143
    assert f"-XX:SharedArchiveFile={tmp_path / archives[0]}" in second["arguments"]
    assert sorted(path.name for path in tmp_path.iterdir()) == archives


def test_archive_can_be_switched_off():
    driver = DriverJvm(cache_dir="off")
    assert driver.archive is None
    assert driver.java_options() == QUICK_JIT


def test_an_existing_archive_is_used_and_none_is_recorded(tmp_path):
    driver = DriverJvm(cache_dir=str(tmp_path))
    assert os.path.dirname(driver.archive) == str(tmp_path)
    with open(driver.archive, "wb") as handle:
        handle.write(b"archive")
    assert driver.java_options().endswith(f"-XX:SharedArchiveFile={driver.archive}")
    assert driver.recording is None
