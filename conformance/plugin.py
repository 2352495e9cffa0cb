"""pytest plugin of the conformance suite: options, the target, graded verdicts, baseline, reports.

Verdicts (set in ``pytest_runtest_makereport``, the way pytest's skipping plugin sets xfail):
PASS; FAIL = a MUST is broken; NON-STRICT = only a SHOULD (or nsqd's exact wording) is broken,
FAIL under ``--strict``; UNSUPPORTED = an optional capability is missing; ERROR = harness trouble.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from conformance import wire
from conformance.authd import ALLOW_ALL_SECRET, AuthServer
from conformance.catalogue import requirements
from conformance.client import Connection, HarnessError, HttpClient, Mismatch, Unsupported, Verifier, quote
from conformance.lookupd_client import V1Connection
from conformance.lookupd_fake import FakeLookupd
from conformance.target import (
    TLS_DIR,
    EmbeddedBroker,
    EmbeddedLookupd,
    Profile,
    TargetError,
    check_reachable,
    parse_address,
    restart_with_command,
)
from conformance.transcript import Transcript

PASS, FAIL, NON_STRICT, UNSUPPORTED, ERROR = "PASS", "FAIL", "NON-STRICT", "UNSUPPORTED", "ERROR"
VERDICTS = (PASS, FAIL, NON_STRICT, UNSUPPORTED, ERROR)
_TEST_STATUS = {
    PASS: ("passed", ".", ("PASS", {"green": True})),
    FAIL: ("failed", "F", ("FAIL", {"red": True})),
    NON_STRICT: ("non-strict", "N", ("NON-STRICT", {"yellow": True})),
    UNSUPPORTED: ("unsupported", "U", ("UNSUPPORTED", {"blue": True})),
    ERROR: ("error", "E", ("ERROR", {"red": True})),
}


def pytest_addoption(parser):
    group = parser.getgroup("nsq-conformance", "NSQ conformance suite")
    group.addoption("--target", help="HOST:PORT of a running broker's TCP port (default: spawn the "
                    "embedded reference broker)")
    group.addoption("--http-target", help="HOST:PORT of that broker's HTTP API (without it, HTTP cases are "
                    "UNSUPPORTED)")
    group.addoption("--https-target", help="HOST:PORT of that broker's HTTPS API (the TLS cases' HTTPS check)")
    group.addoption("--tls-ca", help="CA certificate (PEM) that signed the target's TLS certificate: the TLS cases "
                    "then verify it (default: they check the protocol, not the certificate)")
    group.addoption("--lookupd-listen", help="HOST:PORT where the suite's fake nsqlookupd listens for the "
                    "registration cases, when the target was started with --lookupd-tcp-address pointing there "
                    "(default: a free port, set through the target's PUT /config/nsqlookupd_tcp_addresses)")
    group.addoption("--lookupd-target", help="HOST:PORT of a running nsqlookupd's TCP port (default: spawn the "
                    "embedded reference nsqlookupd)")
    group.addoption("--lookupd-http-target", help="HOST:PORT of that nsqlookupd's HTTP API")
    group.addoption("--embedded-target", action="store_true", default=False,
                    help="(set by python -m conformance) --target is the embedded reference broker")
    group.addoption("--restart-command", help="shell command that restarts --target with SIGTERM on the same data "
                    "path and ports (the restart cases; the embedded broker is restarted by the suite)")
    group.addoption("--profile", help="profile name (nsqd-defaults, nsqd-tight, nsqd-auth) or path to a .toml")
    # pytest owns --strict; `python -m conformance --strict` maps to this.
    group.addoption("--authd-address", help="HOST:PORT where the suite's fake auth server listens when the "
                    "profile has auth (default: a free loopback port; needed with --target)")
    group.addoption("--nsq-strict", action="store_true", default=False,
                    help="NON-STRICT verdicts count as FAIL")
    group.addoption("--baseline", help="file of expected failures, one case id per line ('#' comments)")
    group.addoption("--time-scale", type=float, help="stretch every wait and deadline by this factor")
    group.addoption("--reports-dir", help="where JSON/HTML reports and pcaps go")
    group.addoption("--requirement", action="append", default=[], metavar="PREFIX",
                    help="run only cases checking a requirement ID starting with PREFIX (repeatable)")
    parser.addini("nsq_profile", "default profile", default="nsqd-defaults")
    parser.addini("nsq_time_scale", "default time scale", default="1.0")
    parser.addini("nsq_reports_dir", "default reports directory", default="reports/conformance")


@dataclass
class Settings:
    profile: Profile
    tcp: tuple[str, int] | None
    http: tuple[str, int] | None
    authd: tuple[str, int] | None
    https: tuple[str, int] | None
    tls_ca: str | None
    lookupd_tcp: tuple[str, int] | None
    lookupd_http: tuple[str, int] | None
    restart_command: str | None
    lookupd_listen: tuple[str, int] | None
    embedded: bool
    strict: bool
    time_scale: float
    reports_dir: Path
    baseline: dict[str, str]


def _settings(config) -> Settings:
    option = config.getoption
    try:
        profile = Profile.load(option("--profile") or config.getini("nsq_profile"))
        tcp = parse_address(option("--target"), "--target") if option("--target") else None
        http = parse_address(option("--http-target"), "--http-target") if option("--http-target") else None
        authd = parse_address(option("--authd-address"), "--authd-address") if option("--authd-address") else None
        https = parse_address(option("--https-target"), "--https-target") if option("--https-target") else None
        listen = option("--lookupd-listen")
        lookupd_listen = parse_address(listen, "--lookupd-listen") if listen else None
        lookupd_tcp, lookupd_http = (
            parse_address(option(name), name) if option(name) else None
            for name in ("--lookupd-target", "--lookupd-http-target"))
    except TargetError as exc:
        raise pytest.UsageError(str(exc)) from None
    if http and not tcp:
        raise pytest.UsageError("--http-target needs --target")
    if bool(lookupd_tcp) != bool(lookupd_http):
        raise pytest.UsageError("--lookupd-target and --lookupd-http-target go together")
    if tcp and profile.capabilities.get("auth") and not authd:
        raise pytest.UsageError(f"profile {profile.name} with --target needs --authd-address (the address the "
                                "target's --auth-http-address points at)")
    time_scale = option("--time-scale") or float(config.getini("nsq_time_scale"))
    if time_scale <= 0:
        raise pytest.UsageError("--time-scale must be > 0")
    baseline_path = option("--baseline")
    return Settings(profile, tcp, http, authd, https, option("--tls-ca"), lookupd_tcp, lookupd_http,
                    option("--restart-command"), lookupd_listen, option("--embedded-target"), option("--nsq-strict"),
                    time_scale,
                    Path(option("--reports-dir") or config.getini("nsq_reports_dir")),
                    load_baseline(Path(baseline_path)) if baseline_path else {})


def load_baseline(path: Path) -> dict[str, str]:
    """``case-id  # why`` per line; the reason is kept for the report."""
    if not path.is_file():
        raise pytest.UsageError(f"--baseline {path}: no such file")
    baseline = {}
    for line in path.read_text().splitlines():
        case_id, _, reason = line.partition("#")
        if case_id.strip():
            baseline[case_id.strip()] = reason.strip()
    return baseline


def in_baseline(nodeid: str, baseline: dict[str, str]) -> bool:
    return any(nodeid == entry or nodeid.endswith("/" + entry) for entry in baseline)


def pytest_configure(config):
    config.addinivalue_line("markers", "requirement(*ids): the catalogue requirement IDs a case checks")
    config.nsq_settings = _settings(config)
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
    node.workerinput["nsq_authd_address"] = node.config.nsq_authd_address


def pytest_unconfigure(config):
    if getattr(config, "nsq_authd", None):
        config.nsq_authd.stop()


def pytest_report_header(config):
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


def pytest_collection_modifyitems(config, items):
    catalogue = requirements()
    for item in items:
        ids = case_requirements(item)
        if not ids:
            raise pytest.UsageError(f"{item.nodeid} has no @pytest.mark.requirement(...)")
        unknown = [requirement_id for requirement_id in ids if requirement_id not in catalogue]
        if unknown:
            raise pytest.UsageError(f"{item.nodeid} names unknown requirements {unknown}")
    prefixes = config.getoption("--requirement")
    if prefixes:
        selected = [item for item in items
                    if any(i.startswith(p) for i in case_requirements(item) for p in prefixes)]
        config.hook.pytest_deselected(items=[item for item in items if item not in selected])
        items[:] = selected


# ---- the target ----------------------------------------------------------------------------------

@dataclass
class Target:
    profile: Profile
    tcp: tuple[str, int]
    http: tuple[str, int] | None
    time_scale: float
    restart: Callable[[], None] | None = None  # SIGTERM and start again on the same data path and ports
    https: tuple[str, int] | None = None
    tls_ca: str | None = None  # verify the target's certificate with this CA


@pytest.fixture(scope="session")
def nsq_target(pytestconfig):
    settings = pytestconfig.nsq_settings
    if settings.tcp:
        try:
            check_reachable(settings.tcp, "--target")
        except TargetError as exc:
            pytest.exit(str(exc), returncode=2)
        yield Target(settings.profile, settings.tcp, settings.http, settings.time_scale, https=settings.https,
                     tls_ca=settings.tls_ca)
        return
    with _embedded_broker(pytestconfig, "broker") as target:
        yield dataclasses.replace(target, restart=None)  # the restart cases restart brokers of their own


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
    try:
        yield Target(settings.profile, broker.tcp_address, broker.http_address, settings.time_scale, broker.restart,
                     https=broker.https_address, tls_ca=str(TLS_DIR / "ca.pem"))
    finally:
        broker.stop()


@dataclass
class LookupdTarget:
    tcp: tuple[str, int]
    http: tuple[str, int]
    time_scale: float


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
        yield LookupdTarget(settings.lookupd_tcp, settings.lookupd_http, settings.time_scale)
        return
    worker = getattr(pytestconfig, "workerinput", {}).get("workerid", "main")
    settings.reports_dir.mkdir(parents=True, exist_ok=True)
    lookupd = EmbeddedLookupd(settings.reports_dir / f"lookupd-{worker}.log")
    try:
        lookupd.start()
    except TargetError as exc:
        pytest.exit(str(exc), returncode=2)
    try:
        yield LookupdTarget(lookupd.tcp_address, lookupd.http_address, settings.time_scale)
    finally:
        lookupd.stop()


_sequence = iter(range(1, 1 << 30))


class Case:
    """What a case works with: connections, HTTP, unique names, scaled waits, the verifier."""

    def __init__(self, target: Target, name: str):
        self.target = target
        self.profile = target.profile
        self.limits = target.profile.limits
        self.time_scale = target.time_scale
        self.transcript = Transcript()
        self.verify = Verifier()
        self.http = HttpClient(target.http, self.transcript, target.time_scale)
        self._connections: list[Connection] = []
        self._topics: list[str] = []
        # Unique per process, case and run: the target may be shared and is never assumed fresh.
        self._prefix = f"cf{os.getpid() % 100000}-{next(_sequence)}-{int(time.time()) % 100000}-{name}"[:48]

    def connect(self, magic: bool = True, authenticate: bool = True) -> Connection:
        """A connection; after the magic it sends ``auth_command()`` unless ``authenticate`` is False."""
        name = chr(ord("A") + len(self._connections))
        connection = Connection(name, self.target.tcp, self.transcript, self.verify, self.time_scale,
                                send_magic=magic, tls_ca=self.target.tls_ca)
        self._connections.append(connection)
        if magic and authenticate and self.auth_command():
            connection.send(self.auth_command())
            self.expect_authenticated(connection)
        return connection

    def auth_command(self) -> bytes:
        """What a connection sends right after the magic: with a profile that has auth, an AUTH whose
        secret allows everything (conformance/authd.py), so that cases about other behaviour are not
        stopped by E_AUTH_FIRST (P-AUTH-09); without auth, nothing."""
        if not self.profile.capabilities.get("auth"):
            return b""
        return wire.encode_command("AUTH", body=ALLOW_ALL_SECRET.encode())

    def expect_authenticated(self, connection: Connection) -> None:
        """The answer to ``auth_command()``, if it sent anything (P-AUTH-08)."""
        if self.auth_command():
            connection.expect_json_response()

    def topic(self, suffix: str = "", length: int | None = None) -> str:
        """A fresh topic name for this case (padded to ``length`` characters including ``suffix``),
        deleted over HTTP, when available, afterwards."""
        name = f"{self._prefix}{len(self._topics)}"
        name = name + "a" * ((length or 0) - len(name) - len(suffix)) + suffix
        self._topics.append(name)
        return name

    def seconds(self, seconds: float) -> float:
        return seconds * self.time_scale

    def wait(self, seconds: float, why: str) -> None:
        self.transcript.note(f"wait {self.seconds(seconds):.2f} s: {why}")
        time.sleep(self.seconds(seconds))

    def until(self, condition, seconds: float, why: str) -> bool:
        """Poll `condition` until it holds or `seconds` (scaled) pass: broker state changes asynchronously
        (nsqd's topic pump fans out after the OK, deletions run in goroutines), so it is never read once."""
        self.transcript.note(f"until {why} (at most {self.seconds(seconds):.2f} s)")
        deadline = time.monotonic() + self.seconds(seconds)
        while time.monotonic() < deadline:
            if condition():
                return True
            time.sleep(0.02)
        return condition()

    def restart(self) -> None:
        """P-RST: the target goes down with SIGTERM and comes back on the same data path and ports. The case's
        connections went with it."""
        self.transcript.note("restart the target: SIGTERM, then start again on the same data path and ports")
        try:
            self.target.restart()
        except TargetError as exc:
            raise HarnessError(str(exc)) from exc
        for connection in self._connections:
            connection.close()

    def require(self, capability: str) -> None:
        if capability == "http" and self.target.http is None:
            raise Unsupported("the target has no HTTP API configured (--http-target)")
        if not self.profile.capabilities.get(capability, False):
            raise Unsupported(f"profile {self.profile.name} says the target does not offer {capability}")

    def fresh_channel(self, topic: str, *channels: str) -> None:
        """Create topic and channels over HTTP, then wait out nsqd's 5 s channel-list refresh (D-14)
        so that timeouts and deferrals on them are not late by up to 5 s."""
        self.require("http")
        self.verify.equal("POST /topic/create", 200, self.http.post(f"/topic/create?topic={quote(topic)}").status)
        for channel in channels:
            self.verify.equal("POST /channel/create", 200, self.http.post(
                f"/channel/create?topic={quote(topic)}&channel={quote(channel)}").status)
        self.wait(5.2, "nsqd scans a new channel only after its 5 s channel-list refresh (D-14)")

    def elapsed_since(self, start: float) -> float:
        """Seconds since ``start`` (a ``time.monotonic()``), divided by the time scale."""
        return (time.monotonic() - start) / self.time_scale

    def within(self, what: str, elapsed: float, low: float, high: float) -> None:
        """A timing check: strict lower bound, generous upper bound, both stated (unscaled seconds)."""
        self.verify.that(f"{what} (tolerance {low:g}..{high:g} s)", low <= elapsed <= high,
                         f"{low:g}..{high:g} s", f"{elapsed:.3f} s")

    def close(self) -> None:
        for connection in self._connections:
            connection.close()
        if self.target.http:
            for topic in self._topics:
                try:
                    self.http.post(f"/topic/delete?topic={quote(topic)}")
                except HarnessError:
                    pass


class LookupdCase:
    """What a lookupd case works with: V1 connections and the HTTP API of the nsqlookupd under test, unique
    topic names, bounded waits, the verifier; transcript and verdicts as an nsqd case's."""

    def __init__(self, target: LookupdTarget, name: str):
        self.target = target
        self.time_scale = target.time_scale
        self.transcript = Transcript()
        self.verify = Verifier()
        self.http = HttpClient(target.http, self.transcript, target.time_scale)
        self._connections: list[V1Connection] = []
        self._topics: list[str] = []
        self._prefix = f"lk{os.getpid() % 100000}-{next(_sequence)}-{int(time.time()) % 100000}-{name}"[:48]

    def connect(self, magic: bool = True) -> V1Connection:
        connection = V1Connection(f"L{len(self._connections)}", self.target.tcp, self.transcript, self.time_scale,
                                  send_magic=magic)
        self._connections.append(connection)
        return connection

    def topic(self) -> str:
        name = f"{self._prefix}{len(self._topics)}"
        self._topics.append(name)
        return name

    until = Case.until
    seconds = Case.seconds

    def close(self) -> None:
        for connection in self._connections:
            connection.close()
        for topic in self._topics:
            try:
                self.http.post(f"/topic/delete?topic={quote(topic)}")
            except (HarnessError, Mismatch):
                pass


@pytest.fixture
def lookupd(lookupd_target, request):
    name = re.sub(r"[^a-zA-Z0-9_-]", "", request.node.name.removeprefix("test_"))[:24]
    case = LookupdCase(lookupd_target, name)
    request.node.nsq_case = case
    yield case
    case.close()


@pytest.fixture(scope="session")
def restartable_target(pytestconfig):
    """What the restart cases run against: the target with --restart-command; when the suite runs the embedded
    broker, one of this worker's own (restarting the shared one would cut the other workers' cases off);
    otherwise none."""
    settings = pytestconfig.nsq_settings
    if not settings.profile.capabilities.get("restart"):
        yield None
        return
    if settings.restart_command:
        addresses = [address for address in (settings.tcp, settings.http) if address]
        yield Target(settings.profile, settings.tcp, settings.http, settings.time_scale,
                     lambda: restart_with_command(settings.restart_command, addresses))
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
    if restartable_target.http is None:
        raise Unsupported("the restart cases read /stats: the target has no HTTP API (--http-target)")
    name = re.sub(r"[^a-zA-Z0-9_-]", "", request.node.name.removeprefix("test_"))[:24]
    case = Case(restartable_target, name)
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
    if nsq_target.http is None:
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
        http.request("PUT", "/config/nsqlookupd_tcp_addresses", json.dumps(["%s:%d" % lookupd.address]).encode())
        lookupd.settle(5.0 * settings.time_scale)
        try:
            yield lookupd
        finally:
            http.request("PUT", "/config/nsqlookupd_tcp_addresses", before.body)
            lookupd.stop()


@pytest.fixture
def registration(nsq, fake_lookupd):
    """An nsqd case with the fake nsqlookupd the target registers with (section 10)."""
    if fake_lookupd is None:
        raise Unsupported("the target's registration cannot be observed: no HTTP API to PUT "
                          "/config/nsqlookupd_tcp_addresses, and no --lookupd-listen")
    nsq.lookupd = fake_lookupd
    return nsq


@pytest.fixture
def nsq(nsq_target, request):
    name = re.sub(r"[^a-zA-Z0-9_-]", "", request.node.name.removeprefix("test_"))[:24]
    case = Case(nsq_target, name)
    request.node.nsq_case = case
    yield case
    case.close()


# ---- verdicts ------------------------------------------------------------------------------------

def _verdict(item, call) -> tuple[str, str]:
    case: Case | None = getattr(item, "nsq_case", None)
    catalogue = requirements()
    levels = {catalogue[i].level for i in case_requirements(item)}
    strict = item.config.nsq_settings.strict
    if call.excinfo is None:
        if case and case.verify.soft_mismatches:
            message = "\n".join(str(mismatch) for mismatch in case.verify.soft_mismatches)
            return (FAIL if strict else NON_STRICT), message
        return PASS, ""
    error = call.excinfo.value
    if isinstance(error, (Unsupported, pytest.skip.Exception)):
        return UNSUPPORTED, str(error)
    if isinstance(error, AssertionError):
        # MAY marks an optional capability: absent -> UNSUPPORTED, present but wrong -> FAIL.
        if levels - {"SHOULD"} or strict:
            return FAIL, str(error)
        return NON_STRICT, str(error)
    if isinstance(error, (HarnessError, pytest.fail.Exception)):
        return ERROR, str(error)
    if isinstance(error, (KeyError, IndexError, TypeError)) and _raised_in_case(call.excinfo):
        # The case read a part of the broker's answer that is not there (a null where an object was due, a
        # missing frame field): the broker's doing, judged as the requirement says, not harness trouble.
        what = f"the broker's answer has what {Path(call.excinfo.traceback[-1].path).name} reads"
        return (FAIL if levels - {"SHOULD"} or strict else NON_STRICT), \
            f"{what}\n  expected: a value there\n  actual:   {type(error).__name__}: {error}"
    return ERROR, f"{type(error).__name__}: {error}"


def _raised_in_case(excinfo) -> bool:
    return Path(excinfo.traceback[-1].path).parent.name == "cases"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if call.when == "teardown" or (call.when == "setup" and call.excinfo is None):
        return report
    verdict, message = _verdict(item, call)
    case: Case | None = getattr(item, "nsq_case", None)
    ids = case_requirements(item)
    pcap = None
    settings = item.config.nsq_settings
    if case and verdict in (FAIL, ERROR) and case.transcript.endpoints:
        pcap = settings.reports_dir / "pcap" / (re.sub(r"[^A-Za-z0-9_.-]+", "_", item.nodeid) + ".pcap")
        case.transcript.write_pcap(pcap)
    report.nsq = {
        "verdict": verdict,
        "message": message,
        "requirements": ids,
        "doc": (item.function.__doc__ or "").strip() if hasattr(item, "function") else "",
        "transcript": case.transcript.as_dicts() if case else [],
        "pcap": str(pcap) if pcap else None,
        "baseline": in_baseline(item.nodeid, settings.baseline),
    }
    properties = [("verdict", verdict), ("requirements", " ".join(ids)),
                  ("levels", " ".join(requirements()[i].level for i in ids))]
    report.user_properties += properties
    item.user_properties += properties  # junitxml writes the teardown report's copy (JUnit <property>)
    if case:
        report.sections.append(("nsq transcript", case.transcript.render()))
    if verdict == UNSUPPORTED:
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"UNSUPPORTED: {message}")
    elif verdict == NON_STRICT:
        report.outcome = "passed"
        report.sections.append(("nsq non-strict", message))
    elif verdict == PASS:
        report.outcome = "passed"
    else:
        report.outcome = "failed"
        if call.excinfo and isinstance(call.excinfo.value, (Mismatch, HarnessError)):
            # The requirement, expected and actual say it all; the harness traceback would not help.
            in_case = [e for e in call.excinfo.traceback if Path(e.path).parent.name == "cases"]
            entry = in_case[-1] if in_case else None
            where = f"{item.nodeid}" + (f" (at {Path(entry.path).name}:{entry.lineno + 1})" if entry else "")
            report.longrepr = "\n".join([where, *(f"{i} [{requirements()[i].level}] {requirements()[i].text}"
                                                   for i in ids), message])
    return report


def pytest_report_teststatus(report, config):
    verdict = getattr(report, "nsq", {}).get("verdict")
    if verdict and report.when in ("setup", "call") and not (report.when == "setup" and verdict == PASS):
        return _TEST_STATUS[verdict]
    return None
