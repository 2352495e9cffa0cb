"""Every client case's traffic through the catalogue's monitors (nsq_protocol.monitors, with CLIENT_MONITORS): the
transcript the fake nsqds recorded, both directions of every connection, timed when the fake nsqd read or wrote the
bytes (loopback: the wire's times), judged as a capture of one client's traffic, with what its application asked of
the library (conformance/clients/application.py: what the drivers were told, the handler's orders in the bodies
sent) and none of the case's own checks. The case's fake nsqds are judged together (one client's connections to
them, so a backoff or a reconnect is followed across them), with the client's queries of its fake nsqlookupds
(fake_nsqlookupd.py notes each one), and each connection's nsqd as the client dialed it (``dialed``: what /lookup
lists where a selftest proxy stands in front of an nsqd).

A client-side violation is the library's: graded at its item's level into the case's verdict (``judge.graded``),
unless the case provokes it on purpose (``@pytest.mark.monitors_expect(ID, ...)``). A broker-side one means the fake
nsqd broke a rule of nsqd's: the harness's bug, an ERROR. The fake nsqd departs from nsqd where a case needs it to
(``FAKE_NSQD_DEPARTS``); those items are not judged of it."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from conformance.clients.fake_nsqd import CLOSED_BY_BROKER, CLOSED_BY_CLIENT, REFUSED, RESET_BY_CLIENT
from conformance.clients.fake_nsqlookupd import QUERY_RESET
from conformance.transcript import CLIENT_TO_SERVER, NOTE, Transcript
from nsq_protocol import monitors
from nsq_protocol.http import HttpExchange
from nsq_protocol.monitors.events import CLIENT
from nsq_protocol.wire import MAGIC_V2

# the fatal error of NSQC-ERR-004, NSQC-ERR-005 and NSQC-ERR-006 comes when the case says so: after whatever the
# client sent last, which for a subscribed consumer is a command nsqd never answers (RDY, NOP)
_STIMULUS = "its fatal error comes when a case says so (NSQC-ERR-004, -005, -006), after a command left unanswered"
FAKE_NSQD_DEPARTS = {"C-28": "it sends a heartbeat when a case says so, not on a ticker",
                     "ID-20": "its answer turns on a layer not asked for where a case says so (NSQC-NEG-002)",
                     "P-RDY-01": _STIMULUS, "P-RDY-07": _STIMULUS, "P-NOP-01": _STIMULUS,
                     "C-24": "its E_FIN_FAILED, E_REQ_FAILED, E_TOUCH_FAILED (NSQC-ERR-001, -002, -003) answer "
                             "whatever FIN, REQ or TOUCH the client sent, a malformed one too"}
_CLOSES = {CLOSED_BY_CLIENT: monitors.CLIENT, RESET_BY_CLIENT: monitors.CLIENT, CLOSED_BY_BROKER: monitors.BROKER}


@dataclass(frozen=True)
class Findings:
    client: list  # Violation: the library's
    declared: list  # Violation: the library's, provoked by the case on purpose
    broker: list  # Violation: the fake nsqd's
    # "<monitor>: <exception>" of the monitors that raised on the traffic: the toolkit's bug
    failures: list[str] = field(default_factory=list)

    def as_dicts(self) -> list[dict]:
        return ([{**violation.as_dict(), "declared": False} for violation in self.client + self.broker]
                + [{**violation.as_dict(), "declared": True} for violation in self.declared])


def judge(transcript: Transcript, application: monitors.Application | None = None,
          dialed: Mapping[str, str] | None = None) -> monitors.Judge:
    """The monitors' judge over the case's connections to its fake nsqds and its queries of its fake nsqlookupds, up
    to now. Connections still open stay open: the traffic ends there. ``dialed``: an nsqd's own host:port -> the one
    the client was given for it, where they differ."""
    # the cases' scripted errors are stimuli, not nsqd's words: the fake nsqd's codes and states are judged, not its
    # wording (C-08)
    judge = monitors.new_judge(timing=True, http_seen=False, wording=False, client_library=True,
                               application=application)
    started = {event.connection for event in transcript.events if event.direction == CLIENT_TO_SERVER
               and event.lines[0] == f"MAGIC {MAGIC_V2!r}"}
    for event in transcript.events:
        name, at = event.connection, transcript.wall_time(event)
        if event.direction == NOTE and (event.lines[0] == QUERY_RESET or event.observed):
            _lookupd_query(judge, transcript, name, at, event)
        if name not in transcript.endpoints:  # the driver's reports, the lookupds', the selftest proxy's notes
            continue
        if name not in judge.connections:
            server = "%s:%d" % transcript.endpoints[name].server
            judge.open(name, at, started=name in started, server=(dialed or {}).get(server, server))
        for observed in event.observed:
            judge.observe(name, observed)
        if event.direction == NOTE:
            closed_by = _CLOSES.get(event.lines[0], monitors.BROKER if event.lines[0].endswith(REFUSED) else None)
            if closed_by is not None:
                judge.close(name, at, closed_by)
    judge.finish(transcript.wall_started + transcript.now())
    return judge


def _lookupd_query(judge: monitors.Judge, transcript: Transcript, lookupd: str, at: float, event) -> None:
    if event.lines[0] == QUERY_RESET:
        judge.lookupd_query(lookupd, at, None)
        return
    for exchange in event.observed:
        if isinstance(exchange, HttpExchange):  # transcript times, as the judge's clock
            judge.lookupd_query(lookupd, at, replace(exchange, ts=transcript.wall_started + exchange.ts,
                                                     answered=transcript.wall_started + exchange.answered))


def findings(transcript: Transcript, declared: set[str], application: monitors.Application | None = None,
             dialed: Mapping[str, str] | None = None) -> Findings:
    judged = judge(transcript, application, dialed)
    departs = [v for v in judged.violations if v.side != CLIENT and v.item not in FAKE_NSQD_DEPARTS]
    client = [v for v in judged.violations if v.side == CLIENT]
    return Findings([v for v in client if v.item not in declared], [v for v in client if v.item in declared],
                    departs, judged.failures)
