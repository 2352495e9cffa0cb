"""Fixtures for the trace tests: one small local Spark for the session, analysis runs cached per input."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from trace_helpers import PCAPS, REPO

from spark_analysis.analysis import run_analysis, spark_session
from spark_analysis.jvm_archive import archive_path


@pytest.fixture(scope="session")
def class_archive(tmp_path_factory):
    """Every JVM of the test run maps a class archive that ``nsq-trace prepare`` built for it."""
    os.environ["NSQ_TRACE_CACHE"] = str(tmp_path_factory.mktemp("nsq-trace-cache"))
    prepared = subprocess.run(
        [sys.executable, "-m", "spark_analysis", "prepare"], capture_output=True, text=True, cwd=REPO, timeout=600
    )
    assert prepared.returncode == 0, prepared.stderr[-2000:]
    assert "wrote " in prepared.stderr
    return archive_path()


@pytest.fixture(scope="session")
def spark(class_archive):
    with spark_session("local[2]", shuffle_partitions=2, driver_memory="1g", show_progress=False) as session:
        yield session


@pytest.fixture(scope="session")
def analyse(spark, tmp_path_factory):
    """analyse(name, paths, **options) -> summary dict; each distinct name runs once per session."""
    done: dict[str, dict] = {}

    def run(name: str, paths: list[str], **options) -> dict:
        if name not in done:
            out = tmp_path_factory.mktemp(name)
            done[name] = run_analysis(spark, [str(p) for p in paths], str(out), report=False, **options)
            done[name]["out_dir"] = str(out)
        return done[name]

    return run


def pytest_report_header(config):
    return f"trace tests: pcaps from {PCAPS}, JAVA_HOME={os.environ.get('JAVA_HOME', '(unset)')}"
