"""TLS required on TCP (--tls-required, or a client certificate policy, which implies it): the broker's flag, which
the traffic does not carry, but a refusal shows it for every connection open then (T-07, T-08)."""

from __future__ import annotations

from nsq_protocol.monitors.events import BROKER, COMMAND, ERROR, FINS, RESPONSE
from nsq_protocol.monitors.monitor import Monitor

TLS_REQUIRED = "(TLS required)"  # the end of nsqd's refusal: 'cannot <VERB> in current state (TLS required)'


def tls_refusal(event) -> bool:
    return event.kind == ERROR and event.name == "E_INVALID" and event.text.endswith(TLS_REQUIRED)


class TlsRequired(Monitor):
    """T-07: where the broker showed that TCP requires TLS (a refusal), the first command but IDENTIFY of a plain
    connection that lived through that refusal gets the fatal TLS-required error too (a restart, with other flags
    perhaps, would have ended it); T-08: IDENTIFY is never refused so, and after one that did not ask for TLS the
    next command is. Judged from the connection's start; where the judge is told the flag (judge.tls_policy), from
    the first connection on."""

    ITEMS = ("T-07", "T-08")
    KINDS = frozenset({COMMAND, RESPONSE, ERROR})
    RUNS = frozenset({FINS})

    def __init__(self):
        super().__init__()
        self._refused_at: float | None = None  # the latest TLS-required refusal
        self._first: dict[str, object] = {}  # connection -> its first command but IDENTIFY, awaiting the refusal
        self._seen: set[str] = set()  # connections whose first command but IDENTIFY is past

    def observe_run(self, judge, connection, run):
        if connection.name not in self._seen:  # the first FIN may be the first command but IDENTIFY (T-07)
            self.observe(judge, connection, next(run.events()), None)

    def observe(self, judge, connection, event, answered):
        name = connection.name
        if event.kind == COMMAND:
            if event.name != "IDENTIFY" and name not in self._seen:
                self._seen.add(name)
                told = judge.tls_policy is not None and judge.tls_policy.plain_tcp_refused
                if not told and (self._refused_at is None or not connection.lived_through(self._refused_at)):
                    self.skip("T-07", "no TLS-required refusal (the broker's flag) while the connection was open")
                elif connection.started and not _upgraded(connection):
                    self._first[name] = event
            return
        if event.kind == RESPONSE and connection.upgrade_ok_taken(event):
            return
        if tls_refusal(event):
            self._refused_at = event.ts
            if answered is not None and answered.name == "IDENTIFY":  # nsqd takes IDENTIFY before the TLS policy
                self.report("T-08", BROKER, event.ts, name, "IDENTIFY answered before the upgrade",
                            f"{event.name} {event.text[:80]}", answered, event)
        command = self._first.pop(name, None)
        if command is None or tls_refusal(event):
            return
        self.report("T-08" if connection.identify is not None else "T-07", BROKER, event.ts, name,
                    f"E_INVALID cannot {command.name} in current state {TLS_REQUIRED}",
                    f"{event.name[:40]} {event.text[:60]}".strip(), command, event)

    def closed(self, judge, connection):
        self._first.pop(connection.name, None)
        self._seen.discard(connection.name)


def _upgraded(connection) -> bool:
    return bool(connection.identify_answer and connection.identify_answer.get("tls_v1") is True)
