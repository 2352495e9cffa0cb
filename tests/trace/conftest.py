"""Fixtures for the trace tests: one small local Spark for the session, analysis runs cached per input."""

from __future__ import annotations

import json
import os
import pathlib

import pytest

from spark_analysis.analysis import run_analysis, spark_session

REPO = pathlib.Path(__file__).resolve().parents[2]
PCAPS = REPO / "pcaps"


@pytest.fixture(scope="session")
def spark():
    session = spark_session("local[2]", shuffle_partitions=2, driver_memory="1g", show_progress=False)
    yield session
    session.stop()


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


def load_truth(name: str) -> dict:
    with open(PCAPS / f"{name}.truth.json") as handle:
        return json.load(handle)


def truth_mismatches(summary: dict, truth: dict) -> list[str]:
    """Every count the truth file defines (totals, published, per channel) that the summary gets wrong."""
    wrong = []
    for key, expected in truth["totals"].items():
        if summary["totals"].get(key) != expected:
            wrong.append(f"totals.{key}: truth {expected}, analysis {summary['totals'].get(key)}")
    for topic, expected_topic in truth["topics"].items():
        got_topic = summary["topics"].get(topic, {})
        for key, expected in expected_topic["published"].items():
            got = got_topic.get("published", {}).get(key)
            if got != expected:
                wrong.append(f"topics.{topic}.published.{key}: truth {expected}, analysis {got}")
        for channel, expected_channel in expected_topic["channels"].items():
            got_channel = got_topic.get("channels", {}).get(channel, {})
            for key, expected in expected_channel.items():
                if key == "consumer_connections":  # script names; the capture has ports
                    expected, key = len(expected), "consumer_ports"
                    got = len(got_channel.get(key, []))
                else:
                    got = got_channel.get(key)
                if got != expected:
                    wrong.append(f"topics.{topic}.channels.{channel}.{key}: truth {expected}, analysis {got}")
    return wrong


def pytest_report_header(config):
    return f"trace tests: pcaps from {PCAPS}, JAVA_HOME={os.environ.get('JAVA_HOME', '(unset)')}"
