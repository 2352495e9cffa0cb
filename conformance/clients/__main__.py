"""``nsq-conformance clients`` / ``python -m conformance.clients``: the toolkit plays nsqd and judges NSQ client
libraries, one driver after another; reports per driver under --reports-dir/<driver>/.

Exit status: 0 when every driver's verdicts are its baseline's, 1 when some differ, 2 for a bad option."""
from __future__ import annotations

import argparse
import os
import sys
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
                        help=f"drivers to run (default: all of {', '.join(known)})")
    parser.add_argument("--reports-dir", default="reports/clients", metavar="DIR")
    parser.add_argument("--baseline", metavar="FILE", help="one driver only: its verdicts to expect ('none': "
                        "no baseline, any FAIL or ERROR fails the run)")
    parser.add_argument("--fault", metavar="NAME", help="selftest: break the client's output with this fault")
    argv = list(argv)
    passthrough = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    unknown = [name for name in args.drivers if name not in known]
    if unknown:
        parser.error(f"unknown driver(s) {', '.join(unknown)} (known: {', '.join(known)})")
    args.drivers = args.drivers or list(known)
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
    return arguments + passthrough


def main(argv: list[str] | None = None) -> int:
    args, passthrough = parse_args(sys.argv[1:] if argv is None else argv)
    import pytest
    worst = 0
    for driver in args.drivers:
        print(f"== {driver} ==", flush=True)
        code = pytest.main(pytest_arguments(driver, args, passthrough))
        worst = max(worst, int(code) if code in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED) else 2)
    return worst


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    sys.exit(main())
