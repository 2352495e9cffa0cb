"""The suite's fixtures: the targets (the user's, or the embedded reference programs of ``embedded.py``) and the
Case fixtures the cases work with (``nsq``, ``restartable``, ``crashable``, ``registration``, ``lookupd``), and
``own_nsqlookupd`` beside them."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import re

import pytest

from conformance import crash, embedded
from conformance.case import Case, LookupdCase, LookupdTarget, Target
from conformance.catalogue import requirements
from conformance.client import HarnessError, HttpClient, Mismatch, Unsupported
from conformance.liveness import PROBE_SECONDS, TargetHealth, probe_lookupd, probe_nsqd
from conformance.lookupd_fake import FakeLookupd
from conformance.options import Settings
from conformance.plugin import AUTHD_ADDRESS, CASE, SETTINGS, case_requirements
from conformance.target import EmbeddedLookupd, TargetError, check_reachable, restart_with_command
from conformance.transcript import Transcript


def _log_path(config, name: str):
    """``<reports>/<name>-<worker>.log``: each xdist worker's programs log apart."""
    worker = getattr(config, "workerinput", {}).get("workerid", "main")
    return config.stash[SETTINGS].reports_dir / f"{name}-{worker}.log"


def _started(stack: contextlib.ExitStack, programs: contextlib.AbstractContextManager):
    """The embedded programs, started; a target that does not start ends the run (one line, exit status 2)."""
    try:
        return stack.enter_context(programs)
    except TargetError as exc:
        pytest.exit(str(exc), returncode=2)


def _reachable(address: tuple[str, int], option: str) -> None:
    try:
        check_reachable(address, option)
    except TargetError as exc:
        pytest.exit(str(exc), returncode=2)


# ---- the targets ---------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def nsq_target(pytestconfig):
    settings = pytestconfig.stash[SETTINGS]
    if settings.tcp:
        _reachable(settings.tcp, "--target")
        yield Target(settings.profile, settings.tcp, settings.http, settings.time_scale, https=settings.https,
                     tls=settings.tls, health=_user_target_health(settings), authd=pytestconfig.stash[AUTHD_ADDRESS])
        return
    with contextlib.ExitStack() as stack:
        target = _started(stack, embedded.nsqd(settings, _log_path(pytestconfig, "broker"),
                                               pytestconfig.stash[AUTHD_ADDRESS]))
        # the restart cases restart brokers of their own
        yield dataclasses.replace(target, restart=None, authd=pytestconfig.stash[AUTHD_ADDRESS])


def _user_target_health(settings: Settings) -> TargetHealth:
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


@pytest.fixture(scope="session")
def lookupd_target(pytestconfig):
    """The nsqlookupd under test: --lookupd-target/--lookupd-http-target, or the embedded reference one."""
    settings = pytestconfig.stash[SETTINGS]
    if settings.lookupd_tcp:
        _reachable(settings.lookupd_tcp, "--lookupd-target")
        _reachable(settings.lookupd_http, "--lookupd-http-target")
        health = TargetHealth("nsqlookupd %s:%d" % settings.lookupd_tcp, lambda: probe_lookupd(
            settings.lookupd_tcp, settings.lookupd_http, PROBE_SECONDS * settings.time_scale), None,
            shared_death=settings.reports_dir / ".lookupd-died")
        yield LookupdTarget(settings.lookupd_tcp, settings.lookupd_http, settings.time_scale,
                            settings.lookupd_profile.limits, health)
        return
    with contextlib.ExitStack() as stack:
        yield _started(stack, embedded.nsqlookupd(settings, _log_path(pytestconfig, "lookupd")))


@pytest.fixture(scope="session")
def restartable_target(pytestconfig, request):
    """What the restart cases run against: the target with --restart-command; when the suite runs the embedded
    broker, one of this worker's own (restarting the shared one would cut the other workers' cases off);
    otherwise none."""
    settings = pytestconfig.stash[SETTINGS]
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
    with contextlib.ExitStack() as stack:
        yield _started(stack, embedded.nsqd(settings, _log_path(pytestconfig, "broker-restarts"),
                                            pytestconfig.stash[AUTHD_ADDRESS]))


@pytest.fixture(scope="session")
def listening_fake_lookupd(pytestconfig):
    """The fake nsqlookupd at --lookupd-listen, which the target was started with (python -m conformance then
    runs the cases one at a time: the address is one)."""
    lookupd = FakeLookupd(pytestconfig.stash[SETTINGS].lookupd_listen).start()
    yield lookupd
    lookupd.stop()


@pytest.fixture
def fake_lookupd(pytestconfig, nsq_target, request):
    """The suite's fake nsqlookupd, registered with the target: the one at --lookupd-listen, or one on a free port
    set through PUT /config/nsqlookupd_tcp_addresses (R-11) and put back afterwards. The target is shared by
    the workers, so a file lock lets one registration case at a time change its lookupd."""
    settings = pytestconfig.stash[SETTINGS]
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


# ---- the cases' fixtures -------------------------------------------------------------------------

def case_name(item) -> str:
    """The case's part of its topic names."""
    return re.sub(r"[^a-zA-Z0-9_-]", "", item.name.removeprefix("test_"))[:24]


def _sections(item) -> frozenset[str]:
    """The requirement sections a case checks: its PUB, SUB, IDENTIFY, ... of other sections are setup steps."""
    catalogue = requirements()
    return frozenset(catalogue[requirement_id].section for requirement_id in case_requirements(item))


def _serving(request, case: Case | LookupdCase, *needs: str):
    """The case, once the target offers what it ``needs`` (else UNSUPPORTED), kept for its verdict; closed after."""
    case.version = request.config.stash[SETTINGS].nsq_version
    for need in needs:
        case.require(need)
    request.node.stash[CASE] = case
    yield case
    case.close()


@pytest.fixture
def nsq(nsq_target, request):
    nsq_target.health.ensure_alive()
    case = request.node.stash[CASE] = Case(nsq_target, case_name(request.node), _sections(request.node))
    case.version = request.config.stash[SETTINGS].nsq_version
    nsq_target.health.case_started(request.node.nodeid)
    yield case
    nsq_target.health.case_finished()
    case.close()


@pytest.fixture
def restartable(restartable_target, request):
    """A case on a target the suite can restart (P-RST); UNSUPPORTED without one."""
    if restartable_target is None:
        raise Unsupported("the suite cannot restart this target: the profile has no `restart` capability, or "
                          "the target was started by the user without --restart-command")
    restartable_target.health.ensure_alive()
    yield from _serving(request, Case(restartable_target, case_name(request.node), _sections(request.node)),
                        "http")  # the restart cases read /stats


@pytest.fixture
def crashable(pytestconfig, request):
    """A case on a target the suite may SIGKILL, restart, read the data path of, and see the registrations of
    from its start (conformance/crash.py): the embedded broker, one of the case's own; the user's, as its options
    allow. Each case says what it needs (crash.require)."""
    settings = pytestconfig.stash[SETTINGS]
    if settings.tcp and not settings.embedded:
        lookupd = request.getfixturevalue("listening_fake_lookupd") if settings.lookupd_listen else None
        context = contextlib.nullcontext(crash.given(settings, lookupd))
    else:
        context = crash.embedded(settings, pytestconfig.stash[AUTHD_ADDRESS],
                                 _log_path(pytestconfig, "broker-crashes"))
    with context as target:
        yield from _serving(request, Case(target, case_name(request.node)), "http")  # the crash cases read /stats


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
def lookupd(lookupd_target, request):
    lookupd_target.health.ensure_alive()
    yield from _serving(request, LookupdCase(lookupd_target, case_name(request.node)))


@pytest.fixture
def own_nsqlookupd(pytestconfig):
    """A reference nsqlookupd of the case's own, which no other case has used and which the case may restart or stop
    (the EmbeddedLookupd), beside a case fixture: only when the suite runs the embedded nsqlookupd; for a
    --lookupd-target it cannot have one fresh, and the case is UNSUPPORTED."""
    settings = pytestconfig.stash[SETTINGS]
    if settings.lookupd_tcp:
        raise Unsupported("the case needs an nsqlookupd of its own, fresh, that it may restart or stop: the suite "
                          "starts one only in place of the embedded nsqlookupd (no --lookupd-target)")
    process = EmbeddedLookupd(_log_path(pytestconfig, "lookupd-own"), settings.lookupd_profile)
    try:
        process.start()
    except TargetError as exc:
        raise HarnessError(str(exc)) from exc
    yield process
    process.stop()

