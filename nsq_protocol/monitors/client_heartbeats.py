"""The client answers every heartbeat with NOP within a second: a consumer (NSQC-HB-001) and a publisher
(NSQC-HB-002) alike; nsqd closes a connection silent for two intervals (C-29)."""

from __future__ import annotations

from nsq_protocol.monitors.events import CLIENT, COMMAND, HEARTBEAT
from nsq_protocol.monitors.monitor import Monitor

ANSWER_S = 1.0  # NSQC-HB-001, NSQC-HB-002


class NopAnswersHeartbeat(Monitor):
    """NSQC-HB-001 (a subscribed connection), NSQC-HB-002 (any other, a publisher's): a NOP within a second of each
    heartbeat. Judged where the times are the wire's, up to a fatal error or the connection's end."""

    ITEMS = ("NSQC-HB-001", "NSQC-HB-002")

    def __init__(self):
        super().__init__()
        self._waiting: dict[str, object] = {}  # connection -> the first heartbeat not answered yet

    def observe(self, judge, connection, event, answered):
        if event.kind == HEARTBEAT and judge.timing:
            if connection.name not in self._waiting:
                self._waiting[connection.name] = event
                self.due = min(self.due, event.ts + ANSWER_S)
                judge.want_tick(event.ts + ANSWER_S)
        elif event.kind == COMMAND and event.name == "NOP" and connection.name in self._waiting:
            heartbeat = self._waiting.pop(connection.name)
            if event.ts - heartbeat.ts > ANSWER_S:
                self._late(connection, event.ts, f"NOP {event.ts - heartbeat.ts:.2f} s after it", heartbeat, event)
        elif not judge.timing and event.kind == HEARTBEAT:
            self.skip("NSQC-HB-001", "the times are when the client read the frames, not when they arrived")

    def tick(self, judge, now):
        for name, heartbeat in list(self._waiting.items()):
            if heartbeat.ts + ANSWER_S > now:
                continue
            del self._waiting[name]
            connection = judge.connections[name]
            if connection.open and connection.fatal_error is None:
                self._late(connection, heartbeat.ts + ANSWER_S, f"no NOP within {ANSWER_S:g} s", heartbeat)
        self.due = min((heartbeat.ts + ANSWER_S for heartbeat in self._waiting.values()), default=float("inf"))
        judge.want_tick(self.due)

    def closed(self, judge, connection):
        self._waiting.pop(connection.name, None)  # gone before the second was up: not judged

    def _late(self, connection, ts, observed, *evidence):
        item = "NSQC-HB-001" if connection.subscription else "NSQC-HB-002"
        self.report(item, CLIENT, ts, connection.name, f"a NOP within {ANSWER_S:g} s of each heartbeat", observed,
                    *evidence)
