"""Passive selftest of the client monitors: does the judge of a client's traffic name each client fault from the
traffic and what the application asked of the library?

For each fault of ``faults.py`` the model client runs through the fault's proxy in the fault's cases (as
test_faults.py runs it, without a baseline); the fake nsqd records both directions of every connection, and the
catalogue's monitors judge that record with what the application asked (conformance/clients/monitoring.py and
application.py: what the driver was told, the handler's order in each body sent), none of the cases' own checks.
A fault is *named* when a client-side violation cites one of its cases' items (the NSQC item, or a behaviour item
the item's ``source`` cites), *seen* when the monitors find only other items broken, *missed*
when they find nothing. The control (``faithful``) must show nothing. The score counts the faults that change what
reaches nsqd (``Fault.nsqd_sees``); those that change only the client's /lookup queries, or only what it reads, are
listed apart.

Writes ``<reports>/clients-passive.json`` and ``.md``. Exit status: 0 at 80 % or more, 1 below, 2 when the control
shows a violation or a run fails.

    python -m conformance.clients.selftest.passive [--fault NAME ...] [--jobs 2] [--reports-dir DIR]
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from conformance.clients.catalogue import REQUIREMENTS
from conformance.clients.selftest.faults import FAULTS, Fault
from conformance.selftest.passive_score import TARGET_SCORE, published
from conformance.spec import behaviours

CONTROL = "faithful"
RUN_TIMEOUT_S = 300


def expected_items(fault: Fault) -> set[str]:
    """The fault's cases' items and the behaviour items their sources cite ("ID-02, C-32; go-nsq Config...")."""
    known = behaviours()
    cited = {word for case in fault.kills for word in re.findall(r"[A-Z][A-Z0-9-]*-\d+", REQUIREMENTS[case].source)}
    return set(fault.kills) | (cited & known.keys())


def run_fault(fault: Fault, reports: Path) -> dict:
    """The fault's cases with the model client through its proxy; what the monitors found in their traffic."""
    selection = fault.selection or fault.kills
    run_dir = reports / "runs" / fault.name
    started = time.monotonic()
    result = {"fault": fault.name, "text": fault.text, "nsqd_sees": fault.nsqd_sees,
              "expected_items": sorted(expected_items(fault))}
    try:
        subprocess.run([sys.executable, "-m", "conformance.clients", "model", "--fault", fault.name, "--baseline",
                        "none", "--reports-dir", str(run_dir), "--", "-k", " or ".join(selection), "-p",
                        "no:randomly"], capture_output=True, timeout=RUN_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return {**result, "status": "error", "why": f"no end within {RUN_TIMEOUT_S} s"}
    report = run_dir / "model" / "report.json"
    if not report.is_file():
        return {**result, "status": "error", "why": "no report"}
    cases = json.loads(report.read_text())["cases"]
    found = [{**finding, "case": case["id"]} for case in cases for finding in case["monitors"]]
    return judged({**result, "seconds": round(time.monotonic() - started, 1),
                   "verdicts": {case["id"]: case["verdict"] for case in cases}, "found": found})


def judged(result: dict) -> dict:
    client = [finding for finding in result["found"] if finding["side"] == "client"]
    broker = [finding for finding in result["found"] if finding["side"] != "client"]
    items = sorted({finding["item"] for finding in client})
    named = sorted(set(items) & set(result["expected_items"]))
    result = {**result, "client_items": items, "broker_items": sorted({finding["item"] for finding in broker}),
              "named_by": named}
    if broker:
        return {**result, "status": "error", "why": "the fake nsqd broke a rule"}
    if result["fault"] == CONTROL:
        return {**result, "status": "control clean" if not client else "control VIOLATES"}
    return {**result, "status": "named" if named else "seen" if client else "missed"}


def summarize(results: list[dict], seconds: float) -> dict:
    scored = [r for r in results if r["fault"] != CONTROL and r["nsqd_sees"] and r["status"] != "error"]
    named = [r["fault"] for r in scored if r["status"] == "named"]
    return {"score": round(100 * len(named) / len(scored), 1) if scored else None, "named": len(named),
            "faults_reaching_nsqd": len(scored), "wall_time_s": round(seconds, 1),
            "missed": [r["fault"] for r in scored if r["status"] == "missed"],
            "seen_under_another_item": [r["fault"] for r in scored if r["status"] == "seen"],
            "errors": [r["fault"] for r in results if r["status"] in ("error", "control VIOLATES")]}


def render_markdown(summary: dict, results: list[dict]) -> str:
    lines = ["# What the client monitors name from the traffic and the application's settings", "",
             f"**{summary['score']} %**: {summary['named']} of {summary['faults_reaching_nsqd']} client faults that "
             f"change what reaches nsqd named by the right item (target {TARGET_SCORE:g} %; wall time "
             f"{summary['wall_time_s']:g} s).", "",
             "| fault | reaches nsqd | its cases' items | monitors (client side) | result |", "|---|---|---|---|---|"]
    for r in results:
        kills = ", ".join(item for item in r["expected_items"] if item.startswith("NSQC-")) or "-"
        lines.append(f"| {r['fault']} | {'yes' if r['nsqd_sees'] else 'no'} | {kills} | "
                     f"{', '.join(r.get('client_items', [])) or '-'} | {r['status']} {r.get('why', '')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.clients.selftest.passive",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--fault", action="append", choices=sorted(FAULTS), metavar="NAME",
                        help="only this fault (repeatable; the control always runs); default: every fault")
    parser.add_argument("--jobs", type=int, default=2, help="faults run at once (default 2)")
    parser.add_argument("--reports-dir", type=Path, default=Path("reports/clients-passive"))
    args = parser.parse_args(argv)
    picked = [FAULTS[CONTROL], *(fault for name, fault in FAULTS.items()
                                 if name != CONTROL and (not args.fault or name in args.fault))]
    args.reports_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()

    def one(fault: Fault) -> dict:
        result = run_fault(fault, args.reports_dir)
        print(f"[{time.monotonic() - started:6.0f} s] {fault.name:28} {result['status']:16} "
              f"{', '.join(result.get('client_items', [])) or result.get('why', '')}", flush=True)
        return result

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(one, picked))
    summary = summarize(results, time.monotonic() - started)
    return published(args.reports_dir, "clients-passive", summary, results, render_markdown(summary, results),
                     f"named by the monitors: {summary['score']} % ({summary['named']}/"
                     f"{summary['faults_reaching_nsqd']})" if summary["score"] is not None else
                     "no fault picked changes what reaches nsqd: none scored (their findings are listed above)")


if __name__ == "__main__":
    sys.exit(main())
