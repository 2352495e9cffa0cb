"""``--repeat N``: the same drivers judged N times in a row, each run's reports in DIR/run-<k>/, then every case
whose verdict changed between runs (the stability the baselines' exact gate needs). DIR/stability.md lists, per
driver, the cases and the verdicts each run gave."""
from __future__ import annotations

import json
import time
from pathlib import Path


def verdicts_of(reports_dir: Path, drivers: list[str]) -> dict[str, dict[str, str]]:
    """driver -> case ID -> verdict, from each driver's report.json (a driver without one: no cases)."""
    found = {}
    for driver in drivers:
        report = reports_dir / driver / "report.json"
        cases = json.loads(report.read_text())["cases"] if report.is_file() else []
        found[driver] = {case["id"]: case["verdict"] for case in cases}
    return found


def changes(runs: list[dict[str, dict[str, str]]]) -> dict[str, dict[str, list[str]]]:
    """driver -> case -> its verdict in each run, for the cases whose verdict was not the same in every run (a case
    missing from a run counts as the verdict '-')."""
    changed: dict[str, dict[str, list[str]]] = {}
    for driver in runs[0]:
        cases = sorted({case for run in runs for case in run.get(driver, {})})
        for case in cases:
            seen = [run.get(driver, {}).get(case, "-") for run in runs]
            if len(set(seen)) > 1:
                changed.setdefault(driver, {})[case] = seen
    return changed


def repeat(count: int, reports_dir: Path, drivers: list[str], judge_once) -> int:
    """``judge_once(run_reports_dir)`` ``count`` times; 1 when some verdict changed between the runs, else the worst
    exit status of the runs (1: a verdict other than the baseline's)."""
    runs, worst, started = [], 0, time.monotonic()
    for number in range(1, count + 1):
        directory = reports_dir / f"run-{number}"
        print(f"== run {number} of {count} ({time.monotonic() - started:.0f} s) ==", flush=True)
        worst = max(worst, judge_once(directory))
        runs.append(verdicts_of(directory, drivers))
    changed = changes(runs)
    lines = [f"# {count} runs of {', '.join(drivers)}: {'no verdict changed' if not changed else 'verdicts changed'}",
             "", f"{time.monotonic() - started:.0f} s in all; each run's reports in run-<k>/.", ""]
    for driver in drivers:
        cases = runs[0].get(driver, {})
        lines.append(f"- **{driver}**: {len(cases)} cases, " + (
            "; ".join(f"{case} {' '.join(seen)}" for case, seen in changed[driver].items())
            if driver in changed else "the same verdicts in every run"))
    (reports_dir / "stability.md").parent.mkdir(parents=True, exist_ok=True)
    (reports_dir / "stability.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)
    return 1 if changed else worst
