"""The consumer's RDY over its connections to several nsqds against the application's max_in_flight: the counts add
up to at most max_in_flight, each connection gets RDY > 0 when there is room for all (NSQC-RDY-002), and where
there is not, a connection left at RDY 0 gets its turn (NSQC-RDY-004)."""

from __future__ import annotations

from nsq_protocol.monitors.events import CLIENT, COMMAND
from nsq_protocol.monitors.monitor import Monitor

SETTLE_S = 0.1  # a client updates its connections' RDY one after the other: the counts are judged this long after
STARVED_S = 8.0  # NSQC-RDY-002: RDY > 0 within this of SUB, where max_in_flight leaves room for every connection
TURN_S = 40.0  # NSQC-RDY-004: RDY > 0 taken back and handed out again within this (gnsq's random picks: 40 s)


class RdySharedWithinMaxInFlight(Monitor):
    """NSQC-RDY-002 and NSQC-RDY-004: ``SETTLE_S`` after each RDY, the counts over the consumer's open connections
    (two or more, subscribed to one topic and channel) add up to at most the application's max_in_flight:
    NSQC-RDY-002 with as many connections as max_in_flight or fewer, NSQC-RDY-004 with more (once until they do
    again). NSQC-RDY-002: with room for every
    connection, a connection still at RDY 0 ``STARVED_S`` after its SUB while another has RDY > 0 (no backoff) is
    starved. NSQC-RDY-004: with more connections than max_in_flight, one left at RDY 0 for ``TURN_S`` since its SUB
    or its last RDY > 0 while others have RDY > 0 never gets its turn. Judged where the times are the wire's."""

    ITEMS = ("NSQC-RDY-002", "NSQC-RDY-004")
    KINDS = frozenset({COMMAND})

    def __init__(self):
        super().__init__()
        # (due, the item a starved connection breaks or None for the counts' sum, connection, the SUB or RDY)
        self._checks: list = []
        self._positive_at: dict[str, float] = {}  # connection -> its last RDY > 0
        self._starved_at: dict[str, float] = {}  # connection -> when it was last found starved
        self._over: set[tuple] = set()  # subscriptions found over max_in_flight, until they are within it again

    def observe(self, judge, connection, event, answered):
        if event.kind != COMMAND or event.name not in ("SUB", "RDY") or connection.subscription is None:
            return
        most = judge.application.max_in_flight if judge.application else None
        if most is None or not judge.timing:
            for item in self.ITEMS:
                self.skip(item, "the application's max_in_flight is not known to the judge" if most is None
                          else "the times are when the client read the frames, not when they arrived")
            return
        if event.name == "SUB":
            self._want(judge, (event.ts + STARVED_S, "NSQC-RDY-002", connection, event))
        if event.name == "SUB" or event.number == 0:
            self._want(judge, (event.ts + TURN_S, "NSQC-RDY-004", connection, event))
        elif event.number:
            self._positive_at[connection.name] = event.ts
        self._want(judge, (event.ts + SETTLE_S, None, connection, event))

    def _want(self, judge, check):
        self._checks.append(check)
        self.due = min(self.due, check[0])
        judge.want_tick(self.due)

    def tick(self, judge, now):
        later = []
        for check in self._checks:
            if check[0] > now:
                later.append(check)
            else:
                self._judge(judge, *check)
        self._checks = later
        self.due = min((check[0] for check in later), default=float("inf"))
        judge.want_tick(self.due)

    def _judge(self, judge, due, starved_item, connection, event):
        most = judge.application.max_in_flight
        consuming = [c for c in judge.consumers(connection.subscription)
                     if c.open and not c.closing and c.rdy is not None]
        item = "NSQC-RDY-002" if len(consuming) <= most else "NSQC-RDY-004"
        if starved_item is None:
            total, key = sum(c.rdy for c in consuming), connection.subscription
            if total <= most or len(consuming) < 2:  # one connection's RDY is P-RDY-02's and NSQC-RDY-001's
                self._over.discard(key)
            elif key not in self._over:
                self._over.add(key)
                self.report(item, CLIENT, due, connection.name, f"the RDY counts over the consumer's connections "
                            f"at most max_in_flight {most}", ", ".join(f"{c.name}: RDY {c.rdy}" for c in consuming)
                            + f" ({total})", event)
        elif starved_item == item and connection in consuming and not connection.rdy \
                and max(self._positive_at.get(connection.name, -1.0), self._starved_at.get(connection.name, -1.0)) \
                < event.ts and any(c.rdy for c in consuming):
            self._starved_at[connection.name] = due
            self.report(item, CLIENT, due, connection.name,
                        f"RDY > 0 on each of the consumer's {len(consuming)} connections in turn (max_in_flight "
                        f"{most})", f"RDY 0 for {due - event.ts:g} s while another connection had RDY > 0", event)

    def finish(self, judge, now):
        for _, item, _, _ in self._checks:
            if item is not None:
                self.skip(item, "the traffic ends before a connection at RDY 0 would have had its turn")
