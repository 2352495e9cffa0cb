"""The consumer's backoff after a failed message: the REQ of a message whose handler failed (the application's order)
has an RDY 0 beside it (NSQC-RDY-003); as far as the traffic shows it, a REQ with an RDY 0 beside it is a backoff; it
ends with RDY 1, a test message (NSQC-RDY-005), it ends at all (NSQC-RDY-006), over failures in a row it grows
(NSQC-RDY-007), and it lasts no longer than the longest the application configured (NSQC-RDY-008). A REQ without an
RDY 0 (a requeue without backoff, or a library without one) starts nothing here."""

from __future__ import annotations

from dataclasses import dataclass, field

from nsq_protocol.monitors.application import FAIL
from nsq_protocol.monitors.events import CLIENT, COMMAND, MESSAGE
from nsq_protocol.monitors.monitor import Monitor

BESIDE_S = 2.0  # a REQ and an RDY 0 this close together, either first, are a failure and its backoff
ENDS_WITHIN_S = 20.0  # NSQC-RDY-006
FAILURES_JUDGED = 4  # NSQC-RDY-007: over four backoffs in a row, a later one lasts longer than the first
# NSQC-RDY-008: a backoff measured from its RDY 0 to the next RDY > 0 on the wire may outlast the configured longest by
# the timer's lateness and the client's scheduling on a loaded machine; a backoff past the cap is seconds past it
CAP_TOLERANCE_S = 1.5


@dataclass
class _Subscription:
    """One consumer's channel over its connections: its last failure, the backoff it is in, the backoffs since its
    last success."""

    req_at: float | None = None
    zero_at: float | None = None  # the last RDY 0 that left the subscription with RDY 0 everywhere
    backoff: tuple | None = None  # (since, the REQ) of the backoff in force
    lengths: list = field(default_factory=list)  # of the backoffs since the last FIN
    judged_growth: bool = False


class BackoffEnds(Monitor):
    """NSQC-RDY-005 (SHOULD): a backoff ends with RDY 1, one test message, on one of the consumer's connections;
    NSQC-RDY-006: it ends (RDY > 0 again) within 20 s of the failure, while the consumer keeps a connection open
    and has not sent CLS; NSQC-RDY-007 (SHOULD): over four backoffs with no FIN between them, a later one lasts
    longer than the first (where no longest backoff was configured); NSQC-RDY-008 (SHOULD): none lasts longer
    than the application's max_backoff_ms (and 1.5 s). The consumer's connections are those subscribed to the same
    topic and channel in this traffic; judged where the times are the wire's."""

    ITEMS = ("NSQC-RDY-005", "NSQC-RDY-006", "NSQC-RDY-007", "NSQC-RDY-008")

    def __init__(self):
        super().__init__()
        self._subscriptions: dict[tuple, _Subscription] = {}
        self._waiting: list = []  # (due, subscription key, the backoff) for NSQC-RDY-006

    def observe(self, judge, connection, event, answered):
        if event.kind != COMMAND or connection.subscription is None or event.name not in ("REQ", "RDY", "FIN"):
            return
        if not judge.timing:
            self.skip("NSQC-RDY-006", "the times are when the client read the frames, not when they arrived")
            return
        key = connection.subscription
        state = self._subscriptions.setdefault(key, _Subscription())
        if event.name == "FIN":
            state.lengths, state.judged_growth = [], False  # a success ends the failures in a row
        elif event.name == "REQ":
            state.req_at = event.ts
            if state.backoff is None and state.zero_at is not None and event.ts - state.zero_at <= BESIDE_S:
                self._start(judge, key, state, state.zero_at, event)
        elif event.number == 0:
            if all(not c.rdy for c in judge.consumers(key) if c.open):
                state.zero_at = event.ts
                if state.backoff is None and state.req_at is not None and event.ts - state.req_at <= BESIDE_S:
                    self._start(judge, key, state, event.ts, event)
        elif event.number:
            state.zero_at = None
            if state.backoff is not None:
                self._ended(judge, connection, state, event)

    def _start(self, judge, key, state, since, event):
        state.backoff = (since, event)
        due = min(since, state.req_at) + ENDS_WITHIN_S
        self._waiting.append((due, key, state.backoff))
        self.due = min(self.due, due)
        judge.want_tick(due)

    def _ended(self, judge, connection, state, event):
        since, _ = state.backoff
        state.backoff = None
        longest_ms = judge.application.max_backoff_ms if judge.application else None
        if longest_ms is not None and event.ts - since > longest_ms / 1000 + CAP_TOLERANCE_S:
            self.report("NSQC-RDY-008", CLIENT, event.ts, connection.name,
                        f"a backoff no longer than the {longest_ms} ms configured (and {CAP_TOLERANCE_S:g} s)",
                        f"RDY 0 for {event.ts - since:.2f} s", event)
        if event.number != 1:
            self.report("NSQC-RDY-005", CLIENT, event.ts, connection.name,
                        "a backoff ended with RDY 1 (a test message)",
                        f"RDY {event.number} after {event.ts - since:.2f} s of RDY 0", event)
        state.lengths.append(event.ts - since)
        if len(state.lengths) >= FAILURES_JUDGED and not state.judged_growth:
            state.judged_growth = True
            if longest_ms is not None:  # go-nsq stays at 2 s under a 3 s cap: its next step, 4 s, would pass it
                self.skip("NSQC-RDY-007", "a longest backoff was configured: the growth may stop below it")
                return
            first, later = state.lengths[0], state.lengths[1:]
            if max(later) <= first:
                self.report("NSQC-RDY-007", CLIENT, event.ts, connection.name,
                            f"over {len(state.lengths)} backoffs in a row, a later one longer than the first",
                            ", ".join(f"{length:.2f} s" for length in state.lengths), event)

    def tick(self, judge, now):
        waiting = []
        for due, key, backoff in self._waiting:
            if due > now:
                waiting.append((due, key, backoff))
            elif self._subscriptions[key].backoff is backoff:
                consuming = [c for c in judge.consumers(key) if c.open and not c.closing]
                if consuming:
                    self.report("NSQC-RDY-006", CLIENT, due, consuming[0].name,
                                f"RDY > 0 again within {ENDS_WITHIN_S:g} s of the failure",
                                f"still RDY 0 {due - backoff[0]:.1f} s after the backoff began", backoff[1])
        self._waiting = waiting
        self.due = min((due for due, _, _ in waiting), default=float("inf"))
        judge.want_tick(self.due)


class BacksOffAfterFailure(Monitor):
    """NSQC-RDY-003 (SHOULD): the REQ of a message whose handler failed (the application's order, application.py)
    has an RDY 0 of the consumer beside it, within 2 s either side: a backoff. That it ends is NSQC-RDY-006's
    (BackoffEnds). Judged where the times are the wire's, and only while the consumer's connection stays open 2 s
    after the REQ; a message over the application's max_attempts is not the handler's."""

    ITEMS = ("NSQC-RDY-003",)
    KINDS = frozenset({COMMAND, MESSAGE})

    def __init__(self):
        super().__init__()
        self._failing: set[tuple[str, str]] = set()  # (connection, msg_id) of messages whose handler fails
        self._zero_at: dict[tuple, float] = {}  # subscription -> its last RDY 0
        self._waiting: list = []  # (due, subscription, connection, the REQ) awaiting an RDY 0

    def observe(self, judge, connection, event, answered):
        application, key = judge.application, connection.subscription
        if event.kind == MESSAGE:
            if application and event.bodies and event.msg_id is not None \
                    and _fails(application, application.orders.get(event.bodies[0]), event.attempts):
                self._failing.add((connection.name, event.msg_id))
        elif event.kind != COMMAND:
            return
        elif event.name == "RDY" and event.number == 0 and key is not None:
            self._zero_at[key] = event.ts
            self._waiting = [waiting for waiting in self._waiting if waiting[1] != key]
        elif event.name == "REQ" and (connection.name, event.msg_id) in self._failing:
            self._failing.discard((connection.name, event.msg_id))
            if not judge.timing:
                self.skip("NSQC-RDY-003", "the times are when the client read the frames, not when they arrived")
            elif event.ts - self._zero_at.get(key, float("-inf")) > BESIDE_S:
                self._waiting.append((event.ts + BESIDE_S, key, connection, event))
                self.due = min(self.due, event.ts + BESIDE_S)
                judge.want_tick(self.due)

    def tick(self, judge, now):
        waiting = []
        for due, key, connection, req in self._waiting:
            if due > now:
                waiting.append((due, key, connection, req))
            elif connection.closed_at is not None and connection.closed_at <= due:
                self.skip("NSQC-RDY-003", "the connection closed within 2 s of the REQ")
            else:
                self.report("NSQC-RDY-003", CLIENT, due, connection.name,
                            f"RDY 0 within {BESIDE_S:g} s of the REQ of a failed message (a backoff)",
                            f"no RDY 0 {BESIDE_S:g} s after it", req)
        self._waiting = waiting
        self.due = min((due for due, *_ in waiting), default=float("inf"))
        judge.want_tick(self.due)

    def finish(self, judge, now):
        for _ in self._waiting:
            self.skip("NSQC-RDY-003", f"the traffic ends within {BESIDE_S:g} s of the REQ")


def _fails(application, order, attempts) -> bool:
    """The message's handler fails: its order says so, and it reaches the handler (not over max_attempts; a message
    of attempt 2 or more only against a max_attempts known: the application's, or the library's documented one)."""
    return order is not None and order.action == FAIL and application.handled(attempts or 1) is True
