"""Mutation testing of the suite: run it against every fault of ``faults.py`` and report which cases kill each.

For each fault a reference broker of its own starts (``EmbeddedBroker`` with the fault's profile) behind two
``FaultyProxy``s (TCP and HTTP), and ``python -m conformance --strict`` judges the proxies, nsqd cases only (the
nsqlookupd cases judge another program). A persistence fault instead restarts the broker through ``amnesiac.py``
(``--restart-command``) and runs the restart cases (``NSQ-RST``), one at a time as the suite does with it. A fault
is *killed* when some case FAILs; the controls (``none``, ``none-restart``) must pass every case, or the harness is
wrong and the run says so (exit 2). Each run is bounded in time; at most ``--jobs`` run at once.

Writes ``<reports>/mutation.json`` and ``<reports>/mutation.md`` (the score; per fault the killing cases, or, for a
survivor, the requirements whose cases should have caught it) and each run's suite report under ``runs/<fault>/``.
Exit status: 0 at a 100 % score, 1 below, 2 when a control fails or a run cannot be judged.

    python -m conformance.selftest.mutation [--fault NAME ...] [--jobs 2] [-- PYTEST ARGS]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

from conformance.selftest import amnesiac
from conformance.selftest.faults import BY_NAME, FAULTS, Fault
from conformance.selftest.proxy import FaultyProxy
from conformance.target import EmbeddedBroker, Profile, free_loopback_address, parse_address, restart_with_command

ROOT = Path(__file__).parents[2]
CONTROLS = ("none", "none-restart")


def run_fault(fault: Fault, reports: Path, workers: int, timeout: float, pytest_args: list[str]) -> dict:
    """One suite run against ``fault``: its verdicts, and the cases that FAILed or ERRORed."""
    run_dir = reports / "runs" / fault.name
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    started = time.monotonic()
    with ExitStack() as stack:
        if fault.restart:
            options = _restartable(fault, run_dir, stack)
        else:
            broker, proxies = _proxied_broker(fault, run_dir, stack)
            options = ["--target", "%s:%d" % proxies[0].address, "--http-target", "%s:%d" % proxies[1].address,
                       "--requirement", "NSQ-", "--profile", fault.profile, "--workers", str(workers)]
            if broker.https_address:
                options += ["--https-target", "%s:%d" % broker.https_address]
        command = [sys.executable, "-m", "conformance", "--strict", "--reports-dir", str(run_dir), *options,
                   "--", "-q", "-p", "no:randomly", *pytest_args]
        outcome = bounded_run(command, run_dir / "suite.log", timeout)
    result = {"fault": fault.name, "section": fault.section, "bug": fault.bug, "wire": fault.wire,
              "requirements": list(fault.requirements), "seconds": round(time.monotonic() - started, 1)}
    report = run_dir / "report.json"
    if outcome != "finished" or not report.is_file():
        return {**result, "status": "error", "why": outcome if outcome != "finished" else "no report.json"}
    cases = json.loads(report.read_text())["cases"]
    # a failed setup step is the broker's doing too: the gate fails on it
    failed = sorted(case["id"] for case in cases if case["verdict"] in ("FAIL", "PRECONDITION"))
    errors = sorted(case["id"] for case in cases if case["verdict"] == "ERROR")
    result.update(cases=len(cases), killed_by=failed, errors=errors,
                  messages={case["id"]: case["message"].splitlines()[0] if case["message"] else ""
                            for case in cases if case["verdict"] in ("FAIL", "PRECONDITION", "ERROR")})
    if fault.name in CONTROLS:
        return {**result, "status": "control passes" if not failed and not errors else "control FAILS"}
    return {**result, "status": "killed" if failed else "survived"}


def _proxied_broker(fault: Fault, run_dir: Path, stack: ExitStack) -> tuple[EmbeddedBroker, list[FaultyProxy]]:
    """A reference broker behind a TCP and an HTTP proxy with the fault. The proxies stand in for it: it names their
    ports to nsqlookupd (--broadcast-*-port, R-02) and the HTTP proxy names them in /info."""
    tcp, http = FaultyProxy(None, fault), FaultyProxy(None, fault)
    for proxy in (tcp, http):
        stack.callback(proxy.stop)
    profile = Profile.load(fault.profile)
    profile = replace(profile, broker_flags=(*profile.broker_flags, f"--broadcast-tcp-port={tcp.address[1]}",
                                             f"--broadcast-http-port={http.address[1]}"))
    broker = stack.enter_context(EmbeddedBroker(profile, run_dir / "broker.log"))
    tcp.upstream, http.upstream = broker.tcp_address, broker.http_address
    http.info_ports = {broker.tcp_address[1]: tcp.address[1], broker.http_address[1]: http.address[1]}
    return broker, [tcp.start(), http.start()]


def _restartable(fault: Fault, run_dir: Path, stack: ExitStack) -> list[str]:
    """A reference broker that ``amnesiac.py`` restarts with the fault: the restart cases' options."""
    data, pidfile = Path(tempfile.mkdtemp(prefix="nsq-mutation-")), run_dir / "broker.pid"
    stack.callback(shutil.rmtree, data, True)
    addresses = [free_loopback_address(), free_loopback_address()]
    start = [sys.executable, "-m", "conformance.selftest.amnesiac", str(pidfile), str(data), *addresses]
    restart_with_command(shlex.join([*start, "none"]), [parse_address(address, "broker") for address in addresses])
    stack.callback(amnesiac.stop, pidfile)
    return ["--target", addresses[0], "--http-target", addresses[1], "--restart-command",
            shlex.join([*start, fault.restart]), "--requirement", "NSQ-RST"]


def bounded_run(command: list[str], log: Path, timeout: float, cwd: Path = ROOT, env: dict | None = None) -> str:
    """The command in a process group of its own, its output to ``log``, killed whole after ``timeout``."""
    with log.open("w") as output:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=output, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return f"timed out after {timeout:g} s"
    return "finished" if process.returncode in (0, 1) else f"suite exit status {process.returncode}"


def summarize(results: list[dict], seconds: float) -> dict:
    mutants = [result for result in results if result["fault"] not in CONTROLS]
    killed = [result for result in mutants if result["status"] == "killed"]
    return {"score": round(100 * len(killed) / len(mutants), 1) if mutants else None,
            "killed": len(killed), "faults": len(mutants), "wall_time_s": round(seconds, 1),
            "survivors": [result["fault"] for result in mutants if result["status"] == "survived"],
            "errors": [result["fault"] for result in results if result["status"] in ("error", "control FAILS")]}


def render_markdown(summary: dict, results: list[dict]) -> str:
    lines = ["# Mutation score of the conformance suite", "",
             f"**{summary['score']} %**: {summary['killed']} of {summary['faults']} faults killed "
             f"(wall time {summary['wall_time_s']:g} s).", ""]
    if summary["errors"]:
        lines += [f"**Harness errors** (a control fails, or a run could not be judged): "
                  f"{', '.join(summary['errors'])}", ""]
    lines += ["| fault | section | bug | on the wire | result |", "|---|---|---|---|---|"]
    for result in results:
        if result["status"] == "killed":
            shown = result["killed_by"][:4]
            outcome = f"killed by {len(result['killed_by'])}: " + ", ".join(f"`{case}`" for case in shown) + (
                ", ..." if len(result["killed_by"]) > len(shown) else "")
        elif result["status"] == "survived":
            outcome = "**survived**; should be caught by " + ", ".join(result["requirements"])
        else:
            outcome = f"**{result['status']}** {result.get('why', '')} " + ", ".join(
                f"`{case}`" for case in result.get("killed_by", []) + result.get("errors", []))
        lines.append(f"| {result['fault']} | {result['section']} | {result['bug']} | {result['wire']} | "
                     f"{outcome} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    own, pytest_args = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(prog="python -m conformance.selftest.mutation", description=__doc__.split(
        "\n\n")[0], epilog="Arguments after -- go to each suite run's pytest (e.g. -- -k 'dpub or fatal').")
    parser.add_argument("--fault", action="append", choices=sorted(BY_NAME), metavar="NAME",
                        help="only this fault (repeatable; the controls always run); default: all")
    parser.add_argument("--jobs", type=int, default=2, help="suite runs at once (default 2)")
    parser.add_argument("--workers", type=int, default=4, help="parallel cases per suite run (default 4)")
    parser.add_argument("--timeout", type=float, default=360, help="seconds per suite run (default 360)")
    parser.add_argument("--reports-dir", type=Path, default=Path("reports/mutation"))
    args = parser.parse_args(own)
    picked = [fault for fault in FAULTS if fault.name not in CONTROLS and (not args.fault or fault.name in args.fault)]
    controls = [BY_NAME["none"]] + ([BY_NAME["none-restart"]] if any(fault.restart for fault in picked) else [])
    chosen = controls + picked
    args.reports_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()

    def one(fault: Fault) -> dict:
        result = run_fault(fault, args.reports_dir, args.workers, args.timeout, pytest_args)
        shown = result.get("killed_by") or result.get("errors") or [result.get("why", "")]
        print(f"[{time.monotonic() - started:6.0f} s] {fault.name:34} {result['status']:15} "
              f"{len(result.get('killed_by', []))} failing  {shown[0] if shown else ''}", flush=True)
        return result

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(one, chosen))
    summary = summarize(results, time.monotonic() - started)
    (args.reports_dir / "mutation.json").write_text(json.dumps({"summary": summary, "faults": results}, indent=1))
    (args.reports_dir / "mutation.md").write_text(render_markdown(summary, results))
    print(f"mutation score {summary['score']} % ({summary['killed']}/{summary['faults']}), "
          f"{summary['wall_time_s']:g} s; survivors: {', '.join(summary['survivors']) or 'none'}; "
          f"report {args.reports_dir / 'mutation.md'}")
    if summary["errors"]:
        print(f"harness errors: {', '.join(summary['errors'])}", file=sys.stderr)
        return 2
    return 0 if summary["score"] == 100 else 1


if __name__ == "__main__":
    sys.exit(main())
