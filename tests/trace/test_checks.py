"""The per-connection checks of judge/violations.py on hand-made rows: messages in flight expire at their deadline
(D-11), a TOUCH moves a deadline (P-TOUCH-04), and a delivery beyond RDY is a finding (D-01)."""

from __future__ import annotations

import numpy as np
import pytest

from spark_analysis.judge.violations import ConnectionChecks

MS = 1_000_000
# msg_timeout 2000 ms, less output_buffer_timeout 250 ms and the 100 ms queue scan: in flight for 1650 ms
RESPONSE = {"msg_timeout": 2000, "output_buffer_timeout": 250}
COLUMNS = ("ts_ns", "kind", "name", "rdy", "status", "msg_id", "code")


def rows(*events: tuple) -> dict[str, list]:
    """(ms, kind, name, msg_id or RDY count) per row, in time order."""
    columns = {name: [] for name in COLUMNS}
    for ms, kind, name, argument in events:
        columns["ts_ns"].append(ms * MS)
        columns["kind"].append(kind)
        columns["name"].append(name)
        columns["rdy"].append(argument if name == "RDY" else None)
        columns["status"].append("ok" if kind == "command" else None)
        columns["msg_id"].append(argument if name != "RDY" else None)
        columns["code"].append(None)
    return columns


def findings(*events: tuple, windows: int = 1) -> list[tuple[int, str]]:
    """The findings of the rows, fed in ``windows`` windows."""
    checks = ConnectionChecks({}, RESPONSE)
    columns = rows(*events)
    count = len(columns["ts_ns"])
    found = []
    for part in np.array_split(np.arange(count), windows):
        window = {name: [values[i] for i in part] for name, values in columns.items()}
        size = len(part)
        result, _ = checks.run(window, np.arange(size), np.ones(size, bool), last=part[-1] == count - 1)
        found += [(finding.ts_ns // MS, finding.requirement) for finding in result]
    return found


@pytest.mark.parametrize("windows", [1, 2, 3])
def test_a_touch_keeps_a_message_in_flight_past_its_first_deadline(windows):
    events = [(0, "command", "RDY", 2), (0, "frame", "message", "A"), (100, "frame", "message", "B"),
              (1000, "command", "TOUCH", "A"),  # A: in flight until 2650 ms; B expires at 1750 ms
              (1800, "frame", "message", "C"),  # in flight before it: A
              (1900, "frame", "message", "D")]  # in flight before it: A and C, with RDY 2
    assert findings(*events, windows=windows) == [(1900, "NSQ-RDY-004")]


@pytest.mark.parametrize("windows", [1, 2])
def test_without_the_touch_both_have_expired(windows):
    events = [(0, "command", "RDY", 2), (0, "frame", "message", "A"), (100, "frame", "message", "B"),
              (1800, "frame", "message", "C"), (1900, "frame", "message", "D")]
    assert findings(*events, windows=windows) == []


def test_a_fin_frees_its_place_and_a_redelivery_takes_one():
    events = [(0, "command", "RDY", 1), (0, "frame", "message", "A"), (10, "command", "FIN", "A"),
              (20, "frame", "message", "B"), (30, "frame", "message", "B")]  # B again, still in flight
    assert findings(*events) == [(30, "NSQ-RDY-004")]
