"""Collects verdicts on the controller, decides the exit status from the baseline, writes JSON and HTML."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest

from conformance.catalogue import requirements
from conformance.options import Settings
from conformance.spec import behaviours
from conformance.verdicts import FAILING, LEVEL_ORDER, NOT_RUN, PASS, UNSUPPORTED, VERDICTS

WORDING = "wording only: error texts worded otherwise than nsqd's (the codes right)"


class ResultCollector:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.cases: dict[str, dict] = {}
        self.started = time.time()
        self.selected: list[str] = []  # every test this run was to run, once collected
        self.other_tests_failed: set[str] = set()  # tests of the run that are no conformance case (a mixed run)
        self.other_tests_ran: set[str] = set()

    def pytest_collection_finish(self, session):
        self.selected = [item.nodeid for item in session.items]

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids):
        self.selected = self.selected or list(ids)  # every worker collects the same selection

    def pytest_runtest_logreport(self, report):
        if report.when == "teardown" and report.failed and report.nodeid in self.cases:
            self._clean_up_failed(self.cases[report.nodeid], report)
            return
        nsq = getattr(report, "nsq", None)
        if nsq is None:
            self.other_tests_ran.add(report.nodeid)
            if report.failed:
                self.other_tests_failed.add(report.nodeid)
            return
        if report.nodeid in self.cases:
            return
        self.cases[report.nodeid] = {"id": report.nodeid, "duration_s": round(report.duration, 3), **nsq}

    @staticmethod
    def _clean_up_failed(case: dict, report) -> None:
        """A case's clean-up raised (its fixtures' teardown): the gate must not pass it by. A case that passed is an
        ERROR naming what its clean-up met; a failing verdict stands, with that added."""
        what = str(report.longrepr).strip().splitlines()[-1] if report.longrepr else "its clean-up failed"
        if case["verdict"] not in FAILING:
            case["verdict"], case["cause"] = "ERROR", "a case's clean-up failed"
        case["message"] = (case["message"] + "\n" if case["message"] else "") + f"clean-up failed: {what}"

    # ---- the verdict of the run -----------------------------------------------------------------
    def summary(self) -> dict:
        """``counts`` are the broker's (the target of the nsqd cases); ``targets`` has each program's apart, so an
        embedded reference nsqlookupd's cases never count for a broker the user started."""
        targets: dict[str, Counter] = {}
        for case in self.cases.values():
            targets.setdefault(case["target"], Counter())[case["verdict"]] += 1
        broker = next((label for label in targets if "nsqlookupd" not in label), None)
        bad = [case["id"] for case in self.cases.values() if case["verdict"] in FAILING and not case["baseline"]]
        expected = [case["id"] for case in self.cases.values() if case["verdict"] in FAILING and case["baseline"]]
        fixed = [case["id"] for case in self.cases.values()
                 if case["baseline"] and case["verdict"] in ("PASS", "NON-STRICT")]
        summary = {"counts": self._counts(targets.get(broker, Counter())),
                   "targets": {label: self._counts(counts) for label, counts in  # the broker first
                               sorted(targets.items(), key=lambda item: ("nsqlookupd" in item[0], item[0]))},
                   "causes": self.causes(),
                   "target_deaths": [{**case["target_death"], "target": case["target"]}
                                     for case in self.cases.values() if case.get("target_death")],
                   "unexpected_failures": bad, "baseline_failures": expected, "baseline_now_passing": fixed,
                   "incomplete": self.incomplete()}
        if self.settings.compare_tcp:
            compared = Counter(case["compare"]["status"] for case in self.cases.values() if case.get("compare"))
            summary["compare"] = {
                "against": "%s:%d" % self.settings.compare_tcp, "same": compared["same"],
                "not_compared": compared["not compared"],
                "different": sorted(case["id"] for case in self.cases.values()
                                    if (case.get("compare") or {}).get("status") == "different")}
        return summary

    def incomplete(self) -> list[str]:
        """Why this run must not pass the gate although no case failed: a gate is green only on a run that tested
        what was selected. Empty when it did."""
        why = []
        not_run = [case["id"] for case in self.cases.values() if case["verdict"] == NOT_RUN]
        if not_run:
            why.append(f"{len(not_run)} of {len(self.cases)} cases NOT RUN (their target died and was not "
                       "restarted): they tested nothing")
        never = [test for test in self.selected
                 if test not in self.cases and (test not in self.other_tests_ran or test in self.other_tests_failed)]
        if never:
            why.append(f"{len(never)} of {len(self.selected)} selected cases never reached a verdict (the run "
                       f"stopped, or a worker crashed), e.g. {never[0]}")
        if not any(case["verdict"] not in (UNSUPPORTED, NOT_RUN) for case in self.cases.values()):
            why.append("nothing was tested: " + (f"all {len(self.cases)} cases were UNSUPPORTED or NOT RUN"
                                                 if self.cases else "no case ran"))
        return why

    @staticmethod
    def _counts(counts: Counter) -> dict[str, int]:
        return {verdict: counts.get(verdict, 0) for verdict in VERDICTS}

    def causes(self) -> list[dict]:
        """Failing and NON-STRICT cases grouped by their cause, what to fix first at the top: by level (a MUST
        broken, then a MAY, then a SHOULD), then by size, each with the behaviour items broken and their levels.
        Cases that differ only in nsqd's wording of a text are one group. A failing case whose verdict graded no
        difference (PRECONDITION, ERROR) fails the gate as a MUST does, and ranks with them."""
        groups: dict[tuple[str, str], list[dict]] = {}
        for case in self.cases.values():
            if case["verdict"] in FAILING or case["verdict"] == "NON-STRICT":
                cause = WORDING if case.get("wording_only") else case.get("cause") or "(no cause recorded)"
                groups.setdefault((case["target"], cause), []).append(case)
        rows = []
        for (target, cause), cases in groups.items():
            level = min((case.get("level") or "MUST" for case in cases), key=LEVEL_ORDER.index)
            items = sorted({item for case in cases for item in case.get("cause_items", ())})
            rows.append({"target": target, "cause": cause, "level": level,
                         "items": [f"{item} {behaviours()[item].level}" for item in items],
                         "verdicts": dict(Counter(case["verdict"] for case in cases)),
                         "cases": sorted(case["id"] for case in cases)})
        return sorted(rows, key=lambda row: (LEVEL_ORDER.index(row["level"]), -len(row["cases"]), row["target"],
                                             row["cause"]))

    def coverage(self) -> list[dict]:
        rows = []
        by_requirement: dict[str, list[dict]] = {}
        for case in self.cases.values():
            for requirement_id in case["requirements"]:
                by_requirement.setdefault(requirement_id, []).append(case)
        for requirement in requirements().values():
            cases = by_requirement.get(requirement.id, [])
            exercised = [case for case in cases if case["verdict"] not in ("UNSUPPORTED", NOT_RUN)]
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
            session.exitstatus = pytest.ExitCode.TESTS_FAILED \
                if summary["unexpected_failures"] or summary["incomplete"] else pytest.ExitCode.OK
        directory = self.settings.reports_dir
        directory.mkdir(parents=True, exist_ok=True)
        document = {
            "target": self._target_description(),
            "profile": {"name": self.settings.profile.name, "description": self.settings.profile.description,
                        "limits": self.settings.profile.limits,
                        "capabilities": self.settings.profile.capabilities},
            "strict": self.settings.strict,
            "nsq_version": str(self.settings.nsq_version),  # the release judged against (--nsq-version)
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

    def _closing_line_per_target(self, terminalreporter, summary: dict) -> None:
        """pytest's closing line ("N passed ...") counts the broker's cases as such, as ``summary.counts`` does; an
        nsqlookupd's cases beside it are counted apart ("24 passed on nsqlookupd"), never added to the broker's.
        Done after pytest's short summary, which lists every failing case."""
        counted = next(iter(summary["targets"]), None)
        stats = terminalreporter.stats
        for key in [key for key in stats if key]:
            apart = [report for report in stats[key] if (self.cases.get(getattr(report, "nodeid", None)) or {}).get(
                "target", counted) != counted]
            if apart:
                stats[key] = [report for report in stats[key] if report not in apart]
                stats.setdefault(f"{key} on nsqlookupd", []).extend(apart)

    def _target_description(self) -> str:
        if self.settings.tcp:
            tcp = "%s:%d" % self.settings.tcp
            return tcp + (f" (HTTP {self.settings.http[0]}:{self.settings.http[1]})" if self.settings.http else "")
        return "embedded reference broker"

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter):
        """The verdicts, after pytest's own sections (the outermost wrapper), right above its closing line."""
        yield
        summary = self.summary()
        write = terminalreporter.write_line
        terminalreporter.section("NSQ conformance verdicts")
        for death in summary["target_deaths"]:
            write(f"TARGET DIED during {death['case']} ({death['target']}): {death['reason']}; "
                  + (death["revived"] or "not restarted, later cases NOT RUN"), red=True, bold=True)
            transcript = self.cases[death["case"]]["transcript"]
            for event in transcript[-6:]:
                write(f"    {event['at_ms']:9.1f} ms {event['connection']:>4} {event['direction']} "
                      + " | ".join(event["lines"])[:160])
        for label, counts in summary["targets"].items():
            write(f"{label}: " + "  ".join(f"{verdict} {count}" for verdict, count in counts.items()
                                            if count or verdict == PASS))
        several = len({group["target"] for group in summary["causes"]}) > 1
        if summary["causes"]:
            write("failures by cause, what to fix first at the top (level, then count):")
            for group in summary["causes"][:15]:
                verdicts = ", ".join(f"{count} {verdict}" for verdict, count in group["verdicts"].items())
                items = f"  ({', '.join(group['items'])})" if group["items"] else ""
                write(f"  {len(group['cases']):4d} cases  {group['level']:<6}  {group['cause']}{items}  [{verdicts}]"
                      + (f"  ({group['target']})" if several else ""))
            if len(summary["causes"]) > 15:
                write(f"  ... and {len(summary['causes']) - 15} more causes in report.json (summary.causes)")
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
        for why in summary["incomplete"]:
            write(f"GATE NOT PASSED, the run is incomplete: {why}", red=True, bold=True)
        self._closing_line_per_target(terminalreporter, summary)
