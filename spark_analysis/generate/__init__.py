"""Seeded synthetic NSQ traffic as a pcap, with the exact truth a correct analyzer must report: ``generate`` runs
one workload's simulation (``mixed.py``: every feature; ``bench.py``: nsq's bench tools' traffic, and one long
connection) writing packets through ``capture.py`` and counting the truth (``truth.py``) as it goes."""

from __future__ import annotations

import json
import os
import random
import time

from spark_analysis.generate.bench import BenchSimulation, LongSimulation
from spark_analysis.generate.capture import Capture
from spark_analysis.generate.mixed import MixedSimulation

WORKLOADS = {"mixed": MixedSimulation, "bench": BenchSimulation, "long": LongSimulation}


def generate(
    path: str,
    size: int,
    seed: int = 7,
    drop_fraction: float = 0.0,
    file_format: str = "pcap",
    progress: bool = False,
    workload: str = "mixed",
) -> dict:
    """Write ``path`` (about ``size`` bytes) and ``<stem>.truth.json``; return the truth.

    ``workload``: ``mixed`` (every feature, ~6 KB messages at ~3,000/s), ``bench`` (nsq's bench
    tools: 100-300 B messages in MPUB batches of 200, two producers and two RDY 2500 consumers) or
    ``long`` (the same traffic on a single connection that publishes and consumes)."""
    if workload not in WORKLOADS:
        raise ValueError(f"workload must be one of {', '.join(WORKLOADS)}, got {workload!r}")
    started = time.monotonic()
    rng = random.Random(seed)
    capture = Capture(path, file_format)
    simulation = WORKLOADS[workload](capture, rng, size, drop_fraction, progress)
    simulation.run()
    capture.close()
    truth = simulation.truth()
    truth["file"] = {
        "path": path,
        "bytes": os.path.getsize(path),
        "format": file_format,
        "seed": seed,
        "drop_fraction": drop_fraction,
        "workload": workload,
        "generated_seconds": round(time.monotonic() - started, 3),
        "truth": os.path.splitext(path)[0] + ".truth.json",
    }
    with open(truth["file"]["truth"], "w") as handle:
        json.dump(truth, handle, indent=1)
    return truth
