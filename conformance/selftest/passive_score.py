"""What the passive harnesses (mutation_passive.py for brokers, clients/selftest/passive.py for client libraries)
publish: their results as JSON and Markdown, the score in one line, and the exit status a CI gate reads."""

from __future__ import annotations

import json
import sys
from pathlib import Path

TARGET_SCORE = 80.0  # issue 32: the monitors name this share of the faults that change the traffic, by the right item


def published(reports_dir: Path, stem: str, summary: dict, results: list[dict], markdown: str, score: str) -> int:
    """Writes ``<stem>.json`` and ``<stem>.md``, prints ``score`` (what was named, of what) with the wall time, the
    missed faults and the report; returns 2 on the harness's own errors, 0 at ``TARGET_SCORE`` or above, else 1."""
    (reports_dir / f"{stem}.json").write_text(json.dumps({"summary": summary, "faults": results}, indent=1))
    (reports_dir / f"{stem}.md").write_text(markdown)
    print(f"{score}, {summary['wall_time_s']:g} s; missed: {', '.join(summary['missed']) or 'none'}; report "
          f"{reports_dir / f'{stem}.md'}")
    if summary["errors"]:
        print(f"harness errors: {', '.join(summary['errors'])}", file=sys.stderr)
        return 2
    return 0 if summary["score"] is not None and summary["score"] >= TARGET_SCORE else 1
