"""pytest plugin of the conformance suite: options, the target, graded verdicts, baseline, reports.

Registered through the ``pytest11`` entry point, so ``pytest --nsq-target HOST:PORT`` runs the suite's cases in
any project that installs the package; it stays inert (no fixtures started, no verdicts, other tests untouched)
until one of its ``--nsq-*`` options is given. ``python -m conformance`` gives them.

Verdicts (set in ``pytest_runtest_makereport``, the way pytest's skipping plugin sets xfail):
PASS; FAIL = a MUST is broken; NON-STRICT = only a SHOULD (or nsqd's exact wording) is broken,
FAIL under ``--strict``; PRECONDITION = a setup step failed, so the case could not test its requirement;
UNSUPPORTED = an optional capability is missing; NOT RUN = the target died during an earlier case and could not
be restarted; ERROR = harness trouble (the target cannot be reached).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import re
from pathlib import Path

import pytest

from conformance import compare, crash, options
from conformance.authd import AuthServer
from conformance.case import Case, LookupdCase, LookupdTarget, Target
from conformance.catalogue import requirements
from conformance.client import HarnessError, HttpClient, Mismatch, PreconditionFailed, Unsupported
from conformance.liveness import PROBE_SECONDS, NotRun, TargetHealth, probe_lookupd, probe_nsqd
from conformance.lookupd_fake import FakeLookupd
from conformance.target import (
    EmbeddedBroker,
    EmbeddedLookupd,
    TargetError,
    check_reachable,
    restart_with_command,
)
from conformance.transcript import Transcript
from conformance.verdicts import (
    ERROR,
    FAIL,
    NON_STRICT,
    NOT_RUN,
    PASS,
    PRECONDITION,
    TARGET_DIED,
    UNSUPPORTED,
    cause_of,
    masked,
)

_TEST_STATUS = {
    PASS: ("passed", ".", ("PASS", {"green": True})),
    FAIL: ("failed", "F", ("FAIL", {"red": True})),
    NON_STRICT: ("non-strict", "N", ("NON-STRICT", {"yellow": True})),
    PRECONDITION: ("precondition", "P", ("PRECONDITION", {"yellow": True})),
    UNSUPPORTED: ("unsupported", "U", ("UNSUPPORTED", {"blue": True})),
    NOT_RUN: ("not run", "-", ("NOT RUN", {"purple": True})),
    ERROR: ("error", "E", ("ERROR", {"red": True})),
}


def pytest_addoption(parser):
    options.add_to_pytest(parser.getgroup("nsq-conformance", "NSQ conformance suite (any --nsq-* option turns it on)"))


def _active(config) -> bool:
    """Any of the suite's options given (a value other than its default) turns the plugin on."""
    return any(config.getoption(option.dest) not in (option.default, [], False)
               for option in (*options.OPTIONS, options.EMBEDDED))


def in_baseline(nodeid: str, baseline: dict[str, str]) -> bool:
    return any(nodeid == entry or nodeid.endswith("/" + entry) for entry in baseline)


def pytest_configure(config):
    config.addinivalue_line("markers", "requirement(*ids): the catalogue requirement IDs a case checks")
    config.addinivalue_line("markers", "long_wait(seconds): the case waits about this long on the broker's timers; "
                            "such cases start first, longest first, so that parallel workers end together")
    config.addinivalue_line("markers", "transcript_varies(why): --compare judges this case by its verdict only, "
                            "its transcript differs from run to run by design (e.g. concurrent clients)")
    config.nsq_active = _active(config)
    if not config.nsq_active:
        return
    try:
        config.nsq_settings = options.settings(config.getoption)
    except TargetError as exc:
        raise pytest.UsageError(str(exc)) from None
    if getattr(config.option, "maxschedchunk", 0) is None:
        config.option.maxschedchunk = 1  # pytest-xdist then sends each worker 2 cases first, then 1 at a time
    config.nsq_authd = None
    if hasattr(config, "workerinput"):
        config.nsq_authd_address = config.workerinput.get("nsq_authd_address")
    else:  # the auth server and the report writers run on the controller only (xdist)
        _start_authd(config)
        from conformance.report.collector import ResultCollector
        config.pluginmanager.register(ResultCollector(config), "nsq-results")


def _start_authd(config) -> None:
    """One fake auth server per run, so that a ``ttl1-`` secret is answered once whichever worker asks."""
    settings = config.nsq_settings
    config.nsq_authd_address = None
    if not settings.profile.capabilities.get("auth"):
        return
    try:
        config.nsq_authd = AuthServer(settings.authd or ("127.0.0.1", 0)).start()
    except OSError as exc:
        where = "%s:%d" % settings.authd if settings.authd else "a free loopback port"
        raise pytest.UsageError(f"cannot start the fake auth server on {where}: {exc.strerror or exc}") from None
    config.nsq_authd_address = config.nsq_authd.address


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    if node.config.nsq_active:
        node.workerinput["nsq_authd_address"] = node.config.nsq_authd_address


def pytest_unconfigure(config):
    if getattr(config, "nsq_authd", None):
        config.nsq_authd.stop()


def pytest_report_header(config):
    if not config.nsq_active:
        return None
    settings = config.nsq_settings
    where = f"{settings.tcp[0]}:{settings.tcp[1]}" if settings.tcp else "embedded reference broker"
    http = f"{settings.http[0]}:{settings.http[1]}" if settings.http else (
        "embedded" if not settings.tcp else "none (HTTP cases UNSUPPORTED)")
    return [f"nsq target: {where}  http: {http}",
            f"nsq profile: {settings.profile.name} ({settings.profile.description}); time scale "
            f"{settings.time_scale:g}; strict {settings.strict}"
            + (f"; fake auth server {config.nsq_authd_address}" if config.nsq_authd_address else "")]


def case_requirements(item) -> list[str]:
    return [requirement_id for marker in item.iter_markers("requirement") for requirement_id in marker.args]


CASE_FIXTURES = frozenset({"nsq", "restartable", "registration", "lookupd", "crashable"})


def is_case(item) -> bool:
    """A conformance case: it works with one of this plugin's Case fixtures (a project's own fixture of the same
    name does not count). Other tests in the run are left alone."""
    fixtures = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    return any(fixtures[name][-1].func.__module__ == __name__ for name in CASE_FIXTURES.intersection(fixtures))


def pytest_collection_modifyitems(config, items):
    cases = [item for item in items if is_case(item)]
    if not config.nsq_active:
        if cases:
            raise pytest.UsageError(f"{cases[0].nodeid} is an NSQ conformance case: give the suite's options, e.g. "
                                    "--nsq-target HOST:PORT --nsq-http-target HOST:PORT, or --nsq-embedded")
        return
    catalogue = requirements()
    for item in cases:
        ids = case_requirements(item)
        if not ids:
            raise pytest.UsageError(f"{item.nodeid} has no @pytest.mark.requirement(...)")
        unknown = [requirement_id for requirement_id in ids if requirement_id not in catalogue]
        if unknown:
            raise pytest.UsageError(f"{item.nodeid} names unknown requirements {unknown}")
    items[:] = _long_waits_first(items)
    prefixes = config.nsq_settings.requirement_prefixes
    if prefixes:
        deselected = [item for item in cases
                      if not any(i.startswith(p) for i in case_requirements(item) for p in prefixes)]
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if item not in deselected]


def _long_waits_first(items: list) -> list:
    """The long_wait cases first, longest first, each followed by one other case: pytest-xdist's first hand to a
    worker is two cases (with maxschedchunk 1), so every worker starts one long wait at once and no worker gets
    two. The rest keep their order."""
    markers = {item: item.get_closest_marker("long_wait") for item in items}
    waits = {item: marker.args[0] for item, marker in markers.items() if marker}
    long = sorted(waits, key=waits.get, reverse=True)
    rest = [item for item in items if item not in waits]
    paired = [item for pair in zip(long, rest, strict=False) for item in pair]
    return paired + long[len(rest):] + rest[len(long):]


# ---- the target ----------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def nsq_target(pytestconfig):
    settings = pytestconfig.nsq_settings
    if settings.tcp:
        try:
            check_reachable(settings.tcp, "--target")
        except TargetError as exc:
            pytest.exit(str(exc), returncode=2)
        yield Target(settings.profile, settings.tcp, settings.http, settings.time_scale, https=settings.https,
                     tls=settings.tls, health=_user_target_health(settings))
        return
    with _embedded_broker(pytestconfig, "broker") as target:
        yield dataclasses.replace(target, restart=None)  # the restart cases restart brokers of their own


def _user_target_health(settings) -> TargetHealth:
    """The liveness of a broker the user started: restarted with --restart-command when given; otherwise its death
    is shared with the other workers through a file, and their later cases are NOT RUN."""
    https = settings.profile.offers("tls_required") == "true"
    http, tls = (settings.https, settings.tls.context()) if https else (settings.http, None)
    revive = None
    if settings.restart_command:
        addresses = [address for address in (settings.tcp, settings.http) if address]

        def revive() -> str:
            restart_with_command(settings.restart_command, addresses)
            return f"restarted with --restart-command {settings.restart_command!r}"
    settings.reports_dir.mkdir(parents=True, exist_ok=True)
    return TargetHealth("nsqd %s:%d" % settings.tcp,
                        lambda: probe_nsqd(settings.tcp, http, PROBE_SECONDS * settings.time_scale, tls), revive,
                        shared_death=settings.reports_dir / ".target-died")


@contextlib.contextmanager
def _embedded_broker(pytestconfig, log_name: str):
    """A reference broker of this worker's own, with the profile's flags, as a restartable Target."""
    settings = pytestconfig.nsq_settings
    worker = getattr(pytestconfig, "workerinput", {}).get("workerid", "main")
    settings.reports_dir.mkdir(parents=True, exist_ok=True)
    broker = EmbeddedBroker(settings.profile, settings.reports_dir / f"{log_name}-{worker}.log",
                            authd_address=pytestconfig.nsq_authd_address)
    try:
        broker.start()
    except TargetError as exc:
        pytest.exit(str(exc), returncode=2)
    def revive() -> str:
        broker.restart()
        return "the suite restarted the embedded reference broker on the same ports and data path"

    tls = options.tls_client(options.EMBEDDED_TLS.get)
    https = settings.profile.offers("tls_required") == "true"

    def probe() -> str | None:
        http = broker.https_address if https else broker.http_address
        return probe_nsqd(broker.tcp_address, http, PROBE_SECONDS * settings.time_scale,
                          tls.context() if https else None)

    health = TargetHealth("embedded reference nsqd", probe, revive)
    try:
        yield Target(settings.profile, broker.tcp_address, broker.http_address, settings.time_scale, broker.restart,
                     https=broker.https_address, tls=tls, health=health)
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def lookupd_target(pytestconfig):
    """The nsqlookupd under test: --lookupd-target/--lookupd-http-target, or the embedded reference one."""
    settings = pytestconfig.nsq_settings
    if settings.lookupd_tcp:
        for address, option in ((settings.lookupd_tcp, "--lookupd-target"),
                                (settings.lookupd_http, "--lookupd-http-target")):
            try:
                check_reachable(address, option)
            except TargetError as exc:
                pytest.exit(str(exc), returncode=2)
        health = TargetHealth("nsqlookupd %s:%d" % settings.lookupd_tcp, lambda: probe_lookupd(
            settings.lookupd_tcp, settings.lookupd_http, PROBE_SECONDS * settings.time_scale), None,
            shared_death=settings.reports_dir / ".lookupd-died")
        yield LookupdTarget(settings.lookupd_tcp, settings.lookupd_http, settings.time_scale,
                            settings.lookupd_profile.limits, health)
        return
    worker = getattr(pytestconfig, "workerinput", {}).get("workerid", "main")
    settings.reports_dir.mkdir(parents=True, exist_ok=True)
    lookupd = EmbeddedLookupd(settings.reports_dir / f"lookupd-{worker}.log", settings.lookupd_profile)
    try:
        lookupd.start()
    except TargetError as exc:
        pytest.exit(str(exc), returncode=2)
    def revive() -> str:
        lookupd.restart()
        return "the suite restarted the embedded reference nsqlookupd on the same ports"

    health = TargetHealth("embedded reference nsqlookupd", lambda: probe_lookupd(
        lookupd.tcp_address, lookupd.http_address, PROBE_SECONDS * settings.time_scale), revive)
    try:
        yield LookupdTarget(lookupd.tcp_address, lookupd.http_address, settings.time_scale,
                            settings.lookupd_profile.limits, health)
    finally:
        lookupd.stop()


def _case_name(item) -> str:
    """The case's part of its topic names."""
    return re.sub(r"[^a-zA-Z0-9_-]", "", item.name.removeprefix("test_"))[:24]


def _sections(item) -> frozenset[str]:
    """The requirement sections a case checks: its PUB, SUB, IDENTIFY, ... of other sections are setup steps."""
    catalogue = requirements()
    return frozenset(catalogue[requirement_id].section for requirement_id in case_requirements(item))


@pytest.fixture
def lookupd(lookupd_target, request):
    lookupd_target.health.ensure_alive()
    case = LookupdCase(lookupd_target, _case_name(request.node))
    request.node.nsq_case = case
    yield case
    case.close()


@pytest.fixture(scope="session")
def restartable_target(pytestconfig, request):
    """What the restart cases run against: the target with --restart-command; when the suite runs the embedded
    broker, one of this worker's own (restarting the shared one would cut the other workers' cases off);
    otherwise none."""
    settings = pytestconfig.nsq_settings
    if not settings.profile.capabilities.get("restart"):
        yield None
        return
    if settings.restart_command:
        addresses = [address for address in (settings.tcp, settings.http) if address]
        target = request.getfixturevalue("nsq_target")  # the same target, and liveness, as the other cases
        yield dataclasses.replace(target, restart=lambda: restart_with_command(settings.restart_command, addresses))
        return
    if settings.tcp and not settings.embedded:
        yield None
        return
    with _embedded_broker(pytestconfig, "broker-restarts") as target:
        yield target


@pytest.fixture
def restartable(restartable_target, request):
    """A case on a target the suite can restart (P-RST); UNSUPPORTED without one."""
    if restartable_target is None:
        raise Unsupported("the suite cannot restart this target: the profile has no `restart` capability, or "
                          "the target was started by the user without --restart-command")
    restartable_target.health.ensure_alive()
    case = Case(restartable_target, _case_name(request.node), _sections(request.node))
    case.require("http")  # the restart cases read /stats
    request.node.nsq_case = case
    yield case
    case.close()


@pytest.fixture
def crashable(pytestconfig, request):
    """A case on a target the suite may SIGKILL, restart, read the data path of, and see the registrations of
    from its start (conformance/crash.py): the embedded broker, one of the case's own; the user's, as its options
    allow. Each case says what it needs (crash.require)."""
    settings = pytestconfig.nsq_settings
    if settings.tcp and not settings.embedded:
        lookupd = request.getfixturevalue("listening_fake_lookupd") if settings.lookupd_listen else None
        context = contextlib.nullcontext(crash.given(settings, lookupd))
    else:
        settings.reports_dir.mkdir(parents=True, exist_ok=True)
        worker = getattr(pytestconfig, "workerinput", {}).get("workerid", "main")
        context = crash.embedded(settings, pytestconfig.nsq_authd_address,
                                 settings.reports_dir / f"broker-crashes-{worker}.log")
    with context as target:
        case = Case(target, _case_name(request.node))
        case.require("http")  # the crash cases read /stats
        request.node.nsq_case = case
        yield case
        case.close()


@pytest.fixture(scope="session")
def listening_fake_lookupd(pytestconfig):
    """The fake nsqlookupd at --lookupd-listen, which the target was started with (python -m conformance then
    runs the cases one at a time: the address is one)."""
    lookupd = FakeLookupd(pytestconfig.nsq_settings.lookupd_listen).start()
    yield lookupd
    lookupd.stop()


@pytest.fixture
def fake_lookupd(pytestconfig, nsq_target, request):
    """The suite's fake nsqlookupd, registered with the target: the one at --lookupd-listen, or one on a free port
    set through PUT /config/nsqlookupd_tcp_addresses (R-11) and put back afterwards. The target is shared by
    the workers, so a file lock lets one registration case at a time change its lookupd."""
    settings = pytestconfig.nsq_settings
    if settings.lookupd_listen:
        yield request.getfixturevalue("listening_fake_lookupd")
        return
    if nsq_target.http is None or nsq_target.requires_tls("http"):
        yield None
        return
    settings.reports_dir.mkdir(parents=True, exist_ok=True)
    with (settings.reports_dir / ".registration.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        http = HttpClient(nsq_target.http, Transcript(), settings.time_scale)
        before = http.get("/config/nsqlookupd_tcp_addresses")
        if before.status != 200:
            yield None
            return
        lookupd = FakeLookupd().start()
        try:
            http.request("PUT", "/config/nsqlookupd_tcp_addresses", json.dumps(["%s:%d" % lookupd.address]).encode())
            lookupd.settle(5.0 * settings.time_scale)
            yield lookupd
        finally:
            try:
                http.request("PUT", "/config/nsqlookupd_tcp_addresses", before.body)
            except (Mismatch, HarnessError):
                pass  # putting the target's nsqlookupd back is best effort: the case's verdict is made
            lookupd.stop()


@pytest.fixture
def registration(nsq, fake_lookupd):
    """An nsqd case with the fake nsqlookupd the target registers with (section 10)."""
    nsq.require("nsqlookupd")
    if fake_lookupd is None:
        raise Unsupported("the target's registration cannot be observed: no plain HTTP API to PUT "
                          "/config/nsqlookupd_tcp_addresses, and no --lookupd-listen")
    nsq.lookupd = fake_lookupd
    return nsq


@pytest.fixture
def nsq(nsq_target, request):
    nsq_target.health.ensure_alive()
    case = Case(nsq_target, _case_name(request.node), _sections(request.node))
    request.node.nsq_case = case
    nsq_target.health.case_started(request.node.nodeid)
    yield case
    nsq_target.health.case_finished()
    case.close()


# ---- verdicts ------------------------------------------------------------------------------------

def _verdict(item, case: Case | None, excinfo: pytest.ExceptionInfo | None) -> tuple[str, str, str]:
    """The verdict, its message and, for a failing one, its cause (verdicts.cause_of)."""
    verdict, message, error = _judged(item, case, excinfo)
    if verdict in (PASS, UNSUPPORTED, NOT_RUN):
        return verdict, message, ""
    if error is None and case is not None and case.verify.soft_mismatches:
        return verdict, message, masked(case.verify.soft_mismatches[0].what)  # wording differences group by what
    return verdict, message, cause_of(error, message)


def _judged(item, case: Case | None, excinfo: pytest.ExceptionInfo | None) -> tuple[str, str, BaseException | None]:
    catalogue = requirements()
    levels = {catalogue[i].level for i in case_requirements(item)}
    strict = item.config.nsq_settings.strict
    if excinfo is None:
        if case and case.verify.soft_mismatches:
            message = "\n".join(str(mismatch) for mismatch in case.verify.soft_mismatches)
            return (FAIL if strict else NON_STRICT), message, None
        return PASS, "", None
    error = excinfo.value
    if isinstance(error, NotRun):
        return NOT_RUN, str(error), error
    if isinstance(error, (Unsupported, pytest.skip.Exception)):
        return UNSUPPORTED, str(error), error
    if isinstance(error, PreconditionFailed):
        return PRECONDITION, str(error), error
    if isinstance(error, AssertionError):
        # MAY marks an optional capability: absent -> UNSUPPORTED, present but wrong -> FAIL.
        if levels - {"SHOULD"} or strict:
            return FAIL, str(error), error
        return NON_STRICT, str(error), error
    if isinstance(error, (HarnessError, pytest.fail.Exception)):
        return ERROR, str(error), error
    if isinstance(error, (KeyError, IndexError, TypeError)) and _raised_in_case(excinfo):
        # The case read a part of the broker's answer that is not there (a null where an object was due, a
        # missing frame field): the broker's doing, judged as the requirement says, not harness trouble.
        what = f"the broker's answer{_last_answer(case)} has what {Path(excinfo.traceback[-1].path).name} reads"
        return (FAIL if levels - {"SHOULD"} or strict else NON_STRICT), \
            f"{what}\n  expected: a value there\n  actual:   {type(error).__name__}: {error}", error
    return ERROR, f"{type(error).__name__}: {error}", error


def _last_answer(case) -> str:
    """' to GET /stats?...' (the request or command the last answer the case received was for), or ''."""
    events = case.transcript.events if case else []
    for index in range(len(events) - 1, -1, -1):
        if events[index].direction == "<":
            asked = next((event for event in reversed(events[:index]) if event.direction == ">"
                          and event.connection == events[index].connection), None)
            return f" to {asked.lines[-1][:100]}" if asked and asked.lines else ""
    return ""


def _after_target_check(item, case, verdict: str, message: str, cause: str) -> tuple[str, str, str, dict | None]:
    """A case that saw its target close a connection, or did not pass, asks the target whether it is still there
    (liveness.py). The case during which it died is a FAIL that says so, once; a case that ran while another
    worker's case saw it die is NOT RUN; the verdict stands while the target answers."""
    health = getattr(case.target, "health", None) if case else None
    saw_close = case is not None and any(endpoint.closed_by_server for endpoint in case.transcript.endpoints.values())
    if health is None or not (saw_close or verdict not in (PASS, UNSUPPORTED, NOT_RUN)):
        return verdict, message, cause, None
    death = health.check(item.nodeid)
    saw = f"\nWhat the case saw:\n{message}" if message else ""
    if death is None:
        if health.dead:  # another worker's case named the death first; this one ran then, and may be its cause
            return NOT_RUN, f"not run to the end: {health.dead}, while this case ran{saw}", "", None
        return verdict, message, cause, None
    what = f"TARGET DIED during {item.nodeid}: {death.reason}. " + (
        f"It came back: {death.revived}." if death.revived else "It was not restarted: later cases on it are NOT RUN.")
    if death.concurrent:
        what += (f" Other workers were running {', '.join(death.concurrent)} on it at the time: the cause may be "
                 "one of those (--workers 0 or --restart-command runs one case at a time).")
    return FAIL, what + saw, TARGET_DIED, death.as_dict()


# ---- differential mode (--compare) -------------------------------------------------------------------

@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    try:
        return (yield)
    finally:
        if item.config.nsq_active and item.config.nsq_settings.compare_tcp and is_case(item):
            item.nsq_compare = _run_on_compare_target(item)


def _run_on_compare_target(item) -> dict:
    """The case once more, against --compare, right after its run on the target: its verdict there and where the
    two normalised transcripts differ."""
    settings = item.config.nsq_settings
    against = "%s:%d" % settings.compare_tcp
    case = getattr(item, "nsq_case", None)
    if not isinstance(case, Case) or set(item.fixturenames) & {"restartable", "registration", "crashable"}:
        return {"against": against, "status": "not compared",
                "why": "restart, registration and nsqlookupd cases run against the target only"}
    other = Case(Target(settings.profile, settings.compare_tcp, settings.compare_http, settings.time_scale),
                 _case_name(item))
    # the case fixtures, and the cases' own fixtures made of them (`auth` is the case, `http` its HTTP client)
    counterpart = {id(case): other, id(case.http): other.http}
    arguments = {name: counterpart.get(id(item.funcargs[name]), item.funcargs[name])
                 for name in item._fixtureinfo.argnames}
    excinfo = None
    try:
        item.obj(**arguments)
    except (Exception, pytest.skip.Exception, pytest.fail.Exception) as error:
        excinfo = pytest.ExceptionInfo.from_exception(error)
    varies = item.get_closest_marker("transcript_varies")
    # before the clean-up, which the target's run has not had yet
    diff = [] if varies else compare.differences(case, other, against)
    other.close()
    verdict, message, _ = _verdict(item, other, excinfo)
    return {"against": against, "status": "different" if diff else "same", "verdict": verdict, "message": message,
            "diff": diff, "transcripts": f"not compared: {varies.args[0]}" if varies else "compared"}


def _with_verdicts_compared(compared: dict | None, verdict: str) -> dict | None:
    if compared and compared["status"] == "same" and compared["verdict"] != verdict:
        return {**compared, "status": "different"}
    return compared


def _raised_in_case(excinfo) -> bool:
    return Path(excinfo.traceback[-1].path).parent.name == "cases"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if not item.config.nsq_active or not is_case(item):
        return report
    if call.when == "teardown" or (call.when == "setup" and call.excinfo is None):
        return report
    case: Case | None = getattr(item, "nsq_case", None)
    verdict, message, cause = _verdict(item, case, call.excinfo)
    verdict, message, cause, death = _after_target_check(item, case, verdict, message, cause)
    ids = case_requirements(item)
    pcap = None
    settings = item.config.nsq_settings
    if case and verdict in (FAIL, PRECONDITION, ERROR) and case.transcript.endpoints:
        pcap = settings.reports_dir / "pcap" / (re.sub(r"[^A-Za-z0-9_.-]+", "_", item.nodeid) + ".pcap")
        case.transcript.write_pcap(pcap)
    report.nsq = {
        "verdict": verdict,
        "message": message,
        "cause": cause,
        "target": _target_label(item),
        "target_death": death,
        "requirements": ids,
        "doc": (item.function.__doc__ or "").strip() if hasattr(item, "function") else "",
        "transcript": case.transcript.as_dicts() if case else [],
        "pcap": str(pcap) if pcap else None,
        "baseline": in_baseline(item.nodeid, settings.baseline),
        "compare": _with_verdicts_compared(getattr(item, "nsq_compare", None), verdict),
    }
    properties = [("verdict", verdict), ("requirements", " ".join(ids)),
                  ("levels", " ".join(requirements()[i].level for i in ids))]
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
            report.longrepr = "\n".join([where, *(f"{i} [{requirements()[i].level}] {requirements()[i].text}"
                                                   for i in ids), message])
    return report


def _target_label(item) -> str:
    """Which program a case judges, and which one: a case of the embedded reference nsqlookupd that runs beside a
    broker the user started is not that broker's, and is counted apart."""
    settings = item.config.nsq_settings
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
