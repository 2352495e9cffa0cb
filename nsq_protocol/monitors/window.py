"""The RDY window (D-01): a message goes out only while the client has fewer messages in flight than its RDY; a lower
RDY, 0 included, halts delivery until enough are settled (D-03); RDY is 0 from SUB (D-04) and CLS puts it back to 0
(P-CLS-02).

nsqd takes a connection's commands in order, but its message pump decides on its own, and a message may sit in the
output buffer before it reaches the wire (D-16). So a message may have been decided under any state from the last
command the broker surely had taken (one answered before the message, or one sent more than a second before it) up
to the last one sent: a delivery breaks the window only when none of those states had room. A delivery counts in
flight until the command that settled it, unless its timeout may have fired by then; one whose later FIN or REQ
succeeded was still in flight until that command, which the traffic tells once the broker had time to refuse it."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from itertools import accumulate, chain, repeat
from typing import NamedTuple

from nsq_protocol.monitors.events import BROKER, COMMAND, ERROR, FINS, MESSAGE, MESSAGES, RESPONSE
from nsq_protocol.monitors.ledger_runs import settling
from nsq_protocol.monitors.monitor import Monitor

RDY_GRACE_S = 1.0  # D-16: messages buffered before a command reached the broker still arrive after it
SETTLED_S = 0.5  # a FIN's or REQ's E_*_FAILED follows it at once: this much later, its absence says it settled
KEPT_COMMANDS = 4096  # a connection's commands kept before the older ones, beyond the grace, are let go
TIMED = "the times are when the client read the frames, not when they arrived"
NO_START = "the subscription's start (its RDY) is not in the traffic"


class _Applied(NamedTuple):
    """A command that set the RDY (RDY, CLS; a RDY after CLS does not, P-RDY-01)."""

    ts: float
    rdy: int
    verb: str


@dataclass
class _Window:
    """A subscribed connection's commands, as columns (a capture's FINs come by the hundred)."""

    ts: list = field(default_factory=list)  # when each was sent
    rdys: list = field(default_factory=list)  # the RDY in force once the broker took it
    msg_ids: list = field(default_factory=list)
    settles: list = field(default_factory=list)  # the Delivery (judge.py) a FIN or REQ took out of flight, or None
    # the command where an answer may name it (C-13): a run's FINs get none (None)
    events: list = field(default_factory=list)
    applied: list = field(default_factory=list)  # the _Applied among them: few
    taken: int = 0  # how many of the commands the broker surely had taken (answered)
    suspects: list = field(default_factory=list)  # deliveries with room only if an unsure timeout had fired


class RdyWindow(Monitor):
    """D-01, D-03, P-CLS-02: no message goes out while the client's in-flight count is at or above its RDY, in every
    state the broker may have decided it under. Counted from the subscription on (D-04: RDY starts at 0)."""

    ITEMS = ("D-01", "D-03", "D-04", "P-CLS-02")
    KINDS = frozenset({COMMAND, RESPONSE, ERROR, MESSAGE})
    RUNS = frozenset({MESSAGES, FINS})

    def __init__(self):
        super().__init__()
        self._windows: dict[str, _Window] = {}
        # a run of message frames one of which may have had no room: judged at this monitor's next hook, once the
        # ledger holds the run (what was in flight at each delivery counts the run's earlier ones)
        self._behind: tuple | None = None

    def observe_run(self, judge, connection, run):
        self._catch_up()
        window = self._windows.get(connection.name)
        if run.key == FINS:
            if window is not None:
                self._append(window, run.ts, connection.rdy or 0, run.msg_ids,
                             settling(connection, run), repeat(None, len(run.ts)))
            return
        if not judge.timing or window is None:
            self.skip("D-01", TIMED if not judge.timing else NO_START, len(run.ts))
            return
        in_flight = connection.in_flight
        if window.rdys and len(in_flight) + len(run.ts) - 1 < window.rdys[-1]:
            return  # room under the last command sent at each delivery, counting every message in flight
        self._behind = (connection, window, run, {msg_id: in_flight[msg_id] for msg_id in run.msg_ids
                                                  if msg_id in in_flight})

    def observe(self, judge, connection, event, answered):
        self._catch_up()
        window = self._windows.get(connection.name)
        if event.kind == COMMAND:
            if window is None and event.name == "SUB" and connection.subscribed_at == event.ts:
                window = self._windows[connection.name] = _Window()
            if window is not None:
                self._command(connection, window, event)
            return
        if window is not None and (answered is not None or event.kind == ERROR):
            self._taken(window, answered, event)
        if event.kind != MESSAGE:
            return
        if not judge.timing:
            self.skip("D-01", TIMED)
            return
        if window is None:
            self.skip("D-01", NO_START)
            return
        self._delivery(connection, window, event, connection.in_flight)

    def http(self, judge, action):
        self._catch_up()  # before the judge empties a channel's messages in flight

    def closed(self, judge, connection):
        self._catch_up()
        window = self._windows.pop(connection.name, None)
        if window is not None:
            self._resolve(connection, window, connection.closed_at)

    def finish(self, judge, now):
        self._catch_up()
        for name, window in self._windows.items():
            self._resolve(judge.connections[name], window, now)

    def _catch_up(self):
        """The run left behind, judged delivery by delivery against what was in flight at each: the ledger's now,
        less the run's later messages, with the deliveries they replaced (a redelivery on this connection)."""
        if self._behind is None:
            return
        (connection, window, run, replaced), self._behind = self._behind, None
        now = connection.in_flight
        for index, event in enumerate(run.events()):
            later = set(run.msg_ids[index:])
            in_flight = {msg_id: delivery for msg_id, delivery in now.items() if msg_id not in later}
            in_flight.update((msg_id, replaced[msg_id]) for msg_id in later if msg_id in replaced)
            self._delivery(connection, window, event, in_flight)

    # ---- the connection's commands ------------------------------------------------------------------------
    def _command(self, connection, window, event):
        settles = connection.in_flight.get(event.msg_id) if event.name in ("FIN", "REQ") else None
        rdy = connection.rdy or 0
        if event.name == "CLS" or (event.name == "RDY" and not connection.closing):  # P-RDY-01
            window.applied.append(_Applied(event.ts, rdy, event.name))
        self._append(window, [event.ts], rdy, [event.msg_id], [settles], [event])

    def _append(self, window, ts, rdy, msg_ids, settles, events):
        """Commands sent at ``ts``, under ``rdy``; past ``KEPT_COMMANDS`` each lets go of those before the grace,
        as of its time."""
        kept = len(window.ts) + len(ts)
        if kept > KEPT_COMMANDS and len(ts) > 1 and (max(ts) > ts[-1] or kept - max(0, _first_at(
                chain(window.ts, ts), ts[-1] - RDY_GRACE_S, kept) - 1) <= KEPT_COMMANDS):
            # the last one may keep them all while one before it let some go: one at a time, as they came
            for one in zip(ts, msg_ids, settles, events, strict=True):
                self._append(window, [one[0]], rdy, [one[1]], [one[2]], [one[3]])
            return
        window.ts += ts
        window.rdys += repeat(rdy, len(ts))
        window.msg_ids += msg_ids
        window.settles += settles
        window.events += events
        if kept > KEPT_COMMANDS:
            # the last one, the latest, lets go of all that each one before it would have
            self._forget(window, ts[-1] - RDY_GRACE_S)

    def _taken(self, window, answered, event):
        """An answer: the broker had taken every command up to the one it answers (C-13), or, for a FIN's, REQ's
        or TOUCH's E_*_FAILED, up to the command it names."""
        for index in range(len(window.ts) - 1, window.taken - 1, -1):
            if window.events[index] is answered if answered is not None else \
                    window.msg_ids[index] is not None and window.msg_ids[index] == event.msg_id:
                window.taken = index + 1
                return

    @staticmethod
    def _forget(window, before):
        keep = _first_at(window.ts, before, len(window.ts)) - 1
        if keep > 0:
            for column in (window.ts, window.rdys, window.msg_ids, window.settles, window.events):
                del column[:keep]
            window.taken = max(0, window.taken - keep)
            window.applied = [command for command in window.applied if command.ts >= window.ts[0]]

    # ---- a delivery -----------------------------------------------------------------------------------------
    def _delivery(self, connection, window, event, in_flight):
        """``in_flight``: the connection's messages in flight as the ledger had them at ``event``."""
        rdys = window.rdys
        if rdys and len(in_flight) - (event.msg_id in in_flight) < rdys[-1]:
            return  # room under the last command sent, counting every message in flight: the common case
        first = max(1, window.taken, bisect_left(window.ts, event.ts - RDY_GRACE_S))
        # in flight after every command sent: the ledger's, but for the message itself (a redelivery); one pass, as
        # timed-out messages stay in the ledger (a capture does not show a timeout) and pile up
        sure, unsure = 0, []
        for msg_id, delivery in in_flight.items():
            if msg_id != event.msg_id:
                sure += _counted(delivery, event.ts, unsure)
        # (rdy, sure, how many of ``unsure`` were in flight) of the states with room only if an unsure timeout had
        # fired: each state's unsure ones are a prefix of ``unsure``, which the loop only appends to
        maybe_room = []
        for taken in range(len(rdys), first - 1, -1):  # the state once the broker had taken ``taken`` commands
            rdy = rdys[taken - 1]
            if sure + len(unsure) < rdy:
                return
            if sure < rdy:
                maybe_room.append((rdy, sure, len(unsure)))
            settles = window.settles[taken - 1]
            if settles is not None and window.msg_ids[taken - 1] != event.msg_id:
                sure += _counted(settles, event.ts, unsure)
        verdict = _why_no_room(window, first)
        if maybe_room:
            window.suspects.append((event, verdict, unsure, maybe_room))
        else:
            self._report(connection, event, verdict)

    def _resolve(self, connection, window, end):
        """The suspects, once the traffic tells whether the FINs and REQs that might have freed their room had
        settled anything: a refusal (E_*_FAILED) follows its command at once."""
        for event, verdict, unsure, maybe_room in window.suspects:
            settled = list(accumulate((_settled(delivery, end) for delivery in unsure), initial=0))
            if all(sure + settled[in_flight] >= rdy for rdy, sure, in_flight in maybe_room):
                self._report(connection, event, verdict)
        window.suspects.clear()

    def _report(self, connection, event, verdict):
        item, rdys, cause = verdict
        self.report(item, BROKER, event.ts, connection.name, f"no delivery while RDY {rdys} is reached",
                    f"a delivery with the window full{cause}", event)


def _first_at(times, before: float, default: int) -> int:
    """The index of the first of ``times`` not before ``before``; ``default`` if none."""
    return next((index for index, at in enumerate(times) if at >= before), default)


def _counted(delivery, at: float, unsure: list) -> int:
    """1 if ``delivery`` is surely in flight at ``at``; else it is in flight unless its timeout fired before: added
    to ``unsure``, and 0."""
    if delivery.earliest_timeout is not None and delivery.earliest_timeout > at:
        return 1
    unsure.append(delivery)
    return 0


def _settled(delivery, known_until: float) -> bool:
    """A FIN or REQ of ``delivery`` that succeeded, as the traffic tells it ``SETTLED_S`` after the command."""
    return delivery.settled in ("FIN", "REQ") and not delivery.settle_failed and \
        delivery.settled_at is not None and known_until - delivery.settled_at >= SETTLED_S


def _why_no_room(window: _Window, first: int) -> tuple[str, str, str]:
    """The item of the command that set the window in force, the RDYs the broker may have had, and why: no RDY
    since SUB (D-04), CLS (P-CLS-02), a RDY lower than an earlier one (D-03), or any RDY (D-01)."""
    rdys = "/".join(map(str, sorted(set(window.rdys[first - 1:]))))
    applied = window.applied
    if not applied:
        return "D-04", rdys, ", before any RDY (a subscription starts at RDY 0)"
    if applied and applied[-1].verb == "CLS":
        return "P-CLS-02", rdys, ", after CLS"
    if applied and any(command.rdy > applied[-1].rdy for command in applied[:-1]):
        return "D-03", rdys, f", after the RDY was lowered to {applied[-1].rdy}"
    return "D-01", rdys, ""
