"""Collects verdicts on the controller, decides the exit status from the baseline, writes JSON and HTML."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest

from conformance.catalogue import requirements


class ResultCollector:
    def __init__(self, config):
        self.config = config
        self.settings = config.nsq_settings
        self.cases: dict[str, dict] = {}
        self.started = time.time()

    def pytest_runtest_logreport(self, report):
        nsq = getattr(report, "nsq", None)
        if nsq is None or report.nodeid in self.cases:
            return
        self.cases[report.nodeid] = {"id": report.nodeid, "duration_s": round(report.duration, 3), **nsq}

    # ---- the verdict of the run -----------------------------------------------------------------
    def summary(self) -> dict:
        counts = Counter(case["verdict"] for case in self.cases.values())
        bad = [case["id"] for case in self.cases.values() if case["verdict"] in ("FAIL", "ERROR")
               and not case["baseline"]]
        expected = [case["id"] for case in self.cases.values() if case["verdict"] in ("FAIL", "ERROR")
                    and case["baseline"]]
        fixed = [case["id"] for case in self.cases.values()
                 if case["baseline"] and case["verdict"] in ("PASS", "NON-STRICT")]
        summary = {"counts": {verdict: counts.get(verdict, 0) for verdict in
                              ("PASS", "FAIL", "NON-STRICT", "UNSUPPORTED", "ERROR")},
                   "unexpected_failures": bad, "baseline_failures": expected, "baseline_now_passing": fixed}
        if self.settings.compare_tcp:
            compared = Counter(case["compare"]["status"] for case in self.cases.values() if case.get("compare"))
            summary["compare"] = {
                "against": "%s:%d" % self.settings.compare_tcp, "same": compared["same"],
                "not_compared": compared["not compared"],
                "different": sorted(case["id"] for case in self.cases.values()
                                    if (case.get("compare") or {}).get("status") == "different")}
        return summary

    def coverage(self) -> list[dict]:
        rows = []
        by_requirement: dict[str, list[dict]] = {}
        for case in self.cases.values():
            for requirement_id in case["requirements"]:
                by_requirement.setdefault(requirement_id, []).append(case)
        for requirement in requirements().values():
            cases = by_requirement.get(requirement.id, [])
            exercised = [case for case in cases if case["verdict"] != "UNSUPPORTED"]
            if exercised:
                status, why = "exercised", ""
            elif cases:
                status, why = "skipped", "; ".join(sorted({case["message"] for case in cases}))
            else:
                status, why = "not covered", "no case selected for it in this run"
            verdicts = Counter(case["verdict"] for case in cases)
            rows.append({"id": requirement.id, "level": requirement.level, "text": requirement.text,
                         "source": requirement.source, "recordings": list(requirement.recordings),
                         "status": status, "why": why, "verdicts": dict(verdicts),
                         "cases": [case["id"] for case in cases]})
        return rows

    # ---- hooks ----------------------------------------------------------------------------------
    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session, exitstatus):
        summary = self.summary()
        if exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED if summary["unexpected_failures"] \
                else pytest.ExitCode.OK
        if not self.cases:
            return
        directory = self.settings.reports_dir
        directory.mkdir(parents=True, exist_ok=True)
        document = {
            "target": self._target_description(),
            "profile": {"name": self.settings.profile.name, "description": self.settings.profile.description,
                        "limits": self.settings.profile.limits,
                        "capabilities": self.settings.profile.capabilities},
            "strict": self.settings.strict,
            "time_scale": self.settings.time_scale,
            "started": self.started,
            "wall_time_s": round(time.time() - self.started, 1),
            "summary": summary,
            "cases": sorted(self.cases.values(), key=lambda case: case["id"]),
            "coverage": self.coverage(),
        }
        (directory / "report.json").write_text(json.dumps(document, indent=1))
        from conformance.report.html import render_html
        (directory / "report.html").write_text(render_html(document, requirements()))
        self.written = directory

    def _target_description(self) -> str:
        if self.settings.tcp:
            tcp = "%s:%d" % self.settings.tcp
            return tcp + (f" (HTTP {self.settings.http[0]}:{self.settings.http[1]})" if self.settings.http else "")
        return "embedded reference broker"

    def pytest_terminal_summary(self, terminalreporter):
        summary = self.summary()
        write = terminalreporter.write_line
        terminalreporter.section("NSQ conformance verdicts")
        write("  ".join(f"{verdict} {count}" for verdict, count in summary["counts"].items()))
        for case_id in summary["baseline_failures"]:
            write(f"expected failure (baseline): {case_id}")
        for case_id in summary["baseline_now_passing"]:
            write(f"baseline case now passes, remove it from the baseline: {case_id}", yellow=True)
        if "compare" in summary:
            compared = summary["compare"]
            write(f"compared with {compared['against']}: {compared['same']} the same, {len(compared['different'])} "
                  f"different, {compared['not_compared']} not compared", yellow=bool(compared["different"]))
            for case_id in compared["different"]:
                write(f"differs: {case_id}", yellow=True)
        coverage = Counter(row["status"] for row in self.coverage())
        write(f"requirements: {coverage.get('exercised', 0)} exercised, {coverage.get('skipped', 0)} "
              f"skipped, {coverage.get('not covered', 0)} not covered (of {len(requirements())})")
        directory: Path = self.settings.reports_dir
        write(f"reports: {directory / 'report.html'}  {directory / 'report.json'}")
