"""``python -m conformance`` / ``nsq-conformance``: run the suite against the embedded reference broker
or any running broker, and write JUnit, JSON and HTML reports. ``nsq-conformance clients`` judges client
libraries instead (conformance/clients/).

``nsq-conformance explain ID [ID ...]`` prints what a behaviour item or a requirement means and what checks it
(``conformance/explain.py``).

Exit status: 0 when every selected case ran to a verdict, some case tested something (not all UNSUPPORTED), and
no case FAILs or ERRORs outside the ``--baseline``; 1 otherwise (a NOT RUN case, a case that never ran, or a run
that tested nothing fails the gate, saying why); 2 for a bad option,
an unreachable target or a broker that does not start (one line on stderr); 3 when no case fails but, with
``--compare``, some case's transcript or verdict differs on the second broker.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import sys
from pathlib import Path

from conformance import options
from conformance.target import TargetError

PACKAGE_DIR = Path(__file__).parent
EXIT_DIFFERENT = 3
SUITE_MODULES = ("pytest", "xdist", "hypothesis", "scapy")  # what the package's [conformance] extra installs


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def parse_args(argv):
    parser = OneLineParser(prog="nsq-conformance", description=__doc__.split("\n\n")[0],
                           epilog="Arguments after -- go to pytest unchanged (e.g. -- -k magic -x).")
    options.add_to_argparse(parser)
    parser.add_argument("--workers", type=int, default=8, metavar="N",
                        help="cases run in N parallel processes (pytest-xdist; 0 = sequential; default 8)")
    parser.add_argument("--list", action="store_true", help="list requirements and their cases, run nothing")
    own, _, passthrough = _split(argv)
    args = parser.parse_args(own)
    if args.workers < 0:
        parser.error("--workers must be >= 0")
    return args, passthrough


def _split(argv):
    if "--" in argv:
        index = argv.index("--")
        return argv[:index], "--", argv[index + 1:]
    return argv, None, []


def pytest_arguments(args, passthrough: list[str], **embedded) -> list[str]:
    """The plugin's command line: the user's options, and those of the embedded broker when this process started
    it (``nsq_target``, ``nsq_http_target``, ...)."""
    reports = Path(args.nsq_reports_dir)
    values = {**vars(args), **embedded}
    arguments = [str(PACKAGE_DIR / "cases"), "-c", str(PACKAGE_DIR / "suite.ini"), "--rootdir", str(PACKAGE_DIR),
                 "-p", "no:cacheprovider", "-p", "conformance.plugin", "--junitxml", str(reports / "junit.xml"),
                 *options.as_pytest_arguments(values)]
    # Restarting the user's target would cut other workers off; --lookupd-listen is one address.
    if args.workers and not args.nsq_restart_command and not args.nsq_kill_command and not args.nsq_lookupd_listen:
        arguments += ["-n", str(args.workers)]
    return arguments + passthrough


def list_requirements(args) -> int:
    from conformance.catalogue import requirements
    from conformance.explain import collect_cases

    try:
        cases_of = collect_cases(options.as_pytest_arguments(vars(args)))
    except RuntimeError:
        return 2
    print()
    for requirement in requirements().values():
        if args.nsq_requirement and not any(requirement.id.startswith(p) for p in args.nsq_requirement):
            continue
        cases = cases_of.get(requirement.id, [])
        print(f"{requirement.id:16} {requirement.level:6} {len(cases):3} case(s)  {requirement.text}")
    return 0


def _check_reachable(settings: options.Settings) -> None:
    from conformance.target import check_reachable
    for address, option in ((settings.lookupd_tcp, "--lookupd-target"),
                            (settings.lookupd_http, "--lookupd-http-target"),
                            (settings.tcp, "--target"), (settings.http, "--http-target"),
                            (settings.compare_tcp, "--compare"), (settings.compare_http, "--compare-http")):
        if address:
            check_reachable(address, option)


def _shared_broker(stack: contextlib.ExitStack, settings: options.Settings, reports: Path) -> dict:
    """The embedded broker that every worker's cases share, started here, before pytest: its addresses as the
    plugin's options."""
    from conformance import embedded
    from conformance.report.fresh import SHARED_BROKER_LOG
    from conformance.target import free_loopback_address
    # The plugin serves the fake auth server there once pytest runs; the broker asks it only on AUTH.
    authd = None
    if settings.profile.capabilities.get("auth"):
        authd = "%s:%d" % settings.authd if settings.authd else free_loopback_address()
    (reports / SHARED_BROKER_LOG).unlink(missing_ok=True)  # the rest of the directory is the plugin's to clean
    broker = stack.enter_context(embedded.nsqd(settings, reports / SHARED_BROKER_LOG, authd))
    values = {"nsq_target": "%s:%d" % broker.tcp, "nsq_http_target": "%s:%d" % broker.http,
              "nsq_https_target": "%s:%d" % broker.https if broker.https else None,
              **options.EMBEDDED_TLS, "nsq_authd_address": authd, "nsq_embedded": True}
    print(f"embedded reference broker: TCP {values['nsq_target']} HTTP {values['nsq_http_target']} "
          f"(profile {settings.profile.name}, log {reports / SHARED_BROKER_LOG})", flush=True)
    return values


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    missing = [name for name in SUITE_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        print(f"nsq-conformance: error: {', '.join(missing)} not installed: the suite needs the package's "
              "[conformance] extra (pip install 'nsq-conformance-toolkit[conformance]')", file=sys.stderr)
        return 2
    if argv[:1] == ["explain"]:
        from conformance.explain import main as explain
        return explain(argv[1:])
    if argv[:1] == ["clients"]:  # the other half: the toolkit plays nsqd and judges client libraries
        from conformance.clients.__main__ import main as clients
        return clients(argv[1:])
    args, passthrough = parse_args(argv)
    if args.list:
        return list_requirements(args)
    with contextlib.ExitStack() as stack:
        try:
            settings = options.settings(lambda dest: getattr(args, dest, None))
            _check_reachable(settings)
            embedded = {} if settings.tcp else _shared_broker(stack, settings, Path(args.nsq_reports_dir))
        except TargetError as exc:
            print(f"nsq-conformance: error: {exc}", file=sys.stderr)
            return 2
        import pytest
        code = pytest.main(pytest_arguments(args, passthrough, **embedded))
    if code == pytest.ExitCode.OK and settings.compare_tcp and _differences(Path(args.nsq_reports_dir)):
        return EXIT_DIFFERENT
    if code in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        return int(code)
    return 2


def _differences(reports: Path) -> list[str]:
    report = reports / "report.json"
    return json.loads(report.read_text())["summary"]["compare"]["different"] if report.is_file() else []


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    sys.exit(main())
