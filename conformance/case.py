"""What a case works with (the ``nsq``, ``restartable``, ``registration`` and ``lookupd`` fixtures): the target's
addresses, connections that record a transcript, HTTP, unique names, scaled waits and the verifier."""

from __future__ import annotations

import json
import os
import re
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from conformance.authd import ALLOW_ALL_SECRET
from conformance.client import (
    HarnessError,
    HttpClient,
    Mismatch,
    TlsClient,
    Unsupported,
    Verifier,
    quote,
    setup_step,
)
from conformance.connection import Connection
from conformance.liveness import TargetHealth
from conformance.lookupd_client import V1Connection
from conformance.spec import behaviours, not_in_version
from conformance.target import Profile, TargetError, run_setup_command
from conformance.transcript import Transcript
from conformance.versions import DEFAULT, NsqVersion
from nsq_protocol import wire


@dataclass
class Target:
    profile: Profile
    tcp: tuple[str, int]
    http: tuple[str, int] | None
    time_scale: float
    restart: Callable[[], None] | None = None  # SIGTERM and start again on the same data path and ports
    https: tuple[str, int] | None = None
    tls: TlsClient = TlsClient()  # how the suite upgrades to TLS with it: --tls-ca, --tls-client-cert
    health: TargetHealth | None = None  # is it still there after a case that saw it close or fail
    # the crash cases' (conformance/crash.py): SIGKILL and start again; where its files are; the fake
    # nsqlookupd it registers with from its start, across restarts
    kill: Callable[[], None] | None = None
    data_path: Path | None = None
    lookupd: object | None = None
    authd: str | None = None  # HOST:PORT of the suite's fake auth server (profiles with `auth`)

    def requires_tls(self, on: str) -> bool:
        """Whether the profile says the target refuses plain ``on`` ("tcp" or "http"): nsqd's --tls-required
        (T-07, T-10, T-11), which a client auth policy turns on for both (T-12)."""
        required = self.profile.capabilities.get("tls_required", False)
        return required == "true" or (required == "tcp-https" and on == "tcp")


@dataclass
class LookupdTarget:
    tcp: tuple[str, int]
    http: tuple[str, int]
    time_scale: float
    limits: dict = field(default_factory=dict)  # the lookupd profile's: its timeouts (--lookupd-profile)
    health: TargetHealth | None = None


_sequence = iter(range(1, 1 << 30))
# The start of every topic name a case makes (``cf`` for nsqd cases, ``lk`` for nsqlookupd's), unique per process,
# case and run: the target may be shared and is never assumed fresh. --compare masks it (compare.py).
NAME_PREFIX = re.compile(r"(?:cf|lk)\d+-\d+-\d+-")


def _name_prefix(kind: str, name: str) -> str:
    # fixed width, so that the same case gives names of the same length, and the same byte counts, in every run
    return f"{kind}{os.getpid() % 100000:05d}-{next(_sequence):06d}-{int(time.time()) % 100000:05d}-{name}"[:48]


class FollowsRelease:
    """A case judges the target as a release (--nsq-version) and keeps which of the catalogue's items it asked the
    release about: a case that fails is run again as the releases that expect otherwise of them
    (conformance/versions.py)."""
    version = NsqVersion.parse(DEFAULT)  # the release the target follows (--nsq-version): the fixtures set it

    def __init__(self):
        self.asked: set[str] = set()

    def has(self, item: str) -> bool:
        """Whether the release the target follows has behaviour ``item``: a case whose expectation differs by
        release checks the one of its version."""
        self.asked.add(item)
        return behaviours()[item].releases.has(self.version)

    def require_behaviour(self, item: str) -> None:
        """UNSUPPORTED unless the release the target follows has ``item`` ("not in nsqd v1.3.0: ...")."""
        self.asked.add(item)
        why = not_in_version([item], self.version)
        if why:
            raise Unsupported(why)


class Case(FollowsRelease):
    """What a case works with: connections, HTTP, unique names, scaled waits, the verifier. ``sections`` are the
    requirement sections the case checks: a PUB, SUB, IDENTIFY, AUTH or topic creation of any other section is a
    setup step, whose failure is the case's PRECONDITION (None: every step is checked)."""

    def __init__(self, target: Target, name: str, sections: frozenset[str] | None = None):
        super().__init__()
        self.target = target
        self.profile = target.profile
        self.limits = target.profile.limits
        self.time_scale = target.time_scale
        self.sections = sections
        self.transcript = Transcript()
        self.verify = Verifier()
        unsupported_paths = {} if self.profile.offers("topic_create_http") else {
            "/topic/create": f"profile {self.profile.name} says the target has no POST /topic/create"}
        if target.requires_tls("http"):  # plain HTTP is answered 403 TLS_REQUIRED (T-10): the cases use HTTPS
            self.http = HttpClient(target.https, self.transcript, target.time_scale, tls=target.tls, absent=(
                f"profile {self.profile.name}: the target requires HTTPS (T-10), and there is no --https-target"),
                unsupported_paths=unsupported_paths, monitored=True)
        else:
            self.http = HttpClient(target.http, self.transcript, target.time_scale,
                                   unsupported_paths=unsupported_paths, monitored=True)
        self._connections: list[Connection | None] = []  # None: being opened
        self._naming = threading.Lock()
        self._topics: list[str] = []
        self.name_prefix = _name_prefix("cf", name)

    def connect(self, magic: bool = True, authenticate: bool = True, tls: TlsClient | None = None) -> Connection:
        """A connection; after the magic it sends ``auth_command()`` unless ``authenticate`` is False (to a target
        that requires TLS on TCP, once the case's IDENTIFY has upgraded the connection). With
        ``tls`` the case upgrades it (IDENTIFY tls_v1) as that says, or checks what happens before it does;
        without, it speaks plain TCP, which a target that requires TLS refuses: the case is UNSUPPORTED there."""
        if tls is None and self.target.requires_tls("tcp"):
            raise Unsupported(f"profile {self.profile.name}: the target requires TLS on TCP (T-07), and this case "
                              "speaks plain TCP")
        with self._naming:  # cases open connections from several threads (the concurrent workloads)
            index = len(self._connections)
            self._connections.append(None)
        connection = Connection(_connection_label(index), self.target.tcp, self.transcript, self.verify,
                                self.time_scale, send_magic=magic, tls=tls or self.target.tls,
                                sections_under_test=self.sections, unsupported_commands=self._unsupported_commands(),
                                lowest_deflate_level=lambda: 1 if self.has("ID-11") else 0)
        self._connections[index] = connection
        if magic and authenticate and self.auth_command():
            if self.target.requires_tls("tcp"):
                connection.auth_after_tls = self.auth_command()
                return connection
            with setup_step("AUTH", self.sections):
                connection.send(self.auth_command())
                self.expect_authenticated(connection)
        return connection

    def _unsupported_commands(self) -> dict[str, str]:
        """Verbs the profile says the target lacks: a case that sends one is UNSUPPORTED, saying so."""
        return {} if self.profile.offers("dpub") else {
            "DPUB": f"profile {self.profile.name} says the target has no DPUB (capability dpub = false)"}

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

    def auth_queries(self, secret: str) -> list[dict[str, str]]:
        """The query parameters of each GET /auth the target sent the suite's fake auth server with ``secret``."""
        url = f"http://{self.target.authd}/queries?secret={quote(secret)}"
        with urllib.request.urlopen(url, timeout=self.seconds(5)) as response:
            queries = json.loads(response.read())
        self.transcript.note(f"the fake auth server's queries with secret {secret}: {queries}")
        return queries

    def topic(self, suffix: str = "", length: int | None = None, create: bool = True) -> str:
        """A fresh topic name for this case (padded to ``length`` characters including ``suffix``), deleted
        afterwards (``delete_topic``). Unless ``create`` is False (a name that must not exist yet, or an invalid
        one), it is prepared for use (``prepare_topic``)."""
        name = f"{self.name_prefix}{len(self._topics)}"
        name = name + "a" * ((length or 0) - len(name) - len(suffix)) + suffix
        self._topics.append(name)
        if create:
            self.prepare_topic(name)
        return name

    def prepare_topic(self, name: str) -> None:
        """A target that does not create topics on first use (capability topic_autocreate = false) gets ``name``
        created as the profile's ``[setup] create_topic`` says: a shell command with ``{topic}``, or POST
        /topic/create. Others create it themselves when a case first uses it."""
        if self.profile.offers("topic_autocreate"):
            return
        command = self.profile.setup.get("create_topic")
        with setup_step("create topic", self.sections):
            if command:
                self.transcript.note(f"setup: create topic {name} with the profile's command")
                try:
                    run_setup_command(command, topic=name, timeout=self.seconds(10))
                except TargetError as exc:
                    raise Mismatch(f"the profile's create_topic command creates {name}", "exit status 0",
                                   str(exc), "the profile's create_topic command fails") from exc
            else:
                self.verify.equal(f"POST /topic/create?topic={name}", 200,
                                  self.http.post(f"/topic/create?topic={quote(name)}").status)

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

    def kill(self) -> None:
        """P-RST-10: the target dies with SIGKILL and comes back on the same data path and ports."""
        self.transcript.note("kill the target: SIGKILL, then start again on the same data path and ports")
        try:
            self.target.kill()
        except TargetError as exc:
            raise HarnessError(str(exc)) from exc
        for connection in self._connections:
            connection.close()

    def require(self, capability: str, value: str | None = None) -> None:
        """UNSUPPORTED unless the profile offers ``capability`` (with this ``value``, when given)."""
        if capability == "http" and self.http.address is None:
            raise Unsupported(self.http.absent)
        offered = self.profile.offers(capability)
        if not offered:
            raise Unsupported(f"profile {self.profile.name} says the target does not offer {capability}")
        if value is not None and offered != value:
            raise Unsupported(f"profile {self.profile.name} has {capability} = {offered!r}; the case needs {value!r}")

    def fresh_channel(self, topic: str, *channels: str) -> None:
        """Create topic and channels over HTTP, then wait out nsqd's 5 s channel-list refresh (D-14)
        so that timeouts and deferrals on them are not late by up to 5 s."""
        self.create_over_http(topic, *channels)
        self.wait(5.2, "nsqd scans a new channel only after its 5 s channel-list refresh (D-14)")

    def create_over_http(self, topic: str, *channels: str) -> None:
        """The topic (unless ``prepare_topic`` made it: a target without auto-creation) and its channels, created
        over HTTP as a setup step."""
        self.require("http")
        with setup_step("create topic", self.sections):
            if self.profile.offers("topic_autocreate"):
                self.verify.equal("POST /topic/create", 200,
                                  self.http.post(f"/topic/create?topic={quote(topic)}").status)
            for channel in channels:
                self.verify.equal("POST /channel/create", 200, self.http.post(
                    f"/channel/create?topic={quote(topic)}&channel={quote(channel)}").status)

    def elapsed_since(self, start: float) -> float:
        """Seconds since ``start`` (a ``time.monotonic()``), divided by the time scale."""
        return (time.monotonic() - start) / self.time_scale

    def within(self, what: str, elapsed: float, low: float, high: float, judges: str = "") -> None:
        """A timing check: strict lower bound, generous upper bound, both stated (unscaled seconds)."""
        self.verify.that(f"{what} (tolerance {low:g}..{high:g} s)", low <= elapsed <= high,
                         f"{low:g}..{high:g} s", seconds_against(elapsed, low, high), judges)

    def delete_topic(self, name: str) -> None:
        """The case's topic deleted as the profile's ``[setup] delete_topic`` says: a shell command with
        ``{topic}``, or POST /topic/delete where the target has HTTP. A broker without either keeps its topics."""
        command = self.profile.setup.get("delete_topic")
        try:
            if command:
                self.transcript.note(f"clean-up: delete topic {name} with the profile's command")
                run_setup_command(command, topic=name, timeout=self.seconds(10))
            elif self.http.address:
                self.http.post(f"/topic/delete?topic={quote(name)}")
        except (HarnessError, Mismatch, TargetError):
            pass  # cleaning up is best effort: the case's verdict is made

    def close(self) -> None:
        for connection in self._connections:
            if connection is not None:
                connection.close()
        for topic in self._topics:
            self.delete_topic(topic)


def _connection_label(index: int) -> str:
    """A, B, ... Z, then A1, B1, ...: one name per connection of a case."""
    return chr(ord("A") + index % 26) + (str(index // 26) if index >= 26 else "")


def seconds_against(elapsed: float, low: float, high: float) -> str:
    """``elapsed`` as a timing failure shows it: never rounded into the range it missed (3.0004 s against 1.8..3 s
    is "3.0004 s, 0.4 ms above 3 s", not "3.000 s")."""
    if elapsed > high:
        return f"{elapsed:.4f} s, {(elapsed - high) * 1000:.1f} ms above {high:g} s"
    if elapsed < low:
        return f"{elapsed:.4f} s, {(low - elapsed) * 1000:.1f} ms below {low:g} s"
    return f"{elapsed:.3f} s"


class LookupdCase(FollowsRelease):
    """What a lookupd case works with: V1 connections and the HTTP API of the nsqlookupd under test, unique
    topic names, bounded waits, the verifier; transcript and verdicts as an nsqd case's."""

    def __init__(self, target: LookupdTarget, name: str):
        super().__init__()
        self.target = target
        self.time_scale = target.time_scale
        self.transcript = Transcript()
        self.verify = Verifier()
        self.http = HttpClient(target.http, self.transcript, target.time_scale, monitored=True)
        self._connections: list[V1Connection] = []
        self._topics: list[str] = []
        self.name_prefix = _name_prefix("lk", name)

    def connect(self, magic: bool = True) -> V1Connection:
        connection = V1Connection(f"L{len(self._connections)}", self.target.tcp, self.transcript, self.time_scale,
                                  send_magic=magic)
        self._connections.append(connection)
        return connection

    def topic(self) -> str:
        name = f"{self.name_prefix}{len(self._topics)}"
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
