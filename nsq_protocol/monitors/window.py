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

import bisect
from dataclasses import dataclass, field
from itertools import accumulate

from nsq_protocol.monitors.events import BROKER, COMMAND, ERROR, MESSAGE, RESPONSE
from nsq_protocol.monitors.monitor import Monitor

RDY_GRACE_S = 1.0  # D-16: messages buffered before a command reached the broker still arrive after it
SETTLED_S = 0.5  # a FIN's or REQ's E_*_FAILED follows it at once: this much later, its absence says it settled
KEPT_COMMANDS = 4096  # a connection's commands kept before the older ones, beyond the grace, are let go
TIMED = "the times are when the client read the frames, not when they arrived"


@dataclass
class _Command:
    ts: float
    event: object
    rdy: int  # the RDY in force once the broker took it
    applied: bool  # it changed the RDY (a RDY after CLS does not, P-RDY-01)
    settles: object = None  # the Delivery (judge.py) a FIN or REQ took out of flight


@dataclass
class _Window:
    commands: list = field(default_factory=list)
    applied: list = field(default_factory=list)  # those of ``commands`` that set the RDY (RDY, CLS): few
    taken: int = 0  # how many of ``commands`` the broker surely had taken (answered)
    suspects: list = field(default_factory=list)  # deliveries with room only if an unsure timeout had fired


class RdyWindow(Monitor):
    """D-01, D-03, P-CLS-02: no message goes out while the client's in-flight count is at or above its RDY, in every
    state the broker may have decided it under. Counted from the subscription on (D-04: RDY starts at 0)."""

    ITEMS = ("D-01", "D-03", "D-04", "P-CLS-02")
    KINDS = frozenset({COMMAND, RESPONSE, ERROR, MESSAGE})

    def __init__(self):
        super().__init__()
        self._windows: dict[str, _Window] = {}

    def observe(self, judge, connection, event, answered):
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
            self.skip("D-01", "the subscription's start (its RDY) is not in the traffic")
            return
        self._delivery(connection, window, event)

    def closed(self, judge, connection):
        window = self._windows.pop(connection.name, None)
        if window is not None:
            self._resolve(connection, window, connection.closed_at)

    def finish(self, judge, now):
        for name, window in self._windows.items():
            self._resolve(judge.connections[name], window, now)

    # ---- the connection's commands ------------------------------------------------------------------------
    def _command(self, connection, window, event):
        settles = connection.in_flight.get(event.msg_id) if event.name in ("FIN", "REQ") else None
        applied = event.name == "CLS" or (event.name == "RDY" and not connection.closing)  # P-RDY-01
        window.commands.append(_Command(event.ts, event, connection.rdy or 0, applied, settles))
        if applied:
            window.applied.append(window.commands[-1])
        if len(window.commands) > KEPT_COMMANDS:
            self._forget(window, event.ts - RDY_GRACE_S)

    def _taken(self, window, answered, event):
        """An answer: the broker had taken every command up to the one it answers (C-13), or, for a FIN's, REQ's
        or TOUCH's E_*_FAILED, up to the command it names."""
        for index in range(len(window.commands) - 1, window.taken - 1, -1):
            command = window.commands[index].event
            if command is answered or (answered is None and command.msg_id is not None
                                       and command.msg_id == event.msg_id):
                window.taken = index + 1
                return

    @staticmethod
    def _forget(window, before):
        keep = next((index for index, command in enumerate(window.commands) if command.ts >= before),
                    len(window.commands)) - 1
        if keep > 0:
            del window.commands[:keep]
            window.taken = max(0, window.taken - keep)
            window.applied = [command for command in window.applied if command.ts >= window.commands[0].ts]

    # ---- a delivery -----------------------------------------------------------------------------------------
    def _delivery(self, connection, window, event):
        commands = window.commands
        in_flight = len(connection.in_flight) - (event.msg_id in connection.in_flight)
        if commands and in_flight < commands[-1].rdy:
            return  # room under the last command sent, counting every message in flight: the common case
        first = max(1, window.taken, bisect.bisect_left(commands, event.ts - RDY_GRACE_S, key=lambda c: c.ts))
        # in flight after every command sent: the ledger's, but for the message itself (a redelivery); one pass, as
        # timed-out messages stay in the ledger (a capture does not show a timeout) and pile up
        sure, unsure = 0, []
        for msg_id, delivery in connection.in_flight.items():
            if msg_id != event.msg_id:
                sure += _counted(delivery, event.ts, unsure)
        # (rdy, sure, how many of ``unsure`` were in flight) of the states with room only if an unsure timeout had
        # fired: each state's unsure ones are a prefix of ``unsure``, which the loop only appends to
        maybe_room = []
        for taken in range(len(commands), first - 1, -1):  # the state once the broker had taken ``taken`` commands
            command = commands[taken - 1]
            if sure + len(unsure) < command.rdy:
                return
            if sure < command.rdy:
                maybe_room.append((command.rdy, sure, len(unsure)))
            if command.settles is not None and command.event.msg_id != event.msg_id:
                sure += _counted(command.settles, event.ts, unsure)
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
    rdys = "/".join(map(str, sorted({command.rdy for command in window.commands[first - 1:]})))
    applied = window.applied
    if not applied:
        return "D-04", rdys, ", before any RDY (a subscription starts at RDY 0)"
    if applied and applied[-1].event.name == "CLS":
        return "P-CLS-02", rdys, ", after CLS"
    if applied and any(command.rdy > applied[-1].rdy for command in applied[:-1]):
        return "D-03", rdys, f", after the RDY was lowered to {applied[-1].rdy}"
    return "D-01", rdys, ""
