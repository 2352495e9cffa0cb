"""Fixtures for the trace tests: one small local Spark for the session, analysis runs cached per input."""

from __future__ import annotations

import os

import pytest
from trace_helpers import PCAPS

from spark_analysis.analysis import run_analysis
from spark_analysis.read.datasource import NsqPcapDataSource
from spark_analysis.session import spark_session


@pytest.fixture(scope="session")
def spark():
    """A plain session: the tuning of session.py is opt-in and tested on its own (test_session.py). It knows the
    nsqpcap source from the start, so that no test depends on an analysis having run before it."""
    with spark_session("local[2]", shuffle_partitions=2, driver_memory="1g", show_progress=False) as session:
        session.dataSource.register(NsqPcapDataSource)
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
