"""``python -m conformance`` / ``nsq-conformance``: run the suite against the embedded reference broker
or any running broker, and write JUnit, JSON and HTML reports.

Exit status: 0 when no case FAILs or ERRORs outside the ``--baseline``; 1 otherwise; 2 for a bad option,
an unreachable target or a broker that does not start (one line on stderr).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

PACKAGE_DIR = Path(__file__).parent


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def parse_args(argv):
    parser = OneLineParser(prog="nsq-conformance", description=__doc__.split("\n\n")[0],
                           epilog="Arguments after -- go to pytest unchanged (e.g. -- -k magic -x).")
    parser.add_argument("--target", metavar="HOST:PORT", help="TCP address of a running broker "
                        "(default: start the embedded reference broker on free ports)")
    parser.add_argument("--http-target", metavar="HOST:PORT", help="its HTTP address (without it HTTP cases "
                        "are UNSUPPORTED)")
    parser.add_argument("--https-target", metavar="HOST:PORT", help="its HTTPS address (the TLS cases' HTTPS check)")
    parser.add_argument("--tls-ca", metavar="FILE", help="CA (PEM) that signed the target's certificate: the TLS "
                        "cases verify it (default: the protocol only; the embedded broker's own test CA)")
    parser.add_argument("--lookupd-listen", metavar="HOST:PORT", help="where the suite's fake nsqlookupd listens "
                        "for the registration cases, when --target was started with --lookupd-tcp-address there "
                        "(default: a free port, set through PUT /config/nsqlookupd_tcp_addresses)")
    parser.add_argument("--lookupd-target", metavar="HOST:PORT", help="TCP address of a running nsqlookupd "
                        "(default: start the embedded reference nsqlookupd)")
    parser.add_argument("--lookupd-http-target", metavar="HOST:PORT", help="its HTTP address")
    parser.add_argument("--restart-command", metavar="CMD", help="shell command that restarts --target (SIGTERM, "
                        "same data path and ports) for the restart cases; the cases then run one at a time")
    parser.add_argument("--profile", default="nsqd-defaults", help="nsqd-defaults (default), nsqd-tight, "
                        "nsqd-auth, or a .toml path: the target's limits and capabilities")
    parser.add_argument("--authd-address", metavar="HOST:PORT", help="where the suite's fake auth server "
                        "listens for a profile with auth (default: a free loopback port; needed with --target)")
    parser.add_argument("--strict", action="store_true", help="count NON-STRICT verdicts as FAIL")
    parser.add_argument("--baseline", metavar="FILE", help="expected failures, one case id per line")
    parser.add_argument("--time-scale", type=float, default=1.0, metavar="X",
                        help="stretch every wait and deadline by X for slow targets (default 1)")
    parser.add_argument("--reports-dir", default="reports/conformance", metavar="DIR",
                        help="where report.html, report.json, junit.xml and pcaps go")
    parser.add_argument("--requirement", action="append", default=[], metavar="PREFIX",
                        help="only cases checking requirement IDs with this prefix (repeatable)")
    parser.add_argument("--workers", type=int, default=8, metavar="N",
                        help="cases run in N parallel processes (pytest-xdist; 0 = sequential; default 8)")
    parser.add_argument("--list", action="store_true", help="list requirements and their cases, run nothing")
    own, _, passthrough = _split(argv)
    args = parser.parse_args(own)
    if args.time_scale <= 0:
        parser.error("--time-scale must be > 0")
    if args.workers < 0:
        parser.error("--workers must be >= 0")
    if args.http_target and not args.target:
        parser.error("--http-target needs --target")
    if args.restart_command and not args.target:
        parser.error("--restart-command needs --target (the embedded broker is restarted by the suite)")
    if bool(args.lookupd_target) != bool(args.lookupd_http_target):
        parser.error("--lookupd-target and --lookupd-http-target go together")
    return args, passthrough


def _split(argv):
    if "--" in argv:
        index = argv.index("--")
        return argv[:index], "--", argv[index + 1:]
    return argv, None, []


def pytest_arguments(args, tcp, http, authd, passthrough, https=None, tls_ca=None) -> list[str]:
    reports = Path(args.reports_dir)
    arguments = [str(PACKAGE_DIR / "cases"), "-c", str(PACKAGE_DIR / "suite.ini"),
                 "--rootdir", str(PACKAGE_DIR), "-p", "no:cacheprovider",
                 "--profile", args.profile, "--time-scale", str(args.time_scale),
                 "--reports-dir", str(reports), "--junitxml", str(reports / "junit.xml")]
    if tcp:
        arguments += ["--target", "%s:%d" % tcp]
    if not args.target:
        arguments.append("--embedded-target")
    if https:
        arguments += ["--https-target", "%s:%d" % https]
    if tls_ca:
        arguments += ["--tls-ca", tls_ca]
    if http:
        arguments += ["--http-target", "%s:%d" % http]
    if authd:
        arguments += ["--authd-address", authd]
    if args.restart_command:
        arguments += ["--restart-command", args.restart_command]
    if args.lookupd_listen:
        arguments += ["--lookupd-listen", args.lookupd_listen]
    if args.lookupd_target:
        arguments += ["--lookupd-target", args.lookupd_target, "--lookupd-http-target", args.lookupd_http_target]
    if args.strict:
        arguments.append("--nsq-strict")
    if args.baseline:
        arguments += ["--baseline", args.baseline]
    for prefix in args.requirement:
        arguments += ["--requirement", prefix]
    # Restarting the user's target would cut other workers off; --lookupd-listen is one address.
    if args.workers and not args.restart_command and not args.lookupd_listen:
        arguments += ["-n", str(args.workers)]
    return arguments + passthrough


def list_requirements(args) -> int:
    import pytest

    from conformance.catalogue import requirements
    from conformance.plugin import case_requirements

    class Collector:
        cases: dict[str, list[str]] = {}

        def pytest_collection_finish(self, session):
            for item in session.items:
                for requirement_id in case_requirements(item):
                    self.cases.setdefault(requirement_id, []).append(item.nodeid)

    collector = Collector()
    code = pytest.main([str(PACKAGE_DIR / "cases"), "-c", str(PACKAGE_DIR / "suite.ini"), "--rootdir",
                        str(PACKAGE_DIR), "-p", "no:cacheprovider", "--collect-only", "-q",
                        "--profile", args.profile, *sum((["--requirement", p] for p in args.requirement), [])],
                       plugins=[collector])
    if code not in (0, 5):
        return 2
    print()
    for requirement in requirements().values():
        if args.requirement and not any(requirement.id.startswith(p) for p in args.requirement):
            continue
        cases = collector.cases.get(requirement.id, [])
        print(f"{requirement.id:16} {requirement.level:6} {len(cases):3} case(s)  {requirement.text}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args, passthrough = parse_args(sys.argv[1:] if argv is None else argv)
    from conformance.target import (
        TLS_DIR,
        EmbeddedBroker,
        Profile,
        TargetError,
        check_reachable,
        free_loopback_address,
        parse_address,
    )
    if args.list:
        return list_requirements(args)
    broker = authd = None
    try:
        profile = Profile.load(args.profile)
        if profile.capabilities.get("auth"):
            if args.authd_address:
                authd = "%s:%d" % parse_address(args.authd_address, "--authd-address")
            elif args.target:
                raise TargetError(f"profile {profile.name} with --target needs --authd-address (the address "
                                  "the target's --auth-http-address points at)")
            else:
                # The plugin serves the fake auth server here once pytest runs; the broker asks it only on AUTH.
                authd = free_loopback_address()
        if args.lookupd_target:
            check_reachable(parse_address(args.lookupd_target, "--lookupd-target"), "--lookupd-target")
            check_reachable(parse_address(args.lookupd_http_target, "--lookupd-http-target"), "--lookupd-http-target")
        if args.baseline and not Path(args.baseline).is_file():
            raise TargetError(f"--baseline {args.baseline}: no such file")
        if args.target:
            tcp = parse_address(args.target, "--target")
            http = parse_address(args.http_target, "--http-target") if args.http_target else None
            https = parse_address(args.https_target, "--https-target") if args.https_target else None
            tls_ca = args.tls_ca
            check_reachable(tcp, "--target")
            if http:
                check_reachable(http, "--http-target")
        else:
            Path(args.reports_dir).mkdir(parents=True, exist_ok=True)
            broker = EmbeddedBroker(profile, Path(args.reports_dir) / "broker.log", authd_address=authd).start()
            tcp, http, https = broker.tcp_address, broker.http_address, broker.https_address
            tls_ca = str(TLS_DIR / "ca.pem")
            print(f"embedded reference broker: TCP {tcp[0]}:{tcp[1]} HTTP {http[0]}:{http[1]} "
                  f"(profile {profile.name}, log {Path(args.reports_dir) / 'broker.log'})", flush=True)
    except TargetError as exc:
        print(f"nsq-conformance: error: {exc}", file=sys.stderr)
        return 2
    try:
        import pytest
        code = pytest.main(pytest_arguments(args, tcp, http, authd, passthrough, https, tls_ca))
    finally:
        if broker:
            broker.stop()
    if code in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        return int(code)
    return 2


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    sys.exit(main())
