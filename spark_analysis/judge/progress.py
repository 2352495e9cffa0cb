"""How far the judging is. A judging task takes one nsqd's (or nsqlookupd's) traffic in order, so Spark's own progress
(tasks done of tasks) stands still for the whole of it: minutes for a large capture. Each task writes, every
``WRITTEN_EVERY_S``, how many of its server's rows it has fed to its judge and how many there are (a small JSON file
in the exchange, read whole or not at all: ``Storage.replace_text``); while the job runs, the driver reads them and
prints a line every ``SHOWN_EVERY_S``."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

import pyarrow.parquet as pq

from spark_analysis.read.storage import LOCAL, Storage, join

PROGRESS = "progress"  # the exchange's directory of the tasks' files
LINE_START = "judging: "  # a progress line's: not a step of its own (the benchmark's phases leave them out)
WRITTEN_EVERY_S = 2.0
SHOWN_EVERY_S = 10.0


class TaskProgress:
    """One judging task's rows fed, of ``total``, written where the driver reads them."""

    def __init__(self, url: str, server: str, total: int, storage: Storage = LOCAL):
        self.url, self.server, self.total, self.storage = url, server, total, storage
        self.fed = 0
        self._written_at = time.monotonic()

    def add(self, rows: int) -> None:
        self.fed += rows
        if time.monotonic() - self._written_at >= WRITTEN_EVERY_S:
            self.write()

    def write(self) -> None:
        """Where the store does not take it, the judging goes on: the next write tells the driver."""
        with suppress(OSError):
            self.storage.replace_text(self.url, json.dumps({"server": self.server, "fed": self.fed,
                                                            "total": self.total}))
        self._written_at = time.monotonic()


def task_progress(exchange_dir: str, name: str, server: str, files: list[str], storage: Storage = LOCAL
                  ) -> TaskProgress:
    """The progress, under ``name``, of a task judging ``server``'s rows in the Parquet ``files``: as many as their
    footers say they hold."""
    total = 0
    for url in files:
        with storage.open_input(url) as source:
            total += pq.ParquetFile(source).metadata.num_rows
    progress = TaskProgress(join(exchange_dir, PROGRESS, f"{name}.json"), server, total, storage)
    progress.write()  # known from the start: a server is as far as its slowest share
    return progress


def progress_line(reports: list[dict]) -> str | None:
    """The tasks' ``reports`` in one line: each server as far as its slowest share (the job ends with it); None
    while no server's slowest share has fed a row."""
    slowest: dict[str, dict] = {}
    for report in reports:
        if report["server"] not in slowest or report["fed"] < slowest[report["server"]]["fed"]:
            slowest[report["server"]] = report
    fed = sum(report["fed"] for report in slowest.values())
    total = sum(report["total"] for report in slowest.values())
    if not fed or not total:
        return None
    return f"{LINE_START}{fed:,} of {total:,} rows ({100 * fed // total} %) of {len(slowest)} server(s)"


@contextmanager
def progress_shown(exchange_dir: str, step: Callable[[str], None], storage: Storage = LOCAL) -> Iterator[None]:
    """While the block runs (the judging jobs), ``step`` is given ``progress_line`` of the tasks' files every
    ``SHOWN_EVERY_S``, and once more at its end: a judging shorter than that gets no line."""
    directory = join(exchange_dir, PROGRESS)
    storage.make_directory(directory)
    started, done = time.monotonic(), threading.Event()

    def show() -> None:
        while not done.wait(SHOWN_EVERY_S):
            _show(directory, step, storage)

    thread = threading.Thread(target=show, name="judging progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
    if time.monotonic() - started >= SHOWN_EVERY_S:
        _show(directory, step, storage)


def _show(directory: str, step: Callable[[str], None], storage: Storage) -> None:
    line = progress_line(list(_reports(directory, storage)))
    if line is not None:
        step(line)


def _reports(directory: str, storage: Storage) -> Iterator[dict]:
    """The tasks' files as read now: one being replaced, or a store that does not answer, is read the next time (the
    judging goes on either way)."""
    try:
        urls = storage.files(directory, ".json")
    except OSError:
        return
    for url in urls:
        try:
            yield json.loads(storage.read_text(url))
        except (OSError, ValueError):
            continue
