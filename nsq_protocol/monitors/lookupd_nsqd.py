"""What nsqd sends the nsqlookupds it registers with (conformance/spec/registration.toml, R-*), judged on the V1
connections where the judge is told their clients are nsqds (``LookupdJudge.nsqd_clients``: a capture of a
cluster, not a suite's test clients, which send what they please)."""

from __future__ import annotations

import json

from nsq_protocol.monitors.events import BROKER, COMMAND, ERROR, RESPONSE, UNREADABLE, Observed
from nsq_protocol.monitors.lookupd_judge import V1Connection
from nsq_protocol.monitors.monitor import Monitor

NOT_NSQD = "the V1 clients are not known to be nsqds (the judge is not told so)"
# nsqd's IDENTIFY body (nsqd/lookup.go connectCallback); master adds the topology pair
IDENTIFY_KEYS = frozenset({"broadcast_address", "hostname", "http_port", "tcp_port", "version"})
TOPOLOGY_KEYS = frozenset({"topology_region", "topology_zone"})
PING_S = 15.0  # nsqd's lookupd ticker
PING_SLACK_S = 1.0


class NsqdRegisters(Monitor):
    """R-01: nsqd opens with '  V1' and IDENTIFY with a JSON body; R-02: that body holds exactly
    broadcast_address, hostname, http_port, tcp_port and version (and master's topology pair), and after an
    answer that is no JSON nsqd sends nothing more there; R-08: it PINGs every 15 s (capture times only)."""

    ITEMS = ("R-01", "R-02", "R-08")
    KINDS = frozenset({COMMAND, UNREADABLE, RESPONSE, ERROR})

    def __init__(self) -> None:
        super().__init__()
        self._first: set[str] = set()  # connections whose first command was seen
        self._refused: dict[str, Observed] = {}  # connection -> the IDENTIFY answer nsqd must hang up on
        self._pinged: dict[str, float] = {}  # connection -> its last PING (or its start)
        self._pinged_once: set[str] = set()

    def observe(self, judge, connection: V1Connection, event: Observed, answered: Observed | None) -> None:
        if not judge.nsqd_clients:
            self.skip("R-01", NOT_NSQD)
            return
        name = connection.name
        if event.kind == UNREADABLE and connection.started:
            self.report("R-01" if connection.magic_ok is False else "R-02", BROKER, event.ts, name,
                        "'  V1', then IDENTIFY with a size-prefixed JSON body", event.text, event)
        elif event.kind == COMMAND and connection.started:
            self._command(judge, connection, event)
        elif event.kind in (RESPONSE, ERROR) and answered is not None and answered.name == "IDENTIFY":
            if event.kind == ERROR or not _json(event.name):  # nsqd hangs up on it (lp.Close)
                self._refused[name] = event

    def _command(self, judge, connection: V1Connection, event: Observed) -> None:
        name = connection.name
        refused = self._refused.get(name)
        if refused is not None:
            self.report("R-02", BROKER, event.ts, name, "the close after an IDENTIFY answer that is no JSON",
                        event.describe(), refused, event)
            return
        if name not in self._first:
            self._first.add(name)
            self._pinged[name] = connection.opened_at
            if event.name != "IDENTIFY":
                self.report("R-01", BROKER, event.ts, name, "IDENTIFY first", event.describe(), event)
            else:
                self._identify(connection, event)
            return
        if event.name == "PING":
            self._ping(judge, connection, event.ts, event)

    def _identify(self, connection: V1Connection, event: Observed) -> None:
        try:
            body = json.loads(event.text)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            self.report("R-01", BROKER, event.ts, connection.name, "IDENTIFY with a JSON object", event.text[:80],
                        event)
        elif set(body) not in (IDENTIFY_KEYS, IDENTIFY_KEYS | TOPOLOGY_KEYS):
            self.report("R-02", BROKER, event.ts, connection.name, ", ".join(sorted(IDENTIFY_KEYS)),
                        ", ".join(sorted(body)), event)

    def _ping(self, judge, connection: V1Connection, ts: float, event: Observed | None) -> None:
        """R-08: the PING ticker, 15 s from the connection's start or its last PING (a reconnection at a tick PINGs
        at once, so a first PING may come early)."""
        if not judge.timing:
            self.skip("R-08", "the times are not the capture's")
            return
        name = connection.name
        since = ts - self._pinged[name]
        late = since > PING_S + PING_SLACK_S
        early = event is not None and name in self._pinged_once and since < PING_S - PING_SLACK_S
        if late or early:
            self.report("R-08", BROKER, ts, name, f"a PING every {PING_S:g} s",
                        f"{since:.3f} s since the {'last PING' if name in self._pinged_once else 'connection opened'}"
                        + ("" if event is not None else " without a PING"), *(() if event is None else (event,)))
        if event is not None:
            self._pinged[name] = ts
            self._pinged_once.add(name)

    def closed(self, judge, connection: V1Connection) -> None:
        if judge.nsqd_clients and connection.name in self._pinged and connection.closed_at is not None:
            self._ping(judge, connection, connection.closed_at, None)
        self._pinged.pop(connection.name, None)

    def finish(self, judge, now: float) -> None:
        if not judge.nsqd_clients:
            return
        for name in list(self._pinged):
            connection = judge.connections[name]
            if connection.open:
                self._ping(judge, connection, now, None)


def _json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True
