"""Every case's live transcript through the catalogue's monitors (nsq_protocol.monitors): a case also checks every
invariant the monitors know, not only its own assertion. The suite's times are when its client read a frame, not
when the frame arrived, so the judge runs without timing: the rules about order and content judge, the rules
about time say "not judged". A lookupd case's transcript goes through nsqlookupd's monitors (``judge_lookupd``), a
registration case's fake nsqlookupd's log through nsqd's rules of registering (``judge_registration``)."""

from __future__ import annotations

import heapq
import json

from conformance.lookupd_fake import FakeLookupd
from conformance.transcript import CLIENT_TO_SERVER, NOTE, SERVER_TO_CLIENT, Transcript
from conformance.versions import DEFAULT, NsqVersion
from nsq_protocol import monitors, wire_v1
from nsq_protocol.http import HttpExchange
from nsq_protocol.monitors.events import MAGIC, SHORT_MAGIC, UNREADABLE
from nsq_protocol.monitors.lookupd_announces import NsqdAnnounces
from nsq_protocol.monitors.lookupd_nsqd import NsqdRegisters
from nsq_protocol.monitors.nsqd_names import RESTARTED, NameChange, NamesChanged

_SERVER_CLOSED = ("server closed the connection", "connection reset")
_KILLED = "kill the target"  # case.py's note of a SIGKILL
_RESTARTS = (_KILLED, "restart the target")  # case.py's notes of a restart (SIGKILL or SIGTERM)
_CLIENT_CLOSES = "client closes"  # the note of a test connection's close (lookupd_client.V1Connection.close)
# the fake lookupd's IDENTIFY answer as the monitors read it: any JSON (lookupd_fake.py's names a port of its own)
_FAKE_ANSWER = json.dumps({"broadcast_address": "127.0.0.1", "hostname": "conformance-lookupd", "http_port": 1,
                           "tcp_port": 1, "version": "1.3.0"}).encode()
# the HTTP monitors hold nsqd's answers since 1.2.0 (run against v1.2.1 and v1.3.0); an older nsqd's /stats and
# content types differ in ways the catalogue does not yet split by release: its HTTP exchanges are not fed
HTTP_JUDGED_SINCE = NsqVersion.parse("1.2.0")


def judge(transcript: Transcript, version: NsqVersion = NsqVersion.parse(DEFAULT),
          readers: tuple[monitors.Monitor, ...] = (), tls_policy: monitors.TlsPolicy | None = None,
          own_names: str = "") -> monitors.Judge:
    """The monitors' judge over one case's V2 connections and its exchanges with nsqd's HTTP API (conformance.client's
    ``monitored`` HttpClient) where the release it follows (``version``) is one the HTTP monitors hold; ``http_seen``
    False: other cases' requests reach the broker too. But the topics named ``own_names...`` (Case.topic) are the
    case's own, their whole life in the transcript (the judge's ``fresh``), unless the target restarted (from its
    disk it gets them back as they were) or its HTTP exchanges are not fed. The caller says which cases' names are
    whole: not where the target asks an nsqlookupd for a new topic's channels, nor where a profile's command makes
    the topics. ``readers``, ``tls_policy`` (the profile's TLS flags): see monitors.new_judge."""
    whole = own_names and version >= HTTP_JUDGED_SINCE and not any(
        event.direction == NOTE and event.lines[0].startswith(_RESTARTS) for event in transcript.events)
    judge = monitors.new_judge(timing=False, http_seen=False, wording=False,  # the cases judge nsqd's wording
                               readers=readers, release=version.key, tls_policy=tls_policy,
                               fresh=(lambda topic: topic.startswith(own_names)) if whole else None)
    for event in transcript.events:
        name, at = event.connection, transcript.wall_time(event)
        if event.direction == NOTE:
            if name in judge.connections and event.lines[0].startswith(_SERVER_CLOSED):
                judge.close(name, at, monitors.BROKER)
            elif event.lines[0].startswith(_KILLED):
                judge.crash(at)
            continue
        if event.observed and isinstance(event.observed[0], HttpExchange):
            if version >= HTTP_JUDGED_SINCE:
                judge.http_exchange(event.observed[0])
            continue
        if event.direction not in (CLIENT_TO_SERVER, SERVER_TO_CLIENT) or not event.observed and \
                name not in judge.connections:
            continue
        if name not in judge.connections:
            # a connection the suite opened with the V2 magic, or another (C-02): its defaults are known from its
            # start
            endpoint = transcript.endpoints.get(name)
            judge.open(name, at, started=event.direction == CLIENT_TO_SERVER and (event.lines[0].startswith(
                "MAGIC b'  V2'") or bad_magic(event.observed)),
                server=endpoint and address(endpoint.server), client=endpoint and address(endpoint.client))
        for observed in event.observed:
            judge.observe(name, observed)
    end = transcript.wall_started + transcript.now()
    for name, connection in judge.connections.items():
        if connection.open:
            judge.close(name, end, None)  # the client stopped reading: whether the broker closed is not known
    judge.finish(end)
    if judge.failures:  # the toolkit's own bug, on traffic of its own making: loud, never a quiet "not judged"
        raise MonitorFailed("; ".join(judge.failures))
    return judge


def judge_lookupd(transcript: Transcript, own_names: str = "", limits: dict | None = None) -> monitors.LookupdJudge:
    """nsqlookupd's monitors (LOOKUPD_MONITORS) over one lookupd case's V1 connections and its exchanges with
    lookupd's HTTP API (LookupdCase's ``monitored`` HttpClient: not those with another nsqlookupd). The lookupd
    serves other cases too: only the topics named ``own_names...`` (the case's own, LookupdCase.topic) have all
    their registrations in the transcript. ``limits``: the lookupd profile's timeouts."""
    limits = limits or {}
    judge = monitors.new_lookupd_judge(
        http_seen=True, wording=False,  # the cases judge lookupd's wording
        fresh=(lambda topic: topic.startswith(own_names)) if own_names else None,
        inactive_producer_timeout_s=limits.get("inactive_producer_timeout_ms", 300_000) / 1000,
        tombstone_lifetime_s=limits.get("tombstone_lifetime_ms", 45_000) / 1000)
    for event in transcript.events:
        name, at = event.connection, transcript.wall_time(event)
        if event.observed and isinstance(event.observed[0], HttpExchange):
            judge.http(event.observed[0])
            continue
        if name not in transcript.endpoints:
            continue
        if name not in judge.connections:  # the suite's own connection: its first bytes are in the transcript
            judge.open(name, at, started=True, client_address="%s:%d" % transcript.endpoints[name].client)
        if event.direction == CLIENT_TO_SERVER:
            judge.client_bytes(name, at, event.wire)
        elif event.direction == SERVER_TO_CLIENT:
            judge.server_bytes(name, at, event.wire)
        elif judge.connections[name].open and event.lines[0].startswith((*_SERVER_CLOSED, _CLIENT_CLOSES)):
            judge.close(name, at, monitors.CLIENT if event.lines[0] == _CLIENT_CLOSES else monitors.BROKER)
    end = transcript.wall_started + transcript.now()
    for name, connection in judge.connections.items():
        if connection.open:
            judge.close(name, end, None)
    judge.finish(end)
    if judge.failures:
        raise MonitorFailed("; ".join(judge.failures))
    return judge


def judge_registration(transcript: Transcript, lookupd: FakeLookupd, nsqd: str, own_names: str,
                       version: NsqVersion = NsqVersion.parse(DEFAULT)) -> tuple[monitors.Judge, monitors.LookupdJudge]:
    """A registration case (the ``registration`` fixture): nsqd's monitors over its transcript, as ``judge``, and
    nsqd's rules of registering (NsqdRegisters, NsqdAnnounces) over what the case's fake nsqlookupd logged, told
    the changes of the case's own topics (``own_names...``) the transcript shows, and the target's restarts. ``nsqd``:
    "host:port" of the target's TCP side. The fake logged each command on arrival, on the transcript's clock
    (time.monotonic)."""
    changes: list[NameChange] = []
    names = NamesChanged(changes.append, lambda judge, topic: topic.startswith(own_names))
    nsqd_judge = judge(transcript, version, (names,))
    changes.extend(NameChange(transcript.wall_time(event), transcript.wall_time(event), RESTARTED, "")
                   for event in transcript.events if event.direction == NOTE and event.lines[0].startswith(_RESTARTS))
    changes.sort(key=lambda change: change.ts)
    registering = monitors.LookupdJudge([NsqdRegisters(), NsqdAnnounces()], http_seen=False, nsqd_clients=True)
    logged = [(transcript.wall_started + event.at - transcript.started, event) for event in lookupd.since(0)]
    end = transcript.wall_started + transcript.now()
    for at, what in heapq.merge(((change.ts, change) for change in changes), logged, key=lambda pair: pair[0]):
        end = max(end, at)
        if isinstance(what, NameChange):
            registering.nsqd_changed(nsqd, what)
        else:
            _fake_logged(registering, at, what)
    registering.finish(end)
    if registering.failures:
        raise MonitorFailed("; ".join(registering.failures))
    return nsqd_judge, registering


def _fake_logged(judge: monitors.LookupdJudge, at: float, event) -> None:
    """One line of the fake lookupd's log (lookupd_fake.Event) as the bytes that crossed the wire, answered as the
    fake answers: its JSON to IDENTIFY, OK to the rest."""
    name = f"fake-lookupd-{event.connection}"
    if name not in judge.connections:
        judge.open(name, at, started=event.line == "MAGIC")
    if event.line == "MAGIC":
        judge.client_bytes(name, at, wire_v1.MAGIC_V1)
    elif event.line == "CLOSED":
        judge.close(name, at, None)
    elif event.line == "IDENTIFY":
        judge.client_bytes(name, at, wire_v1.encode_command("IDENTIFY", body=json.dumps(event.body).encode()))
        judge.server_bytes(name, at, wire_v1.encode_reply(_FAKE_ANSWER))
    else:
        judge.client_bytes(name, at, event.line.encode() + b"\n")
        judge.server_bytes(name, at, wire_v1.encode_reply(b"OK"))


def address(host_port: tuple[str, int]) -> str:
    """A socket's address as Go's net.Addr names it (nsqd's /stats remote_address): [v6]:port."""
    host, port = host_port[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def bad_magic(observed: tuple) -> bool:
    """The client's magic was not '  V2': another (C-02), or one its end cut short (C-03)."""
    return bool(observed) and observed[0].kind == UNREADABLE and observed[0].name in (MAGIC, SHORT_MAGIC)


class MonitorFailed(RuntimeError):
    """A monitor raised on a case's transcript."""
