"""Shared constants and the truth comparison of the trace tests (a plain module: several
conftest.py files in one run must not be imported by name)."""

from __future__ import annotations

import json
import pathlib

import pyarrow as pa

from spark_analysis.read.pcapfile import PACKET_SCHEMA, ByteRange, read_range

REPO = pathlib.Path(__file__).resolve().parents[2]
PCAPS = REPO / "pcaps"


def walk(path, start=0, end=1 << 40) -> pa.Table:
    """The walker's rows for a byte range of a capture (the whole file by default)."""
    return pa.Table.from_batches(list(read_range(ByteRange(str(path), start, end))), schema=PACKET_SCHEMA)


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
