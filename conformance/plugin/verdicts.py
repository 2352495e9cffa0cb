"""Each case's verdict, set in ``pytest_runtest_makereport`` the way pytest's skipping plugin sets xfail:
PASS; FAIL = a MUST is broken; NON-STRICT = only a SHOULD (or nsqd's exact wording) is broken, or the broker does
what another release than the judged one does (``_as_another_release``), FAIL under ``--strict``; PRECONDITION = a
setup step failed, so the case could not test its requirement; UNSUPPORTED = an optional capability is missing;
NOT RUN = the target died during an earlier case and could not be restarted; ERROR = harness trouble (the target
cannot be reached). The names and the causes that group failures are ``conformance/verdicts.py``'s;
``pytest_report_teststatus`` gives each its letter and colour.

The verdict rides on ``report.nsq``, an attribute rather than the stash, because pytest-xdist sends a report's
attributes from the worker to the controller, where the report writers read them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from conformance import compare, monitoring
from conformance.case import Case, LookupdCase, Target
from conformance.catalogue import requirements
from conformance.client import HarnessError, Mismatch, PreconditionFailed, Unsupported
from conformance.liveness import NotRun
from conformance.plugin import CASE, COMPARED, SETTINGS, case_requirements, is_case, settings_of
from conformance.plugin.fixtures import case_name
from conformance.spec import behaviour_ids_of, behaviours, not_in_version
from conformance.verdicts import (
    ERROR,
    FAIL,
    LEVEL_ORDER,
    MONITOR_RAISED,
    NON_STRICT,
    NOT_RUN,
    PASS,
    PRECONDITION,
    TARGET_DIED,
    UNSUPPORTED,
    cause_of,
    items_of,
    level_of,
    verdict_of,
)
from conformance.versions import NsqVersion, label_of, releases_expecting_otherwise
from nsq_protocol import monitors

_TEST_STATUS = {
    PASS: ("passed", ".", ("PASS", {"green": True})),
    FAIL: ("failed", "F", ("FAIL", {"red": True})),
    NON_STRICT: ("non-strict", "N", ("NON-STRICT", {"yellow": True})),
    PRECONDITION: ("precondition", "P", ("PRECONDITION", {"yellow": True})),
    UNSUPPORTED: ("unsupported", "U", ("UNSUPPORTED", {"blue": True})),
    NOT_RUN: ("not run", "-", ("NOT RUN", {"purple": True})),
    ERROR: ("error", "E", ("ERROR", {"red": True})),
}


def in_baseline(nodeid: str, baseline: dict[str, str]) -> bool:
    return any(nodeid == entry or nodeid.endswith("/" + entry) for entry in baseline)


# ---- verdicts ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Judged:
    """A case's verdict and message; for a failing one its cause (verdicts.cause_of), the cause's level and items,
    and every behaviour item the case found broken with its level, strongest first ("H-07 MUST")."""
    verdict: str
    message: str = ""
    cause: str = ""
    level: str = ""
    cause_items: tuple[str, ...] = ()
    broken: tuple[str, ...] = ()
    wording_only: bool = False  # every difference is in nsqd's wording of a text (reports fold these)


def _verdict(item, case: Case | None, excinfo: pytest.ExceptionInfo | None, found: list | None = None) -> Judged:
    """``found``: the broker-side violations the catalogue's monitors saw in the case's transcript, graded as the
    case's own differences are."""
    error = excinfo.value if excinfo else None
    if isinstance(error, NotRun):
        return Judged(NOT_RUN, str(error))
    if isinstance(error, (Unsupported, pytest.skip.Exception)):
        return Judged(UNSUPPORTED, str(error))
    if isinstance(error, PreconditionFailed):
        return Judged(PRECONDITION, str(error), cause_of(error, str(error)))
    if error is not None and not isinstance(error, AssertionError) and not _read_what_is_not_there(excinfo):
        message = str(error) if isinstance(error, (HarnessError, pytest.fail.Exception)) \
            else f"{type(error).__name__}: {error}"
        return Judged(ERROR, message, cause_of(error, message))
    differences = _graded(item, case, excinfo, found or [])
    if not differences:
        return Judged(PASS)
    level, headline = differences[0]
    broken = {}
    for difference_level, difference in differences:
        for behaviour in items_of(difference.judges):
            broken.setdefault(behaviour, difference_level)
    message = "\n".join(f"[{' '.join((difference_level, *items_of(difference.judges)))}] {difference}"
                        for difference_level, difference in differences)
    return Judged(verdict_of(level, item.config.stash[SETTINGS].strict), message,
                  cause_of(headline, str(headline)), level, items_of(headline.judges),
                  tuple(f"{behaviour} {behaviour_level}" for behaviour, behaviour_level in broken.items()),
                  all(difference.wording for _, difference in differences))


def _graded(item, case: Case | None, excinfo: pytest.ExceptionInfo | None,
            found: list) -> list[tuple[str, Mismatch]]:
    """Every difference the case saw, each at the strongest level of the items its check judges, strongest first:
    what the case recorded and went on from, then what stopped it. A check that names no item takes its own
    ``unnamed_level`` (a soft check's: nsqd's wording, SHOULD), else the case's requirement level (a MAY marks an
    optional capability: absent it is UNSUPPORTED, present but wrong it FAILs)."""
    levels = {requirements()[i].level for i in case_requirements(item)}
    requirement_level = "MUST" if levels - {"SHOULD"} else "SHOULD"
    differences = list(case.verify.recorded) if case else []
    if excinfo is not None:
        differences.append(_stopped(case, excinfo))
    # after the case's own, so that at one level the case's own difference leads
    differences += [Mismatch(f"monitor {v.item} on connection {v.connection}", v.expected, v.observed,
                             f"monitor {v.item}: {v.observed}", judges=v.item) for v in found]
    graded = [(level_of(difference.judges, difference.unnamed_level or requirement_level), difference)
              for difference in differences]
    return sorted(graded, key=lambda pair: LEVEL_ORDER.index(pair[0]))


def _stopped(case: Case | None, excinfo: pytest.ExceptionInfo) -> Mismatch:
    """What stopped the case, as a Mismatch."""
    error = excinfo.value
    if _read_what_is_not_there(excinfo):
        # The case read a part of the broker's answer that is not there (a null where an object was due, a
        # missing frame field): the broker's doing, judged as the requirement says, not harness trouble.
        what = f"the broker's answer{_last_answer(case)} has what {Path(excinfo.traceback[-1].path).name} reads"
        return Mismatch(what, "a value there", f"{type(error).__name__}: {error}", what)
    if not isinstance(error, Mismatch):  # a plain assert (hypothesis's, a helper's): it judges no item
        return Mismatch(str(error) or type(error).__name__, "the assertion holds", "it does not", str(error))
    return error


def _read_what_is_not_there(excinfo) -> bool:
    return isinstance(excinfo.value, (KeyError, IndexError, TypeError)) and _raised_in_case(excinfo)


def _last_answer(case) -> str:
    """' to GET /stats?...' (the request or command the last answer the case received was for), or ''."""
    events = case.transcript.events if case else []
    for index in range(len(events) - 1, -1, -1):
        if events[index].direction == "<":
            asked = next((event for event in reversed(events[:index]) if event.direction == ">"
                          and event.connection == events[index].connection), None)
            return f" to {asked.lines[-1][:100]}" if asked and asked.lines else ""
    return ""


def _after_target_check(item, case, judged: Judged) -> tuple[Judged, dict | None]:
    """A case that saw its target close a connection, or did not pass, asks the target whether it is still there
    (liveness.py). The case during which it died is a FAIL that says so, once; a case that ran while another
    worker's case saw it die is NOT RUN; the verdict stands while the target answers."""
    health = getattr(case.target, "health", None) if case else None
    saw_close = case is not None and any(endpoint.closed_by_server for endpoint in case.transcript.endpoints.values())
    if health is None or not (saw_close or judged.verdict not in (PASS, UNSUPPORTED, NOT_RUN)):
        return judged, None
    death = health.check(item.nodeid)
    saw = f"\nWhat the case saw:\n{judged.message}" if judged.message else ""
    if death is None:
        if health.dead:  # another worker's case named the death first; this one ran then, and may be its cause
            return Judged(NOT_RUN, f"not run to the end: {health.dead}, while this case ran{saw}"), None
        return judged, None
    what = f"TARGET DIED during {item.nodeid}: {death.reason}. " + (
        f"It came back: {death.revived}." if death.revived else "It was not restarted: later cases on it are NOT RUN.")
    if death.concurrent:
        what += (f" Other workers were running {', '.join(death.concurrent)} on it at the time: the cause may be "
                 "one of those (--workers 0 or --restart-command runs one case at a time).")
    return replace(judged, verdict=FAIL, message=what + saw, cause=TARGET_DIED, level="MUST", cause_items=()), \
        death.as_dict()


# ---- differential mode (--compare) -------------------------------------------------------------------

@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    try:
        return (yield)
    finally:
        settings = settings_of(item.config)
        if settings and settings.compare_tcp and is_case(item):
            item.stash[COMPARED] = _run_on_compare_target(item, settings)


def _run_on_compare_target(item, settings) -> dict:
    """The case once more, against --compare, right after its run on the target: its verdict there and where the
    two normalised transcripts differ."""
    against = "%s:%d" % settings.compare_tcp
    case = item.stash.get(CASE, None)
    if not isinstance(case, Case) or set(item.fixturenames) & {"restartable", "registration", "crashable"}:
        return {"against": against, "status": "not compared",
                "why": "restart, registration and nsqlookupd cases run against the target only"}
    other = Case(Target(settings.profile, settings.compare_tcp, settings.compare_http, settings.time_scale),
                 case_name(item))
    other.version = case.version
    excinfo = _run_again(item, case, other)
    varies = item.get_closest_marker("transcript_varies")
    # before the clean-up, which the target's run has not had yet
    diff = [] if varies else compare.differences(case, other, against)
    other.close()
    judged = _verdict(item, other, excinfo)
    return {"against": against, "status": "different" if diff else "same", "verdict": judged.verdict,
            "message": judged.message,
            "diff": diff, "transcripts": f"not compared: {varies.args[0]}" if varies else "compared"}


def _run_again(item, case: Case | LookupdCase, other: Case | LookupdCase) -> pytest.ExceptionInfo | None:
    """The case's function once more with ``other`` in place of ``case``; what stopped it, if anything."""
    # the case fixtures, and the cases' own fixtures made of them (`auth` is the case, `http` its HTTP client)
    counterpart = {id(case): other, id(case.http): other.http}
    arguments = {name: counterpart.get(id(item.funcargs[name]), item.funcargs[name])
                 for name in item._fixtureinfo.argnames}
    try:
        item.obj(**arguments)
    except (Exception, pytest.skip.Exception, pytest.fail.Exception) as error:
        return pytest.ExceptionInfo.from_exception(error)
    return None


# ---- another release's behaviour (--nsq-version) -------------------------------------------------------

def _as_another_release(item, case: Case | LookupdCase, judged: Judged) -> Judged:
    """A failing case run again as each release that expects otherwise of the versioned items it asked about
    (``case.has``, also for the monitors' rules; conformance/versions.py), the releases nearest the judged one
    first: a broker that passes as one does what that release does, a difference between releases, NON-STRICT
    naming it (FAIL under --strict, as every NON-STRICT); one that passes as none keeps its verdict. Only what a case
    asks about makes its expectation differ by release, so a case that asked about none is not run again, nor are
    those that restart, kill or own a program: their run changed it. A case stops at its first hard difference, so
    a run again may ask about items the first run never reached: they part the releases left further."""
    if set(item.fixturenames) & {"restartable", "crashable", "own_nsqlookupd"}:
        return judged
    cited = [behaviour for requirement_id in case_requirements(item)
             for behaviour in behaviour_ids_of(requirements()[requirement_id])]
    asked, tried = set(case.asked), set()
    while True:
        untried = [group for group in _groups(asked, case.version)
                   if not tried.intersection(group) and not not_in_version(cited, group[0])]  # else: UNSUPPORTED
        if not untried:
            return judged
        release = untried[0][0]
        tried.add(release)
        other = _fresh(item, case)
        other.version = release
        try:
            excinfo = _run_again(item, case, other)
            passes = _verdict(item, other, excinfo, _monitored(item, other)).verdict == PASS
        except monitoring.MonitorFailed as failure:
            return _monitor_failed(failure)
        finally:
            other.close()
        asked |= other.asked
        if passes:
            differing = [i for i in sorted(asked)
                         if behaviours()[i].releases.has(release) != behaviours()[i].releases.has(case.version)]
            behaves = "behaves as " + label_of(next(group for group in _groups(asked, case.version)
                                                    if release in group))
            return Judged(verdict_of("SHOULD", item.config.stash[SETTINGS].strict),
                          f"{behaves} (" + ", ".join(f"{i} is {behaviours()[i].releases}" for i in differing)
                          + f"), not as {case.version.label}, which it is judged as:\n{judged.message}",
                          behaves, "SHOULD", tuple(differing))


def _groups(asked: set[str], judged: NsqVersion) -> list[tuple[NsqVersion, ...]]:
    """The releases that expect otherwise than ``judged`` of the versioned items among ``asked``, grouped."""
    return releases_expecting_otherwise([behaviours()[i].releases for i in sorted(asked)], judged)


def _fresh(item, case: Case | LookupdCase) -> Case | LookupdCase:
    """A new case on the same target (and fake nsqlookupd) as ``case``."""
    if isinstance(case, LookupdCase):
        return LookupdCase(case.target, case_name(item))
    other = Case(case.target, case_name(item), case.sections)
    if hasattr(case, "lookupd"):  # the registration fixture's
        other.lookupd = case.lookupd
    return other


def _with_verdicts_compared(compared: dict | None, verdict: str) -> dict | None:
    if compared and compared["status"] == "same" and compared["verdict"] != verdict:
        return {**compared, "status": "different"}
    return compared


def _raised_in_case(excinfo) -> bool:
    return Path(excinfo.traceback[-1].path).parent.name == "cases"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    settings = settings_of(item.config)
    if settings is None or not is_case(item):
        return report
    if call.when == "teardown" or (call.when == "setup" and call.excinfo is None):
        return report
    case: Case | None = item.stash.get(CASE, None)
    try:
        found = _monitored(item, case)
        judged = _verdict(item, case, call.excinfo, found)
    except monitoring.MonitorFailed as failure:
        found, judged = [], _monitor_failed(failure)
    judged, death = _after_target_check(item, case, judged)
    if call.when == "call" and death is None and judged.verdict in (FAIL, NON_STRICT) and case is not None:
        judged = _as_another_release(item, case, judged)
    verdict, message = judged.verdict, judged.message
    ids = case_requirements(item)
    pcap = None
    if case and verdict in (FAIL, PRECONDITION, ERROR) and case.transcript.endpoints:
        pcap = settings.reports_dir / "pcap" / (re.sub(r"[^A-Za-z0-9_.-]+", "_", item.nodeid) + ".pcap")
        case.transcript.write_pcap(pcap)
    report.nsq = {
        "verdict": verdict,
        "message": message,
        "cause": judged.cause,
        "level": judged.level,  # the cause's
        "cause_items": list(judged.cause_items),
        "broken": list(judged.broken),
        "wording_only": judged.wording_only,
        "target": _target_label(item, settings),
        "target_death": death,
        "requirements": ids,
        "doc": (item.function.__doc__ or "").strip() if hasattr(item, "function") else "",
        "transcript": case.transcript.as_dicts() if case else [],
        "pcap": str(pcap) if pcap else None,
        "baseline": in_baseline(item.nodeid, settings.baseline),
        "compare": _with_verdicts_compared(item.stash.get(COMPARED, None), verdict),
        "monitors": [violation.as_dict() for violation in found],
    }
    properties = [("verdict", verdict), ("requirements", " ".join(ids)),
                  ("levels", " ".join(requirements()[i].level for i in ids)), ("broken", ", ".join(judged.broken))]
    report.user_properties += properties
    item.user_properties += properties  # junitxml writes the teardown report's copy (JUnit <property>)
    if case:
        report.sections.append(("nsq transcript", case.transcript.render()))
    if verdict in (UNSUPPORTED, NOT_RUN):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"{verdict}: {message}")
    elif verdict == NON_STRICT:
        report.outcome = "passed"
        report.sections.append(("nsq non-strict", message))
    elif verdict == PASS:
        report.outcome = "passed"
    else:
        report.outcome = "failed"
        expected = call.excinfo is None or isinstance(call.excinfo.value, (Mismatch, HarnessError,
                                                                           PreconditionFailed))
        if expected or death:
            # The requirement, expected and actual say it all (also for NON-STRICT details under --strict, which
            # raise nothing); the harness traceback would not help.
            in_case = [e for e in call.excinfo.traceback if Path(e.path).parent.name == "cases"] if call.excinfo else []
            entry = in_case[-1] if in_case else None
            where = f"{item.nodeid}" + (f" (at {Path(entry.path).name}:{entry.lineno + 1})" if entry else "")
            broken = [f"broken: {', '.join(judged.broken)}"] if judged.broken else []
            report.longrepr = "\n".join([where, *(f"{i} [{requirements()[i].level}] {requirements()[i].text}"
                                                   for i in ids), *broken, message])
    return report


def _monitored(item, case) -> list:
    """The broker-side violations the catalogue's monitors saw in the case's transcript (conformance/monitoring.py),
    but those the case provokes on purpose (``@pytest.mark.monitors_expect(ID, ...)``) and those of rules the release
    the target follows lacks (the monitors hold the newest release's: ID-11 is since 1.1.0): a case passes only if
    no monitor saw the broker break a rule of its release."""
    if not isinstance(case, (Case, LookupdCase)):
        return []
    expected = {i for marker in item.iter_markers("monitors_expect") for i in marker.args}
    if isinstance(case, LookupdCase):
        judged = [monitoring.judge_lookupd(case.transcript, case.name_prefix, case.target.limits)]
    elif (lookupd := getattr(case, "lookupd", None) or case.target.lookupd) is not None:
        # the registration fixture's fake nsqlookupd, or the one a crashable target registers with from its start
        judged = monitoring.judge_registration(case.transcript, lookupd, "%s:%d" % case.target.tcp,
                                               case.name_prefix, case.version)
    else:  # its topics' whole life is in its transcript, unless the profile's own command makes them
        judged = [monitoring.judge(case.transcript, case.version,
                                   tls_policy=monitors.TlsPolicy.of(case.profile.capabilities),
                                   own_names="" if case.profile.setup.get("create_topic") else case.name_prefix)]
    return [violation for judge in judged for violation in judge.violations
            if violation.side == monitors.BROKER and violation.item not in expected and case.has(violation.item)]


def _monitor_failed(failure: monitoring.MonitorFailed) -> Judged:
    """A monitor that raised on a case's traffic is the toolkit's bug, whatever the target sent: the case's ERROR,
    loud, rather than an INTERNALERROR that ends the run (or, under pytest-xdist, the worker)."""
    message = f"{MONITOR_RAISED}: {failure}"
    return Judged(ERROR, message, cause_of(failure, message))


def _target_label(item, settings) -> str:
    """Which program a case judges, and which one: a case of the embedded reference nsqlookupd that runs beside a
    broker the user started is not that broker's, and is counted apart."""
    if "lookupd" in item.fixturenames:
        return "nsqlookupd %s:%d" % settings.lookupd_tcp if settings.lookupd_tcp else "embedded reference nsqlookupd"
    if settings.tcp and not settings.embedded:
        return "nsqd %s:%d" % settings.tcp
    return "embedded reference nsqd"


def pytest_report_teststatus(report, config):
    verdict = getattr(report, "nsq", {}).get("verdict")
    if verdict and report.when in ("setup", "call") and not (report.when == "setup" and verdict == PASS):
        return _TEST_STATUS[verdict]
    return None
