"""``nsq-conformance clients`` / ``python -m conformance.clients``: the toolkit plays nsqd and judges NSQ client
libraries, one driver after another; reports per driver under --reports-dir/<driver>/.

Exit status: 0 when every driver's verdicts are its baseline's, 1 when some differ, 2 for a bad option."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from conformance.clients.driver import drivers

PACKAGE_DIR = Path(__file__).parent


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def parse_args(argv: list[str]):
    known = drivers()
    parser = OneLineParser(prog="nsq-conformance clients", description=__doc__.split("\n\n")[0],
                           epilog="Arguments after -- go to pytest unchanged (e.g. -- -k HB -x).")
    parser.add_argument("drivers", nargs="*", metavar="DRIVER",
                        help=f"drivers to run (default: all of {', '.join(known)} that are available)")
    parser.add_argument("--reports-dir", default="reports/clients", metavar="DIR")
    parser.add_argument("--baseline", metavar="FILE", help="one driver only: its verdicts to expect ('none': "
                        "no baseline, any FAIL or ERROR fails the run)")
    parser.add_argument("--jobs", type=int, default=3, metavar="N",
                        help="drivers judged at once, each in its own process (default 3; their cases mostly wait)")
    parser.add_argument("--write-baseline", action="store_true",
                        help="write each driver's measured verdicts as its baseline (explanations kept)")
    parser.add_argument("--fault", metavar="NAME", help="selftest: break the client's output with this fault")
    parser.add_argument("--repeat", type=int, default=1, metavar="N",
                        help="judge the drivers N times in a row (reports in DIR/run-<k>/) and report every verdict "
                        "that changed between runs (exit 1 if one did)")
    argv = list(argv)
    passthrough = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    unknown = [name for name in args.drivers if name not in known]
    if unknown:
        parser.error(f"unknown driver(s) {', '.join(unknown)} (known: {', '.join(known)})")
    for name in args.drivers:
        if not known[name].available:
            parser.error(f"driver {name} is built locally: set {known[name].built} to its program "
                         "(conformance/clients/README.md)")
    args.drivers = args.drivers or [name for name, driver in known.items() if driver.available]
    if args.jobs < 1:
        parser.error("--jobs must be >= 1")
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")
    if args.repeat > 1 and args.write_baseline:
        parser.error("--repeat and --write-baseline: write a baseline from one run")
    if args.baseline not in (None, "none") and not Path(args.baseline).is_file():
        parser.error(f"no baseline file {args.baseline}")
    if args.fault:
        from conformance.clients.selftest.faults import FAULTS
        if args.fault not in FAULTS:
            parser.error(f"unknown fault {args.fault} (selftest/faults.py: {', '.join(sorted(FAULTS))})")
    if args.baseline and len(args.drivers) > 1:
        parser.error("--baseline names one driver's verdicts: name one driver")
    return args, passthrough


def pytest_arguments(driver: str, args, passthrough: list[str]) -> list[str]:
    reports = Path(args.reports_dir) / driver
    arguments = [str(PACKAGE_DIR / "cases"), "-c", str(PACKAGE_DIR / "clients.ini"), "--rootdir", str(PACKAGE_DIR),
                 "-p", "no:cacheprovider", "-p", "conformance.clients.plugin", "--client-driver", driver,
                 "--client-reports-dir", str(reports), "--junitxml", str(reports / "junit.xml"), "-q"]
    if args.baseline:
        arguments += ["--client-baseline", args.baseline]
    if args.fault:
        arguments += ["--client-fault", args.fault]
    if args.write_baseline:
        arguments.append("--client-write-baseline")
    return arguments + passthrough


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args, passthrough = parse_args(argv)
    if args.repeat > 1:
        from conformance.clients.repeat import repeat
        once = _without_option(argv, "--repeat")
        return repeat(args.repeat, Path(args.reports_dir), args.drivers, lambda directory: main(
            ["--reports-dir", str(directory), *_without_option(once, "--reports-dir")]))
    worst = _in_parallel(args, argv) if len(args.drivers) > 1 and args.jobs > 1 else _one_by_one(args, passthrough)
    if len(args.drivers) > 1:
        from conformance.clients.matrix import load, write_matrix
        page = write_matrix(Path(args.reports_dir), load(Path(args.reports_dir), args.drivers))
        print(f"all libraries: {page}  {page.with_name('table.md')}", flush=True)
    return worst


def _without_option(argv: list[str], option: str) -> list[str]:
    """``argv`` without ``option`` and its value (``--option V`` or ``--option=V``), before any ``--``."""
    end = argv.index("--") if "--" in argv else len(argv)
    kept, skip = [], False
    for position, arg in enumerate(argv):
        if position >= end:
            kept.append(arg)
        elif skip:
            skip = False
        elif arg == option:
            skip = True
        elif not arg.startswith(option + "="):
            kept.append(arg)
    return kept


def _one_by_one(args, passthrough: list[str]) -> int:
    import pytest
    worst = 0
    for driver in args.drivers:
        print(f"== {driver} ==", flush=True)
        code = pytest.main(pytest_arguments(driver, args, passthrough))
        worst = max(worst, int(code) if code in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED) else 2)
    return worst


def _in_parallel(args, argv: list[str]) -> int:
    """One process per driver, ``--jobs`` at a time; each one's output goes to its reports folder. It is shown whole
    only when that driver's verdicts differ from its baseline or its run broke: a CI log then shows what changed,
    not the failures every baseline expects. One line of progress per driver."""
    own = [arg for arg in (argv[:argv.index("--")] if "--" in argv else argv) if arg not in args.drivers]
    rest = argv[argv.index("--"):] if "--" in argv else []
    pending, running, worst = list(args.drivers), {}, 0
    started = time.monotonic()
    while pending or running:
        while pending and len(running) < args.jobs:
            driver = pending.pop(0)
            output = Path(args.reports_dir) / driver / "output.txt"
            output.parent.mkdir(parents=True, exist_ok=True)
            handle = output.open("w")
            running[driver] = (subprocess.Popen([sys.executable, "-m", "conformance.clients", driver, *own, "--jobs",
                                                 "1", *rest], stdout=handle, stderr=subprocess.STDOUT), handle, output)
            print(f"[{time.monotonic() - started:5.0f} s] {driver}: started", flush=True)
        time.sleep(0.2)
        for driver, (process, handle, output) in list(running.items()):
            if process.poll() is None:
                continue
            handle.close()
            del running[driver]
            code = process.returncode
            worst = max(worst, code if code in (0, 1) else 2)
            if code != 0:
                print(output.read_text(), end="")
            verdict = (f"every verdict as its baseline (pytest: {_last_line(output)}; whole output: {output})"
                       if code == 0 else "verdicts differ from the baseline" if code == 1 else f"exit {code}")
            print(f"[{time.monotonic() - started:5.0f} s] {driver}: {verdict}", flush=True)
    return worst


def _last_line(output: Path) -> str:
    """pytest's closing line, its counts: ``== 30 failed, 12 passed in 2.1s ==``, without the rulers."""
    lines = [line for line in output.read_text().splitlines() if line.strip()]
    return lines[-1].strip("= ") if lines else "no output"


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    sys.exit(main())
