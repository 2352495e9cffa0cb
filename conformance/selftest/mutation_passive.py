"""Passive mutation testing: does the catalogue's judge of captures name each broker bug from the traffic alone?

For each fault of ``faults.py`` a reference broker of its own runs behind the fault's proxies, as in
``mutation.py``; the suite's traffic to the TCP and HTTP proxies is captured (``nsq-trace capture``: tcpdump, or scapy's
sniffer) while ``python -m conformance --strict`` runs, and the capture alone goes through the monitors
(``spark_analysis.judge.monitoring.judge_capture``). A fault is *named* when a broker-side violation cites an item of
the fault's requirements (``requirements.toml``'s ``source``), *seen* when the monitors find something else broken,
*missed* when they find nothing. The control (``none``) must show no broker-side violation: that is the healthy
broker's capture. The score counts the faults that change TCP traffic (hooks on commands or frames, a connection
kept open, a death); faults of the HTTP API alone are listed apart.

Writes ``<reports>/mutation-passive.json`` and ``.md``: per fault the active cases that killed it and the monitors
that named it; ``--rejudge`` judges the captures of the last run again, without running the suite. Exit status: 0
at 80 % or more, 1 below, 2 when the control shows a violation or a run fails.

    python -m conformance.selftest.mutation_passive [--fault NAME ...] [--jobs 1] [-- PYTEST ARGS]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

from conformance.catalogue import requirements
from conformance.selftest.faults import BY_NAME, FAULTS, Fault
from conformance.selftest.mutation import _proxied_broker, bounded_run
from conformance.selftest.passive_score import TARGET_SCORE, published
from conformance.spec import behaviour_ids_of


def tcp_visible(fault: Fault) -> bool:
    """The fault changes what crosses the broker's TCP port (the rest is its HTTP API's)."""
    return bool(fault.command or fault.frame or fault.keeps_client_open or fault.dies_on or fault.linger)


def expected_items(fault: Fault) -> set[str]:
    catalogue = requirements()
    return {item for requirement in fault.requirements for item in behaviour_ids_of(catalogue[requirement])}


def run_fault(fault: Fault, reports: Path, workers: int, timeout: float, pytest_args: list[str],
              own_cases: bool = False) -> dict:
    run_dir = reports / "runs" / fault.name
    run_dir.mkdir(parents=True, exist_ok=True)
    capture = run_dir / "suite.pcap"
    capture.unlink(missing_ok=True)
    started = time.monotonic()
    with ExitStack() as stack:
        broker, proxies = _proxied_broker(fault, run_dir, stack)
        port = proxies[0].address[1]
        suite = [sys.executable, "-m", "conformance", "--strict", "--reports-dir", str(run_dir / "suite"),
                 "--target", "%s:%d" % proxies[0].address, "--http-target", "%s:%d" % proxies[1].address,
                 *(option for requirement in (fault.requirements if own_cases and fault.requirements else ("NSQ-",))
                   for option in ("--requirement", requirement)),
                 "--profile", fault.profile, "--workers", str(workers),
                 "--", "-q", *pytest_args]
        http_port = proxies[1].address[1]
        outcome = bounded_run([sys.executable, "-m", "spark_analysis", "capture", "--port", str(port), "--port",
                               str(http_port), "--output", str(capture), "--", *suite], run_dir / "capture.log",
                              timeout)
    result = {"fault": fault.name, "section": fault.section, "bug": fault.bug, "tcp_visible": tcp_visible(fault),
              "expected_items": sorted(expected_items(fault)), "seconds": round(time.monotonic() - started, 1),
              "ports": [port, http_port]}
    report = run_dir / "suite" / "report.json"
    if outcome != "finished" or not capture.is_file() or not report.is_file():
        return {**result, "status": "error", "why": outcome if outcome != "finished" else "no capture or report"}
    cases = json.loads(report.read_text())["cases"]
    result["killed_by"] = sorted(case["id"] for case in cases if case["verdict"] in ("FAIL", "PRECONDITION"))
    lost = re.search(r"the kernel dropped ([\d,]+) packets", (run_dir / "capture.log").read_text(errors="replace"))
    if lost:  # the judge says "not judged" where it sees the holes; the table says how many there were
        result["why"] = f"(the capture lost {lost.group(1)} packets: the sniffer fell behind)"
    return judged(result, capture)


def judged(result: dict, capture: Path) -> dict:
    """``result`` with what the monitors found in its run's ``capture``, and its status."""
    from spark_analysis.judge.monitoring import judge_capture

    port, http_port = result["ports"]
    judges = judge_capture(str(capture), frozenset({port}), frozenset({http_port}))
    violations = [v for judge in judges.values() for v in judge.violations if v.side == "broker"]
    found = Counter(v.item for v in violations)
    result = {**result, "monitors": dict(found.most_common()), "examples": {v.item: v.describe() for v in violations}}
    named = sorted(set(found) & set(result["expected_items"]))
    if result["fault"] == "none":
        return {**result, "status": "control clean" if not found else "control VIOLATES"}
    return {**result, "status": "named" if named else "seen" if found else "missed", "named_by": named}


def current(result: dict) -> dict:
    """A run's result with what the fault's requirements cite today: the catalogue may have moved since the run."""
    fault = BY_NAME[result["fault"]]
    return {**result, "expected_items": sorted(expected_items(fault)), "tcp_visible": tcp_visible(fault)}


def summarize(results: list[dict], seconds: float) -> dict:
    scored = [r for r in results if r["fault"] != "none" and r["tcp_visible"] and r["status"] != "error"]
    named = [r["fault"] for r in scored if r["status"] == "named"]
    return {"score": round(100 * len(named) / len(scored), 1) if scored else None, "named": len(named),
            "tcp_visible_faults": len(scored), "wall_time_s": round(seconds, 1),
            "missed": [r["fault"] for r in scored if r["status"] == "missed"],
            "seen_under_another_item": [r["fault"] for r in scored if r["status"] == "seen"],
            "errors": [r["fault"] for r in results if r["status"] in ("error", "control VIOLATES")]}


def render_markdown(summary: dict, results: list[dict]) -> str:
    lines = ["# What the monitors name from captures alone", "",
             f"**{summary['score']} %**: {summary['named']} of {summary['tcp_visible_faults']} faults that change "
             f"TCP traffic named by the right item (target {TARGET_SCORE:g} %; wall time "
             f"{summary['wall_time_s']:g} s).", "",
             "| fault | TCP | active cases that killed it | monitors (broker side, count) | result |",
             "|---|---|---|---|---|"]
    for r in results:
        killed = ", ".join(f"`{case.split('::')[-1]}`" for case in r.get("killed_by", [])[:2]) or "none"
        found = ", ".join(f"{item} ×{count}" for item, count in r.get("monitors", {}).items()) or "none"
        lines.append(f"| {r['fault']} | {'yes' if r['tcp_visible'] else 'no'} | {killed} | {found} | "
                     f"{r['status']} {r.get('why', '')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    own, pytest_args = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(prog="python -m conformance.selftest.mutation_passive",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--fault", action="append", choices=sorted(BY_NAME), metavar="NAME",
                        help="only this fault (repeatable; the control always runs); default: every fault but the "
                             "restart ones")
    parser.add_argument("--jobs", type=int, default=1, help="suite runs at once (default 1)")
    parser.add_argument("--workers", type=int, default=4, help="parallel cases per suite run (default 4)")
    parser.add_argument("--timeout", type=float, default=420, help="seconds per suite run (default 420)")
    parser.add_argument("--reports-dir", type=Path, default=Path("reports/mutation-passive"))
    parser.add_argument("--rejudge", action="store_true",
                        help="run no suite: judge the captures of the last run in --reports-dir again (the monitors "
                             "changed)")
    parser.add_argument("--own-cases", action="store_true",
                        help="each fault's traffic from the cases of its own requirements only (faster; the "
                             "control runs the whole suite)")
    args = parser.parse_args(own)
    picked = [fault for fault in FAULTS if not fault.restart and fault.name != "none"
              and (not args.fault or fault.name in args.fault)]
    args.reports_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()

    def one(fault: Fault) -> dict:
        result = run_fault(fault, args.reports_dir, args.workers, args.timeout, pytest_args,
                           args.own_cases and fault.name != "none")
        print(f"[{time.monotonic() - started:6.0f} s] {fault.name:40} {result['status']:16} "
              f"{', '.join(result.get('monitors', {})) or result.get('why', '')}", flush=True)
        return result

    if args.rejudge:
        before = json.loads((args.reports_dir / "mutation-passive.json").read_text())["faults"]
        results = [judged(current(result), args.reports_dir / "runs" / result["fault"] / "suite.pcap")
                   if result["status"] != "error" else result for result in before]
    else:
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            results = list(pool.map(one, [BY_NAME["none"], *picked]))
    summary = summarize(results, time.monotonic() - started)
    return published(args.reports_dir, "mutation-passive", summary, results, render_markdown(summary, results),
                     f"named from captures: {summary['score']} % ({summary['named']}/{summary['tcp_visible_faults']})")

if __name__ == "__main__":
    sys.exit(main())
