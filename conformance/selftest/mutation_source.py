"""Source-level mutation testing of the reference programs: does the suite see a one-spot bug in nsqd's or
nsqlookupd's own code?

mutmut 2.x's mutation operators (``mutmut.list_mutations`` / ``mutmut.mutate``: numbers, strings, operators,
comparisons, ``and``/``or``, keywords, arguments, assignments) enumerate the mutants of each module under test;
a seeded sample of each module's mutants runs, each in a scratch copy of ``reference_broker/`` (the working tree
is never touched): ``python -m conformance`` with that copy first on PYTHONPATH, so the embedded nsqd and
nsqlookupd the suite starts as subprocesses are the mutated ones. Each mutant runs the cases of its module (by
requirement prefix, on its profiles), one at a time, stopping at the first failure (-x), bounded in time;
``--jobs`` mutants at once. A mutant is *killed* when the suite goes red (a case FAILs or ERRORs, or the broker
does not start), *timeout* when it does not finish in time (a hang the gate would see), *survived* otherwise,
*equivalent* when ``equivalent_mutants.toml`` lists it with the reason no client can tell it apart. Mutants inside
a logging call (``log.info(...)``) are not sampled: the log is not the wire; the report counts them.

Score per module = (killed + timeout) / (sampled - equivalent). Writes ``<reports>/mutation-source.json`` and
``mutation-source.md`` (per-module scores, each survivor's diff and key, ready to list as equivalent). A control
run of each module's selection on the unmutated copy must pass, else the harness is wrong (exit 2). Exit status
1 when a module is under ``--target`` percent.

    python -m conformance.selftest.mutation_source [--module NAME ...] [--sample N] [--seed S] [--jobs 2]
        [--mutant TEXT ...] [--list]
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import os
import queue
import random
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

import mutmut

from conformance.selftest.mutation import bounded_run

ROOT = Path(__file__).parents[2]
EQUIVALENTS = Path(__file__).with_name("equivalent_mutants.toml")


@dataclass(frozen=True)
class Run:
    """One suite run of a mutant: a profile and the requirement prefixes of the cases that judge the module."""
    profile: str
    prefixes: tuple[str, ...]
    lookupd_profile: str = "nsqlookupd-defaults"

    @property
    def name(self) -> str:
        return self.profile if self.lookupd_profile == "nsqlookupd-defaults" else self.lookupd_profile


@dataclass(frozen=True)
class Module:
    name: str
    files: tuple[str, ...]
    runs: tuple[Run, ...]


_DURABILITY = ("NSQ-RST", "NSQ-DISK")
# The disk queue in use (every message past the second on disk, small files, frequent syncs): the short run, first.
_ON_DISK = Run("nsqd-durability", _DURABILITY)
_NO_MEMORY = Run("nsqd-memory-0", _DURABILITY)  # --mem-queue-size=0: every message through the disk queue (D-74)
MODULES = (
    Module("diskqueue.py", ("reference_broker/diskqueue.py",), (_ON_DISK, Run("nsqd-defaults", _DURABILITY))),
    Module("nsqd.py", ("reference_broker/nsqd.py",),
           (_ON_DISK, Run("nsqd-defaults", (*_DURABILITY, "NSQ-REG", "NSQ-ADMIN", "NSQ-EPH", "NSQ-PUB", "NSQ-HTTP")))),
    Module("topic.py", ("reference_broker/topic.py",),
           (_ON_DISK, _NO_MEMORY, Run("nsqd-defaults", (*_DURABILITY, "NSQ-PUB", "NSQ-MPUB", "NSQ-DPUB", "NSQ-FANOUT",
                                                        "NSQ-ADMIN", "NSQ-EPH", "NSQ-SEM", "NSQ-HTTP")))),
    Module("channel.py", ("reference_broker/channel.py",),
           (_ON_DISK, _NO_MEMORY, Run("nsqd-defaults", (*_DURABILITY, "NSQ-SUB", "NSQ-FIN", "NSQ-REQ", "NSQ-RDY",
                                                        "NSQ-SEM", "NSQ-FANOUT", "NSQ-ADMIN", "NSQ-EPH", "NSQ-DPUB",
                                                        "NSQ-TOUCH", "NSQ-HTTP", "NSQ-SAMPLE", "NSQ-CLS",
                                                        "NSQ-TIMEOUT")))),
    Module("lookup*.py", ("reference_broker/lookup.py", "reference_broker/lookup_peer.py"),
           (Run("nsqd-defaults", ("NSQ-REG",)),)),
    Module("nsqlookupd/", tuple(f"reference_broker/nsqlookupd/{name}" for name in (
        "http_api.py", "lookup_protocol_v1.py", "nsqlookupd.py", "options.py", "registration_db.py",
        "tcp_server.py", "__main__.py")), (Run("nsqd-defaults", ("NSQLOOKUPD",), "nsqlookupd-short-timeouts"),)),
    Module("tls.py", ("reference_broker/tls.py",),
           (Run("nsqd-tls", ("NSQ-TLS",)), Run("nsqd-tls-client-cert", ("NSQ-TLS",)))),
)
BY_NAME = {module.name: module for module in MODULES}


@dataclass(frozen=True)
class Mutant:
    module: str
    path: str  # relative to the repository
    key: str  # path::function::original => mutated: stable across edits elsewhere in the file
    line: int  # 1-based, for the report only
    mutated_source: str
    diff: str


# ---- enumerating ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Site:
    """Where mutmut can mutate: made into a Mutant only when sampled (each mutant parses the file again)."""
    module: str
    path: str
    mutation_id: mutmut.RelativeMutationID


def sites_of(module: Module) -> tuple[list[Site], int]:
    """Every mutmut mutation site of the module's files, and how many lie in a logging call (not returned)."""
    found, in_logging = [], 0
    for path in module.files:
        source = (ROOT / path).read_text()
        logging_lines = _logging_call_lines(source)
        for mutation_id in mutmut.list_mutations(mutmut.Context(source=source, filename=path)):
            if mutation_id.line_number + 1 in logging_lines:
                in_logging += 1
            else:
                found.append(Site(module.name, path, mutation_id))
    return found, in_logging


def mutants_at(sites: list[Site]) -> list[Mutant]:
    """The mutants, keyed by path, enclosing function and the changed text (a repeat within a function gets
    ``#2``...): keys survive edits elsewhere in the file."""
    found, seen = [], {}
    for site in sites:
        source = (ROOT / site.path).read_text()
        mutated, _ = mutmut.mutate(mutmut.Context(source=source, mutation_id=site.mutation_id, filename=site.path))
        lines, changed = source.splitlines(keepends=True), mutated.splitlines(keepends=True)
        old, new = _changed_lines(lines, changed)
        line = site.mutation_id.line_number + 1
        key = f"{site.path}::{_enclosing_functions(source).get(line, '<module>')}::{' '.join(old)} => {' '.join(new)}"
        seen[key] = seen.get(key, 0) + 1
        if seen[key] > 1:
            key += f" #{seen[key]}"
        diff = "".join(difflib.unified_diff(lines, changed, site.path, site.path + " (mutant)", n=1))
        found.append(Mutant(site.module, site.path, key, line, mutated, diff))
    return found


def _changed_lines(lines: list[str], changed: list[str]) -> tuple[list[str], list[str]]:
    matcher = difflib.SequenceMatcher(a=lines, b=changed, autojunk=False)
    old, new = [], []
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag != "equal":
            old += [line.strip() for line in lines[a0:a1]]
            new += [line.strip() for line in changed[b0:b1]]
    return old, new


def _enclosing_functions(source: str) -> dict[int, str]:
    """Line -> the qualified name of the innermost function or class around it."""
    names: dict[int, str] = {}

    def visit(node, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                qualname = f"{prefix}{child.name}"
                for line in range(child.lineno, child.end_lineno + 1):
                    names[line] = qualname
                visit(child, qualname + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return names


def _logging_call_lines(source: str) -> set[int]:
    """The lines of every ``log.<level>(...)`` call."""
    return {line for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "log"
            for line in range(node.lineno, node.end_lineno + 1)}


def load_equivalents(path: Path = EQUIVALENTS) -> dict[str, str]:
    """key -> why no client can tell the mutant from the original."""
    if not path.is_file():
        return {}
    return {entry["key"]: entry["reason"] for entry in tomllib.loads(path.read_text()).get("equivalent", [])}


def sample(sites: list[Site], size: int, seed: int, module: str) -> list[Site]:
    """A deterministic sample: the same seed, module and sources give the same mutants."""
    if size <= 0 or size >= len(sites):
        return sites
    chosen = random.Random(f"{seed}:{module}").sample(range(len(sites)), size)
    return [sites[index] for index in sorted(chosen)]


# ---- running ----------------------------------------------------------------------------------------------

class Slots:
    """One scratch copy of ``reference_broker/`` per concurrent run; a mutant is written into it and taken out
    afterwards. Bytecode is never written there, so a copy's .pyc can never stand in for a mutated source."""

    def __init__(self, count: int):
        self.root = Path(tempfile.mkdtemp(prefix="nsq-mutation-source-"))
        self.free: queue.Queue[Path] = queue.Queue()
        for number in range(count):
            slot = self.root / f"slot{number}"
            shutil.copytree(ROOT / "reference_broker", slot / "reference_broker",
                            ignore=shutil.ignore_patterns("__pycache__"))
            self.free.put(slot)

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def environment(slot: Path) -> dict[str, str]:
    path = os.pathsep.join(filter(None, (str(slot), os.environ.get("PYTHONPATH"))))
    return {**os.environ, "PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1"}


def check_isolation(slot: Path) -> None:
    """The runs must import the scratch copy, not the working tree's reference_broker."""
    where = subprocess.run([sys.executable, "-c", "import reference_broker; print(reference_broker.__file__)"],
                           cwd=slot, env=environment(slot), capture_output=True, text=True, check=True).stdout
    if not Path(where.strip()).is_relative_to(slot):
        raise SystemExit(f"mutation-source: the runs would import {where.strip()}, not the scratch copy {slot}")


def run_suite(slot: Path, run: Run, reports: Path, timeout: float) -> dict:
    """One bounded, sequential, stop-at-the-first-failure suite run against the slot's reference programs."""
    shutil.rmtree(reports, ignore_errors=True)
    reports.mkdir(parents=True)
    prefixes = [argument for prefix in run.prefixes for argument in ("--requirement", prefix)]
    command = [sys.executable, "-m", "conformance", "--strict", "--profile", run.profile, "--lookupd-profile",
               run.lookupd_profile, "--workers", "0", "--reports-dir", str(reports), *prefixes,
               "--", "-x", "-q", "-p", "no:randomly"]
    started = time.monotonic()
    outcome = bounded_run(command, reports / "suite.log", timeout, cwd=slot, env=environment(slot))
    seconds = round(time.monotonic() - started, 1)
    if outcome.startswith("timed out"):
        return {"status": "timeout", "seconds": seconds, "by": f"{run.name}: no verdict, {outcome}"}
    report = reports / "report.json"
    cases = json.loads(report.read_text())["cases"] if report.is_file() else []
    failed = [case for case in cases if case["verdict"] in ("FAIL", "ERROR")]
    broken_cleanup = _teardown_errors(reports / "junit.xml")
    if broken_cleanup and not failed:
        # pytest stopped (-x) at a case whose clean-up found the broker broken; the verdicts leave clean-ups out
        return {"status": "killed", "seconds": seconds, "by": f"{run.name}: {broken_cleanup[0]} ERROR at teardown",
                "why": "the case's clean-up (e.g. /topic/delete) got no answer"}
    if outcome == "finished" and not failed:
        return {"status": "survived", "seconds": seconds, "cases": len(cases)}
    if failed:
        first = failed[0]
        message = (first["message"] or "").strip().splitlines()
        return {"status": "killed", "seconds": seconds, "by": f"{run.name}: {first['id']} {first['verdict']}",
                "why": message[-1][:200] if message else ""}
    tail = (reports / "suite.log").read_text(errors="replace").strip().splitlines()
    return {"status": "killed", "seconds": seconds, "by": f"{run.name}: {outcome}",
            "why": tail[-1][:200] if tail else ""}


def _detected_in(report: Path) -> dict[str, dict]:
    """key -> result of the mutants a previous run detected (killed or timed out)."""
    try:
        results = json.loads(report.read_text())["results"]
    except (OSError, ValueError, KeyError) as error:
        raise SystemExit(f"mutation-source: --rerun {report}: not a mutation-source.json ({error})") from None
    return {result["key"]: result for result in results if result["status"] in ("killed", "timeout")}


def _teardown_errors(junit: Path) -> list[str]:
    """Cases whose teardown raised (JUnit <error message="failed on teardown ...">)."""
    if not junit.is_file():
        return []
    return [f"cases/{case.get('classname', '').split('.')[-1]}.py::{case.get('name')}"
            for case in ElementTree.parse(junit).iter("testcase")
            for error in case.iter("error") if (error.get("message") or "").startswith("failed on teardown")]


def run_mutant(mutant: Mutant, module: Module, slots: Slots, reports: Path, timeouts: dict) -> dict:
    slot = slots.free.get()
    target = slot / mutant.path
    original = target.read_text()
    try:
        target.write_text(mutant.mutated_source)
        outcome: dict = {}
        for number, run in enumerate(module.runs):
            outcome = run_suite(slot, run, reports / "runs" / f"{slot.name}-{number}", timeouts[module.name, run])
            if outcome["status"] != "survived":
                break
    finally:
        target.write_text(original)
        slots.free.put(slot)
    return {"module": mutant.module, "key": mutant.key, "line": mutant.line, "diff": mutant.diff, **outcome}


def run_controls(modules: list[Module], slots: Slots, reports: Path) -> dict[tuple[str, Run], float]:
    """Each module's selection on the unmutated copy: it must pass; its time bounds the mutants' runs."""
    timeouts: dict[tuple[str, Run], float] = {}
    jobs = [(module, run) for module in modules for run in module.runs]

    def control(job):
        module, run = job
        slot = slots.free.get()
        try:
            return job, run_suite(slot, run, reports / "controls" / f"{module.name.strip('*/.')}-{run.name}", 900)
        finally:
            slots.free.put(slot)

    with ThreadPoolExecutor(slots.free.qsize()) as pool:
        for (module, run), outcome in pool.map(control, jobs):
            verdict = "passes" if outcome["status"] == "survived" else "FAILS"
            print(f"control {module.name} {run.name}: {verdict} in {outcome['seconds']:g} s "
                  f"({outcome.get('cases', 0)} cases)", flush=True)
            if outcome["status"] != "survived":
                raise SystemExit(f"mutation-source: the unmutated {module.name} fails its own selection "
                                 f"({outcome.get('by')}: {outcome.get('why', '')}): the harness is wrong")
            timeouts[module.name, run] = 2 * outcome["seconds"] + 30
    return timeouts


# ---- reporting ----------------------------------------------------------------------------------------------

def summarize(modules: list[Module], counts: dict[str, dict], results: list[dict], target: float) -> dict:
    per_module = {}
    for module in modules:
        mine = [result for result in results if result["module"] == module.name]
        tally = {status: sum(result["status"] == status for result in mine)
                 for status in ("killed", "timeout", "survived", "equivalent")}
        judged = len(mine) - tally["equivalent"]
        score = round(100 * (tally["killed"] + tally["timeout"]) / judged, 1) if judged else None
        per_module[module.name] = {**counts[module.name], "sampled": len(mine), **tally, "score": score,
                                   "meets_target": score is not None and score >= target}
    return per_module


def render_markdown(summary: dict, results: list[dict]) -> str:
    lines = ["# Source-level mutation score of the conformance suite", "",
             f"mutmut {summary['mutmut']} operators; seed {summary['seed']}, sample {summary['sample']} per module; "
             f"wall time {summary['wall_time_s']:g} s; target {summary['target']:g} %."
             + (f" {summary['carried_over']} detected mutants carried over from {summary['rerun_of']} (cases are "
                "only ever added), the rest run again." if summary["rerun_of"] else ""), "",
             "Score = (killed + timeout) / (sampled - equivalent).", "",
             "| module | mutants | in log calls | sampled | killed | timeout | survived | equivalent | score |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, row in summary["modules"].items():
        score = "n/a" if row["score"] is None else f"{row['score']:g} %" + ("" if row["meets_target"] else " **<**")
        lines.append(f"| {name} | {row['mutants']} | {row['in_logging']} | {row['sampled']} | {row['killed']} | "
                     f"{row['timeout']} | {row['survived']} | {row['equivalent']} | {score} |")
    survivors = [result for result in results if result["status"] == "survived"]
    lines += ["", f"## Survivors ({len(survivors)})", "",
              "Each needs a case that kills it, or an entry in conformance/selftest/equivalent_mutants.toml:", ""]
    for result in survivors:
        lines += [f"### {result['module']} line {result['line']}", "", "```toml", "[[equivalent]]",
                  f"key = {json.dumps(result['key'])}", 'reason = ""', "```", "", "```diff", result["diff"].rstrip(),
                  "```", ""]
    killed = [result for result in results if result["status"] in ("killed", "timeout")]
    lines += ["", f"## Killed ({len(killed)})", "", "| module | line | mutant | by |", "|---|---|---|---|"]
    for result in killed:
        mutant = result["key"].split("::", 2)[-1].replace("|", "\\|")
        lines.append(f"| {result['module']} | {result['line']} | `{mutant[:110]}` | {result.get('by', '')} |")
    return "\n".join(lines) + "\n"


# ---- main -----------------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.selftest.mutation_source",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--module", action="append", choices=list(BY_NAME), help="only these modules (repeatable)")
    parser.add_argument("--sample", type=int, default=20, help="mutants per module, seeded (0 = all; default 20)")
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument("--jobs", type=int, default=2, help="mutants run at once (default 2)")
    parser.add_argument("--mutant", action="append", default=[],
                        help="only the sampled mutants whose key contains this text (repeatable)")
    parser.add_argument("--target", type=float, default=90.0, help="per-module score to reach (default 90)")
    parser.add_argument("--reports-dir", type=Path, default=Path("reports/mutation-source"))
    parser.add_argument("--list", action="store_true", help="list the sampled mutants' keys, run nothing")
    parser.add_argument("--rerun", type=Path, metavar="JSON",
                        help="a previous mutation-source.json: its killed and timed-out mutants are carried over "
                             "(cases are only ever added, so they stay detected), the rest run again")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.jobs < 1:
        parser.error("--jobs must be >= 1")
    modules = [BY_NAME[name] for name in args.module] if args.module else list(MODULES)
    equivalents = load_equivalents()
    detected = _detected_in(args.rerun) if args.rerun else {}
    chosen: list[tuple[Module, Mutant]] = []
    counts = {}
    for module in modules:
        sites, in_logging = sites_of(module)
        picked = mutants_at(sample(sites, args.sample, args.seed, module.name))
        if args.mutant:
            picked = [mutant for mutant in picked if any(text in mutant.key for text in args.mutant)]
        counts[module.name] = {"mutants": len(sites), "in_logging": in_logging}
        chosen += [(module, mutant) for mutant in picked]
        print(f"{module.name}: {len(sites)} mutants ({in_logging} more in log calls), {len(picked)} sampled",
              flush=True)
    if args.list:
        for _, mutant in chosen:
            print(mutant.key)
        return 0
    reports = args.reports_dir.resolve()
    reports.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    slots = Slots(args.jobs)
    try:
        check_isolation(slots.free.queue[0])
        to_run = {module for module, mutant in chosen if mutant.key not in equivalents and mutant.key not in detected}
        timeouts = run_controls(sorted(to_run, key=modules.index), slots, reports)  # the modules with runs to bound
        results: list[dict] = []

        def one(item):
            module, mutant = item
            if mutant.key in equivalents:
                return {"module": mutant.module, "key": mutant.key, "line": mutant.line, "diff": mutant.diff,
                        "status": "equivalent", "why": equivalents[mutant.key], "seconds": 0}
            if mutant.key in detected:
                return {**detected[mutant.key], "carried_from": str(args.rerun)}
            return run_mutant(mutant, module, slots, reports, timeouts)

        with ThreadPoolExecutor(args.jobs) as pool:
            for number, result in enumerate(pool.map(one, chosen), 1):
                results.append(result)
                print(f"[{number}/{len(chosen)}] {result['status']:10} {result['seconds']:6.1f} s  "
                      f"{result['key'].split('::', 1)[-1][:100]}  {result.get('by', '')}", flush=True)
    finally:
        slots.remove()
    summary = {"mutmut": mutmut.__version__, "seed": args.seed, "sample": args.sample, "target": args.target,
               "carried_over": sum("carried_from" in result for result in results),
               "rerun_of": str(args.rerun) if args.rerun else None,
               "wall_time_s": round(time.monotonic() - started, 1),
               "modules": summarize(modules, counts, results, args.target)}
    (reports / "mutation-source.json").write_text(json.dumps({**summary, "results": results}, indent=1) + "\n")
    (reports / "mutation-source.md").write_text(render_markdown(summary, results))
    for name, row in summary["modules"].items():
        print(f"{name:14} {row['score']} %  killed {row['killed']} timeout {row['timeout']} survived "
              f"{row['survived']} equivalent {row['equivalent']} of {row['sampled']} sampled ({row['mutants']})")
    print(f"wrote {reports / 'mutation-source.md'} ({summary['wall_time_s']:g} s)")
    return 0 if all(row["meets_target"] for row in summary["modules"].values() if row["sampled"]) else 1


if __name__ == "__main__":
    sys.exit(main())
