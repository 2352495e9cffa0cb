"""TLS required on TCP (--tls-required, or a client certificate policy, which implies it): the broker's flag, which
the traffic does not carry, but its first refusal shows it for every connection after it (T-07, T-08)."""

from __future__ import annotations

from nsq_protocol.monitors.events import BROKER, COMMAND, ERROR, RESPONSE
from nsq_protocol.monitors.monitor import Monitor

TLS_REQUIRED = "(TLS required)"  # the end of nsqd's refusal: 'cannot <VERB> in current state (TLS required)'


def tls_refusal(event) -> bool:
    return event.kind == ERROR and event.name == "E_INVALID" and event.text.endswith(TLS_REQUIRED)


class TlsRequired(Monitor):
    """T-07: once the broker showed that TCP requires TLS, the first command but IDENTIFY of a connection that did
    not upgrade gets the fatal TLS-required error; T-08: IDENTIFY is still answered, and after one that did not ask
    for TLS the next command is refused. Judged from the connection's start; a crash may bring other flags back."""

    ITEMS = ("T-07", "T-08")
    KINDS = frozenset({COMMAND, RESPONSE, ERROR})

    def __init__(self):
        super().__init__()
        self._required_since: float | None = None  # the first refusal's time, on this run of the broker
        self._first: dict[str, object] = {}  # connection -> its first command but IDENTIFY, awaiting the refusal
        self._seen: set[str] = set()  # connections whose first command but IDENTIFY is past

    def observe(self, judge, connection, event, answered):
        name = connection.name
        if judge.crashed_at is not None and self._required_since is not None and \
                self._required_since < judge.crashed_at:
            self._required_since = None
        if tls_refusal(event) and self._required_since is None:
            self._required_since = event.ts
        if event.kind == COMMAND:
            if event.name != "IDENTIFY" and name not in self._seen:
                self._seen.add(name)
                if self._required_since is None:
                    self.skip("T-07", "no TLS-required refusal in the traffic before it (the broker's flag)")
                elif connection.started and not _upgraded(connection):
                    self._first[name] = event
            return
        if event.kind == RESPONSE and connection.upgrade_ok_taken(event):
            return
        if answered is not None and answered.name == "IDENTIFY" and tls_refusal(event) and \
                self._required_since is not None and self._required_since < event.ts:
            self.report("T-08", BROKER, event.ts, name, "IDENTIFY answered before the upgrade",
                        f"{event.name} {event.text[:80]}", answered, event)
            return
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
