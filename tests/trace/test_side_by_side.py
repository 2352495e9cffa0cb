"""`analyze` runs the message lifecycles' job beside the judging's (analysis.side_by_side): its tasks take the cores
the judging's tasks leave idle, never one that a judging task was waiting for."""

from __future__ import annotations

import os
import time

import pyarrow as pa
import pytest

from spark_analysis.analysis import side_by_side

SEEN = pa.schema([("task", pa.string()), ("saw", pa.string())])
WAIT_S = 60  # a bound on waiting for the other job's task, which comes within a second or two when it runs beside


def _job(spark, tasks: int, task):
    """A job of ``tasks`` tasks, each ``task(index)``: the markers it saw."""
    def run(batches):
        for batch in batches:
            for index in batch.column("id").to_pylist():
                yield pa.RecordBatch.from_pylist([{"task": str(index), "saw": ",".join(task(index))}], schema=SEEN)

    return {row.task: row.saw.split(",") if row.saw else []
            for row in spark.range(tasks, numPartitions=tasks).mapInArrow(run, "task string, saw string").collect()}


def test_the_second_job_takes_only_the_core_the_first_leaves_idle(spark, tmp_path):
    markers = str(tmp_path)

    def mark(name: str) -> None:
        open(os.path.join(markers, name), "w").close()

    def present() -> list[str]:
        return sorted(os.listdir(markers))

    def first_task(index: int) -> list[str]:
        mark(f"first-{index}-started")
        if index == 0:
            mark("first-0-done")  # a share that ends early: its core is idle
            return present()
        deadline = time.monotonic() + WAIT_S
        while "second-ran" not in present() and time.monotonic() < deadline:
            time.sleep(0.05)
        return present()

    def second_task(_index: int) -> list[str]:
        seen = present()
        mark("second-ran")
        return seen

    def first_job():
        time.sleep(3)  # as the judging prepares its directories before its job: the second must wait for it
        return _job(spark, 2, first_task)

    first, second = side_by_side(spark, first_job, lambda: _job(spark, 1, second_task))
    # the second job ran while the first's long task was still running
    assert "second-ran" in first["1"]
    # on the core the first's short task had left, once both of the first's tasks had theirs
    assert {"first-0-done", "first-1-started"} <= set(second["0"])


def test_a_failing_second_job_cancels_the_first_instead_of_waiting_for_its_end(spark):
    """A first job that would run for ``LONG_S`` ends with the second's error, at once."""
    LONG_S = 120

    def long_task(_index: int) -> list[str]:
        time.sleep(LONG_S)
        return []

    def failing() -> None:
        raise ValueError("the second job broke")

    started = time.monotonic()
    with pytest.raises(ValueError, match="the second job broke"):
        side_by_side(spark, lambda: _job(spark, 1, long_task), failing)
    assert time.monotonic() - started < LONG_S / 2  # cancelled: a second or two; left to its end, LONG_S
