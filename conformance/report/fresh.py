"""A run starts from a clean reports directory: what an earlier run left there (its verdicts, pcaps, logs, and the
marker of a target that died during it) must never be read as this run's. A gate that found the last run's death
marker would mark every case NOT RUN and, before the gate counted those, pass having tested nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

SHARED_BROKER_LOG = "broker.log"  # written by ``python -m conformance``'s shared broker, started before pytest
_RESULTS = ("report.json", "report.html", "junit.xml")
_STATE = (".target-died", ".lookupd-died", ".target-died.running", ".lookupd-died.running")


def start_fresh(directory: Path, *, keep: tuple[str, ...] = ()) -> None:
    """Remove the suite's own files from ``directory`` (nothing else that may be there), but those in ``keep``."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in (*_RESULTS, *_STATE, "pcap", *(log.name for log in directory.glob("*.log"))):
        if name in keep:
            continue
        path = directory / name
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
