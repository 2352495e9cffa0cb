"""The pytest plugin of the client cases: the driver under test, the ``run`` fixture, a verdict per case (the broker
suite's names), the baseline gate and the reports (report.json, report.html; JUnit by pytest's --junitxml)."""
from __future__ import annotations

import re
import time
import tomllib
from pathlib import Path

import pytest

from conformance.clients import monitoring
from conformance.clients.application import application
from conformance.clients.catalogue import REQUIREMENTS
from conformance.clients.driver import drivers
from conformance.clients.judge import graded, verdict_of
from conformance.clients.session import CaseRun
from conformance.spec import behaviours
from conformance.verdicts import FAIL, NON_STRICT, PASS, UNSUPPORTED

BASELINES_DIR = Path(__file__).parent / "baselines"


def pytest_addoption(parser):
    group = parser.getgroup("nsq client conformance")
    group.addoption("--client-driver", default=None, help="the driver (library) under test, drivers/drivers.toml")
    group.addoption("--client-reports-dir", default="reports/clients", help="where the reports go")
    group.addoption("--client-baseline", default=None,
                    help="the verdicts expected of the library (default: baselines/<driver>.toml; 'none': none)")
    group.addoption("--client-write-baseline", action="store_true",
                    help="write the measured verdicts as the baseline (each non-PASS with its explanation kept)")
    group.addoption("--client-fault", default=None, help="selftest: a fault of selftest/faults.py between "
                    "the client and the fake nsqd")


def pytest_configure(config):
    name = config.getoption("--client-driver")
    if name is None:
        config.nsqc = None
        return
    known = drivers()
    if name not in known:
        raise pytest.UsageError(f"unknown driver {name!r} (known: {', '.join(sorted(known))})")
    if fault := config.getoption("--client-fault"):
        from conformance.clients.selftest.faults import FAULTS
        if fault not in FAULTS:
            raise pytest.UsageError(f"unknown fault {fault!r} (selftest/faults.py)")
    config.nsqc = Collector(config, known[name])
    config.pluginmanager.register(config.nsqc, "nsqc-collector")


def case_id(item) -> str:
    marker = item.get_closest_marker("nsqc")
    if marker is None or marker.args[0] not in REQUIREMENTS:
        raise pytest.UsageError(f"{item.nodeid}: every client case names its requirement with @pytest.mark.nsqc")
    return marker.args[0]


def pytest_collection_modifyitems(items):
    for item in items:
        item.extra_keyword_matches.add(case_id(item))  # -k NSQC-HB-001 selects the case


@pytest.fixture
async def run(request):
    collector: Collector = request.config.nsqc
    if collector is None:
        raise pytest.UsageError("--client-driver NAME is required")
    proxy_factory = None
    if fault := request.config.getoption("--client-fault"):
        from conformance.clients.selftest.faults import FAULTS
        proxy_factory = FAULTS[fault].proxy
    case_run = CaseRun(collector.driver, collector.reports_dir / "logs", case_id(request.node), proxy_factory)
    request.node.nsqc_run = case_run
    yield case_run
    await case_run.close()


class Collector:
    def __init__(self, config, driver):
        self.config, self.driver = config, driver
        self.reports_dir = Path(config.getoption("--client-reports-dir"))
        self.cases: dict[str, dict] = {}
        self.started = time.time()
        self.baseline_path, self.baseline, self.why = self._baseline()

    def _baseline(self) -> tuple[Path | None, dict[str, str], dict[str, str]]:
        option = self.config.getoption("--client-baseline")
        if option == "none":
            return None, {}, {}
        path = Path(option) if option else BASELINES_DIR / f"{self.driver.name}.toml"
        if not path.is_file():
            if option:
                raise pytest.UsageError(f"no baseline file {path}")
            return None, {}, {}
        try:
            document = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise pytest.UsageError(f"{path}: {exc}") from None
        return path, document.get("verdicts", {}), document.get("why", {})

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        if call.when == "teardown" or (call.when == "setup" and call.excinfo is None):
            return report
        identifier = case_id(item)
        requirement = REQUIREMENTS[identifier]
        verdict, message = verdict_of(requirement.level, call.excinfo.value if call.excinfo else None)
        case_run: CaseRun | None = getattr(item, "nsqc_run", None)
        found = None
        if case_run is not None:
            declared = {identifier for marker in item.iter_markers("monitors_expect") for identifier in marker.args}
            told = application(self.driver, [process.orders for process in case_run.processes],
                               case_run.transcript)
            found = monitoring.findings(case_run.transcript, declared, told, case_run.dialed())
            verdict, message = graded(verdict, message, found)
        pcap = None
        if case_run and case_run.transcript.endpoints and verdict not in (PASS, UNSUPPORTED):
            pcap = self.reports_dir / "pcap" / (re.sub(r"[^A-Za-z0-9_.-]+", "_", identifier) + ".pcap")
            case_run.transcript.write_pcap(pcap)
        expected = self.baseline.get(identifier)
        self.cases[identifier] = {
            "id": identifier, "test": item.nodeid, "level": requirement.level, "section": requirement.section,
            "text": requirement.text, "observable": behaviours()[identifier].observable, "source": requirement.source,
            "verdict": verdict, "message": message,
            "baseline": expected, "why": self.why.get(identifier, ""), "duration_s": round(call.duration, 2),
            "transcript": case_run.transcript.as_dicts() if case_run else [],
            "driver_logs": [str(process.log_path) for process in case_run.processes] if case_run else [],
            "pcap": str(pcap) if pcap else None, "monitors": found.as_dicts() if found else []}
        report.user_properties.append(("verdict", verdict))
        if case_run:
            report.sections.append(("nsq client transcript", case_run.transcript.render()))
        if verdict == UNSUPPORTED:
            report.outcome, report.longrepr = "skipped", (str(item.path), item.location[1] or 0, message)
        elif verdict in (PASS, NON_STRICT):
            report.outcome = "passed"
        else:
            report.outcome = "failed"
            if call.excinfo is None or isinstance(call.excinfo.value, AssertionError):  # None: a monitor's finding
                report.longrepr = f"{identifier} {verdict}: {message}"
        return report

    def differences(self) -> list[str]:
        """Cases whose verdict is not the baseline's: with a baseline, the gate; without, every FAIL and ERROR."""
        if self.baseline_path is None:
            return [case["id"] for case in self.cases.values() if case["verdict"] not in (PASS, NON_STRICT,
                                                                                          UNSUPPORTED)]
        return [case["id"] for case in self.cases.values() if case["verdict"] != case["baseline"]]

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session, exitstatus):
        if self.cases and self.config.getoption("--client-write-baseline"):
            self._write_baseline()
        differences = self.differences()
        if exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED if differences else pytest.ExitCode.OK
        if not self.cases:
            return
        from conformance.clients.report import write_reports
        self.written = write_reports(self.reports_dir, {
            "driver": self.driver.name, "library": self.driver.library, "language": self.driver.language,
            "fault": self.config.getoption("--client-fault"), "started": self.started,
            "wall_time_s": round(time.time() - self.started, 1),
            "baseline": str(self.baseline_path) if self.baseline_path else None, "differences": differences,
            "cases": [self.cases[key] for key in sorted(self.cases)]})

    def _write_baseline(self) -> None:
        """Every case's verdict; a non-PASS keeps the explanation the baseline had, else its first message line."""
        path = self.baseline_path or BASELINES_DIR / f"{self.driver.name}.toml"
        verdicts = {**self.baseline, **{case["id"]: case["verdict"] for case in self.cases.values()}}
        why = {identifier: self.why.get(identifier) or self.cases[identifier]["message"].splitlines()[0]
               for identifier, verdict in verdicts.items()
               if verdict != PASS and (identifier in self.why or identifier in self.cases)}
        lines = [f"# {self.driver.library}: the verdicts `nsq-conformance clients {self.driver.name}` expects, as "
                 "measured", "[verdicts]", *(f'"{key}" = "{verdicts[key]}"' for key in sorted(verdicts)), "",
                 "# why each verdict that is not PASS is the library's doing", "[why]",
                 *(f'"{key}" = {_toml_string(why[key])}' for key in sorted(why))]
        path.write_text("\n".join(lines) + "\n")
        self.baseline_path, self.baseline, self.why = path, verdicts, why
        for case in self.cases.values():
            case["baseline"], case["why"] = verdicts[case["id"]], why.get(case["id"], "")

    def pytest_terminal_summary(self, terminalreporter):
        write = terminalreporter.write_line
        terminalreporter.section(f"NSQ client conformance: {self.driver.library}")
        counts: dict[str, int] = {}
        for case in self.cases.values():
            counts[case["verdict"]] = counts.get(case["verdict"], 0) + 1
        write("  ".join(f"{verdict} {count}" for verdict, count in sorted(counts.items())))
        for identifier in self.differences():
            case = self.cases[identifier]
            write(f"{identifier}: {case['verdict']}, baseline {case['baseline'] or '(none)'}: "
                  + case["message"].splitlines()[0][:150] if case["message"] else f"{identifier}: {case['verdict']}",
                  red=case["verdict"] in (FAIL, "ERROR"), yellow=case["verdict"] not in (FAIL, "ERROR"))
        if self.baseline_path is not None:
            write(f"baseline {self.baseline_path}: {len(self.differences())} difference(s)")
        write(f"reports: {self.reports_dir / 'report.html'}  {self.reports_dir / 'report.json'}")


def _toml_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
