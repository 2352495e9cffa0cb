"""The messages in flight per second that the report draws (derive/in_flight.py), on hand-made rows: a message counts
until its deadline (D-11), a TOUCH moves the deadline (P-TOUCH-04), a FIN frees its place at once."""

from __future__ import annotations

import numpy as np
import pytest

from spark_analysis.derive.in_flight import InFlight

MS = 1_000_000
# msg_timeout 2000 ms, less output_buffer_timeout 250 ms and the 100 ms queue scan: in flight for 1650 ms
RESPONSE = {"msg_timeout": 2000, "output_buffer_timeout": 250}
COLUMNS = ("ts_ns", "kind", "name", "status", "msg_id")


def peaks(*events: tuple, windows: int = 1) -> dict[int, int]:
    """The most in flight per second of the rows ((ms, kind, name, msg_id), in time order), fed in ``windows``."""
    columns = {name: [] for name in COLUMNS}
    for ms, kind, name, msg_id in events:
        for column, value in zip(COLUMNS, (ms * MS, kind, name, "ok" if kind == "command" else None, msg_id),
                                 strict=True):
            columns[column].append(value)
    counter, found = InFlight(RESPONSE), {}
    count = len(events)
    for part in np.array_split(np.arange(count), windows):
        window = {name: [values[i] for i in part] for name, values in columns.items()}
        found.update(counter.run(window, np.arange(len(part)), np.ones(len(part), bool), last=part[-1] == count - 1))
    return found


@pytest.mark.parametrize("windows", [1, 2, 3])
def test_a_touch_keeps_a_message_in_flight_past_its_first_deadline(windows):
    events = [(0, "frame", "message", "A"), (100, "frame", "message", "B"),
              (1000, "command", "TOUCH", "A"),  # A: in flight until 2650 ms; B expires at 1750 ms
              (1800, "frame", "message", "C"), (1900, "frame", "message", "D")]
    assert peaks(*events, windows=windows) == {0: 2, 1: 3}  # at 1900 ms: A, C and D


@pytest.mark.parametrize("windows", [1, 2])
def test_without_the_touch_both_have_expired(windows):
    events = [(0, "frame", "message", "A"), (100, "frame", "message", "B"),
              (1800, "frame", "message", "C"), (1900, "frame", "message", "D")]
    assert peaks(*events, windows=windows) == {0: 2, 1: 2}


def test_a_fin_frees_its_place_and_a_redelivery_takes_one():
    events = [(0, "frame", "message", "A"), (10, "command", "FIN", "A"),
              (20, "frame", "message", "B"), (30, "frame", "message", "B")]  # B again, still in flight
    assert peaks(*events) == {0: 1}
