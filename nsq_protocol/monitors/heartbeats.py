"""Heartbeats: the broker's on a fixed ticker (C-28), and the client's duty to answer (C-29)."""

from __future__ import annotations

from nsq_protocol.monitors.events import BROKER, CLIENT, HEARTBEAT
from nsq_protocol.monitors.monitor import Monitor

LATE_FACTOR = 1.5  # a heartbeat is missing once 1.5 intervals pass without one (the ticker is exact, the wire not)
LATE_SLACK_S = 1.0


class HeartbeatsOnTheTicker(Monitor):
    """C-28: every V2 connection gets a heartbeat every interval, publishers and idle connections included. The
    ticker starts with the connection and again at IDENTIFY (ID-02); C-32: none after heartbeat_interval -1. Judged
    only where the interval is known and the times are the wire's."""

    ITEMS = ("C-28", "C-32")

    def __init__(self):
        super().__init__()
        self._since: dict[str, float] = {}  # connection -> the last heartbeat, or the ticker's (re)start
        self._reported: set[str] = set()

    def observe(self, judge, connection, event, answered):
        if not judge.timing:
            return
        name = connection.name
        if event.kind == HEARTBEAT and connection.heartbeat_ms == 0 and connection.identify is not None and \
                event.ts - connection.identified_at > LATE_SLACK_S and name not in self._reported:
            self._reported.add(name)  # C-32: heartbeat_interval -1 stopped the ticker (SUB's refusal: P-SUB-02)
            self.report("C-32", BROKER, event.ts, name, "no heartbeat after heartbeat_interval -1",
                        f"a heartbeat {event.ts - connection.identified_at:.1f} s after the IDENTIFY's answer", event)
        if event.kind == HEARTBEAT:
            self._check(connection, event.ts, event)
            self._since[name] = event.ts
        elif name not in self._since and connection.started:
            self._since[name] = connection.opened_at
        elif answered is not None and answered.name == "IDENTIFY" and connection.identified_at == event.ts:
            self._since[name] = event.ts  # the ticker restarts with the negotiated interval
        elif event.sender == BROKER:
            self._check(connection, event.ts, event)

    def closed(self, judge, connection):
        if judge.timing and connection.closed_by is not None:
            self._check(connection, connection.closed_at, None)

    def finish(self, judge, now):
        if judge.timing:
            for connection in judge.connections.values():
                if connection.open:
                    self._check(connection, now, None)

    def _check(self, connection, now, event):
        interval, since = connection.heartbeat_ms, self._since.get(connection.name)
        if interval is None or since is None:
            self.skip("C-28", "the heartbeat interval or the connection's start is not in the traffic")
            return
        if interval == 0 or connection.fatal_error is not None or connection.name in self._reported:
            return
        gap = now - since
        if gap > LATE_FACTOR * interval / 1000 + LATE_SLACK_S:
            self._reported.add(connection.name)
            self.report("C-28", BROKER, now, connection.name, f"a heartbeat every {interval} ms",
                        f"none for {gap:.1f} s", *([event] if event else []))


class ClientAnswersHeartbeats(Monitor):
    """C-29: a broker may close a connection whose client sent no command for two heartbeat intervals; then the
    client broke the rule, not the broker."""

    ITEMS = ("C-29",)

    def closed(self, judge, connection):
        interval, last = connection.heartbeat_ms, connection.last_command_at
        if not judge.timing or connection.closed_by != BROKER or connection.fatal_error is not None:
            return
        if interval is None or last is None:
            self.skip("C-29", "the heartbeat interval or the client's commands are not in the traffic")
            return
        if interval and connection.closed_at - last >= 2 * interval / 1000:
            self.report("C-29", CLIENT, connection.closed_at, connection.name,
                        f"a command within 2 x {interval} ms (an answer to the heartbeats)",
                        f"none for {connection.closed_at - last:.1f} s; the broker closed")
