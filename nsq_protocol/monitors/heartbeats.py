"""Heartbeats: response frames (C-26) on a fixed ticker (C-28), and the client's duty to answer, with any command
(C-26, C-29)."""

from __future__ import annotations

from nsq_protocol.monitors.connection import DEFAULT_HEARTBEAT_MS, TAIL_LOST
from nsq_protocol.monitors.events import BROKER, CLIENT, COMMAND, ERROR, FINS, HEARTBEAT, MESSAGE, MESSAGES, RESPONSE
from nsq_protocol.monitors.monitor import Monitor

LATE_FACTOR = 1.5  # a heartbeat is missing once 1.5 intervals pass without one (the ticker is exact, the wire not)
LATE_SLACK_S = 1.0
EARLY_SLACK_S = 0.5  # a ticker's first tick is exact; this is the capture's clock
ALIVE_S = 1.0  # the broker sent on another connection this soon after a close: it was no shutdown
HEARTBEAT_TEXT = "_heartbeat_"
UNKNOWN_TICKER = "the heartbeat interval or the connection's start is not in the traffic"


class HeartbeatsOnTheTicker(Monitor):
    """C-28: every V2 connection gets a heartbeat every interval, publishers and idle connections included. The
    ticker starts with the connection and again at IDENTIFY (ID-02), its first heartbeat no earlier than one
    interval after (C-27: 30 s without IDENTIFY; C-30: the negotiated one after it); C-32: none after
    heartbeat_interval -1; ID-40: a later IDENTIFY's interval changes nothing (named where it would explain a gap).
    Judged only where the interval is known and the times are the wire's."""

    ITEMS = ("C-27", "C-28", "C-30", "C-32", "ID-40", "P-CLS-03")
    RUNS = frozenset({MESSAGES, FINS})

    def __init__(self):
        super().__init__()
        self._since: dict[str, float] = {}  # connection -> the last heartbeat, or the ticker's (re)start
        self._reported: set[str] = set()
        # connection -> (the earliest its ticker's first heartbeat can come, the item, the old ticker's earliest)
        self._first: dict[str, tuple] = {}

    def observe_run(self, judge, connection, run):
        if not judge.timing:
            return
        name, since = connection.name, self._since.get(connection.name)
        if since is None and connection.started:  # the connection's first event starts the ticker
            for event in run.events():
                self.observe(judge, connection, event, None)
            return
        if run.key == FINS:
            return  # a command neither starts nor checks the ticker
        interval = connection.heartbeat_ms
        if interval is None or since is None:
            self.skip("C-28", UNKNOWN_TICKER, len(run.ts))  # each frame's check, as _check says it
        elif interval and connection.fatal_error is None and name not in self._reported \
                and max(run.ts) - since > _late(interval):
            for event in run.events():  # C-28: a gap within the run
                self.observe(judge, connection, event, None)

    def observe(self, judge, connection, event, answered):
        if not judge.timing:
            return
        name = connection.name
        if event.kind == HEARTBEAT and name in self._first:
            self._first_heartbeat(connection, event)
        elif answered is not None and answered.name == "IDENTIFY" and connection.identified_at == event.ts and \
                connection.started:
            self._restarted(connection, event, answered)
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
            # C-27: the V2 loop's ticker, 30 s whatever the flags; its first tick comes no earlier
            self._first[name] = (connection.opened_at + DEFAULT_HEARTBEAT_MS / 1000 - EARLY_SLACK_S, "C-27", None)
        elif answered is not None and answered.name == "IDENTIFY" and connection.identified_at == event.ts:
            self._since[name] = event.ts  # the ticker restarts with the negotiated interval
        elif event.sender == BROKER:
            self._check(connection, event.ts, event)

    def _restarted(self, connection, answer, command):
        """The first IDENTIFY restarted the ticker once nsqd handled it: after its command, before its answer."""
        interval = connection.heartbeat_ms
        if interval:
            self._first[connection.name] = (command.ts + interval / 1000 - EARLY_SLACK_S, "C-30", answer.ts)
        else:
            self._first.pop(connection.name, None)  # none at all: C-32's

    def _first_heartbeat(self, connection, event):
        """C-27, C-30: a ticker's first heartbeat comes one interval after its start, never before; but for a tick
        of the old ticker that slipped out while nsqd handled the IDENTIFY."""
        earliest, item, restarted_by = self._first.pop(connection.name)
        if event.ts >= earliest or restarted_by is not None and event.ts <= restarted_by + EARLY_SLACK_S:
            return
        self.report(item, BROKER, event.ts, connection.name,
                    f"the ticker's first heartbeat from {earliest + EARLY_SLACK_S:.3f}",
                    f"one {earliest + EARLY_SLACK_S - event.ts:.1f} s earlier", event)

    def closed(self, judge, connection):
        self._first.pop(connection.name, None)
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
            self.skip("C-28", UNKNOWN_TICKER)
            return
        if interval == 0 or connection.fatal_error is not None or connection.name in self._reported:
            return
        gap = now - since
        if gap > _late(interval) and connection.unseen_at(now):
            self.skip("C-28", TAIL_LOST)
        elif gap > _late(interval):
            self._reported.add(connection.name)
            later = connection.later("heartbeat_interval")
            # P-CLS-03: they go on after CLS; ID-40: a later IDENTIFY's interval, which the ticker does not take
            item = "ID-40" if later is not None and gap <= _late(later) else \
                "P-CLS-03" if connection.closing else "C-28"
            self.report(item, BROKER, now, connection.name, f"a heartbeat every {interval} ms",
                        f"none for {gap:.1f} s", *([event] if event else []))


def _late(interval_ms: int) -> float:
    """The longest gap between heartbeats of ``interval_ms`` the capture may show."""
    return LATE_FACTOR * interval_ms / 1000 + LATE_SLACK_S


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


class AnyCommandAnswersHeartbeats(Monitor):
    """C-26: a heartbeat is a response frame ('_heartbeat_' in an error frame is not one), and any command answers
    it, not only NOP: a broker close of a connection whose client answered its last heartbeat within the interval
    with another command breaks it, where nothing else explains the close (no fatal error, no HTTP delete of a
    channel or topic (D-62), the client's last command within two intervals (C-29), the broker sending on another
    connection right afterwards: no shutdown). Judged where the times are the wire's and its HTTP requests are in
    the traffic."""

    ITEMS = ("C-26",)
    KINDS = frozenset({COMMAND, RESPONSE, ERROR, MESSAGE, HEARTBEAT})
    RUNS = frozenset({MESSAGES, FINS})

    def __init__(self):
        super().__init__()
        self._heartbeat_at: dict[str, float] = {}  # connection -> its latest heartbeat not yet answered
        self._answered: dict[str, object] = {}  # connection -> the command other than NOP that answered it
        self._closes: list = []  # (close time, connection, answer): closes still to be told from a shutdown
        self._deleted_at: list[float] = []

    def observe_run(self, judge, connection, run):
        if run.key == FINS and connection.name in self._heartbeat_at:
            self.observe(judge, connection, next(run.events()), None)  # the first FIN answers the heartbeat
        elif run.key == MESSAGES and self._closes:
            for event in run.events():  # a message frame tells a close from a shutdown
                self.observe(judge, connection, event, None)

    def observe(self, judge, connection, event, answered):
        name, kind = connection.name, event.kind
        if kind == HEARTBEAT:
            self._heartbeat_at[name] = event.ts
            self._answered.pop(name, None)
        elif kind == COMMAND:
            beat, interval = self._heartbeat_at.pop(name, None), connection.heartbeat_ms
            if beat is not None and event.name != "NOP" and interval and event.ts - beat <= interval / 1000:
                self._answered[name] = event
        elif kind == ERROR and event.name == HEARTBEAT_TEXT:
            self.report("C-26", BROKER, event.ts, name, "a heartbeat in a response frame", "one in an error frame",
                        event)
        if event.sender == BROKER and self._closes:
            for close in [close for close in self._closes if close[1] != name]:
                self._closes.remove(close)
                closed_at, closed, answer = close
                if closed_at < event.ts <= closed_at + ALIVE_S:
                    self.report("C-26", BROKER, closed_at, closed, "any command, not only NOP, answers a heartbeat",
                                f"closed by the broker {closed_at - answer.ts:.1f} s after the heartbeat's answer "
                                f"{answer.name}", answer)

    def http(self, judge, action):
        if action.path in ("/channel/delete", "/topic/delete") and action.status == 200:
            self._deleted_at.append(action.ts)

    def closed(self, judge, connection):
        self._heartbeat_at.pop(connection.name, None)
        answer = self._answered.pop(connection.name, None)
        if answer is None or not judge.timing or connection.closed_by != BROKER or \
                connection.fatal_error is not None:
            return
        interval, last = connection.heartbeat_ms, connection.last_command_at
        if not judge.http_seen:
            self.skip("C-26", "the HTTP requests to the broker are not in the traffic")
            return
        if connection.closed_at - last >= 2 * interval / 1000 or \
                any(answer.ts <= deleted <= connection.closed_at for deleted in self._deleted_at):
            return  # C-29's, or D-62's
        self._closes.append((connection.closed_at, connection.name, answer))
