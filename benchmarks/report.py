"""bench-results/broker.json is one file with a section per benchmark (`throughput`, `backlog`); each run
rewrites its own section and keeps the others. Also the command-line bits both broker benchmarks share."""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import subprocess

from .brokers import REFERENCE, BrokerProgram

DEFAULT_OUTPUT = "bench-results/broker.json"
NOT_BUILT = "not built"


def machine() -> dict:
    load = os.getloadavg()
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
            "load_average_at_start": [round(x, 2) for x in load]}


def now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def update_section(output: str, section: str, content: dict, merge: bool = False) -> pathlib.Path:
    """Replace `section` (or, with `merge`, update its top-level keys) in the JSON report, keeping the rest."""
    path = pathlib.Path(output)
    report = json.loads(path.read_text()) if path.exists() else {}
    if not isinstance(report, dict) or "throughput" not in report and "backlog" not in report:
        report = {}  # the old single-benchmark layout: start afresh
    if merge and isinstance(report.get(section), dict):
        report[section].update(content)
    else:
        report[section] = content
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    return path


def add_nsqd_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nsqd-bin", default=os.environ.get("NSQD_BIN") or None,
                        help="a built nsqd v1.3.0 to measure side by side (env NSQD_BIN)")
    parser.add_argument("--output", default=DEFAULT_OUTPUT)


def nsqd_program(binary: str | None) -> BrokerProgram | None:
    if not binary:
        return None
    if not os.access(binary, os.X_OK):
        raise SystemExit(f"--nsqd-bin {binary}: not an executable file")
    return BrokerProgram.nsqd(binary)


def version_of(program: BrokerProgram) -> str:
    """nsqd's --version line; for the reference broker (no --version) the checkout's commit."""
    if program.name == REFERENCE:
        return f"reference_broker at {_git_describe()}, Python {platform.python_version()}"
    result = subprocess.run([*program.argv, "--version"], capture_output=True, text=True, timeout=30)
    return (result.stdout or result.stderr).strip()


def _git_describe() -> str:
    try:
        result = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True,
                                timeout=30)
    except OSError:
        return "unknown commit"
    return result.stdout.strip() or "unknown commit"


def table(rows: list[list[str]], header: list[str], text_columns: int = 1) -> str:
    """Plain text columns: the first `text_columns` left-aligned, the (numeric) others right-aligned."""
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]

    def line(row: list[str]) -> str:
        return "  ".join(str(cell).ljust(w) if i < text_columns else str(cell).rjust(w)
                         for i, (cell, w) in enumerate(zip(row, widths, strict=True)))

    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])
