"""Delivery-history checker, Jepsen style: judge what clients saw, not how the broker works.

A history is the list of events the suite's clients recorded (publishes acknowledged with OK,
deliveries, FIN/REQ/TOUCH they sent, RDY changes, disconnects). ``check`` returns the anomalies:

- lost: an acknowledged publish never delivered and FINed by the end of the run (NSQ-SEM-001);
- attempts that do not strictly increase across deliveries of one message ID (C-12, NSQ-SEM-002);
- a delivery after the message was FINed (a FIN is final, P-FIN-06);
- a connection holding more messages in flight than its RDY allows (D-01, NSQ-SEM-002). The client
  sees its own FIN/REQ before the server does, so its count never exceeds the server's; when RDY was
  just lowered the server may not have applied it yet, so the higher of the last two values counts.

Duplicates (messages delivered more than once) are counted and reported, not judged: delivery is at
least once (D-38), and REQ, timeouts and disconnects legitimately redeliver.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Event:
    at: float
    kind: str  # publish, deliver, fin, fin_failed, req, touch, rdy, disconnect
    connection: str = ""
    body: bytes = b""
    message_id: bytes = b""
    attempts: int = 0
    value: int = 0  # RDY count or REQ delay


@dataclass
class History:
    events: list[Event] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, kind: str, **fields) -> None:
        with self._lock:
            self.events.append(Event(time.monotonic(), kind, **fields))


@dataclass
class Report:
    published: int
    deliveries: int
    lost: list[bytes]
    attempt_violations: list[str]
    delivered_after_fin: list[str]
    rdy_violations: list[str]
    duplicates: int  # deliveries beyond the first of each message

    @property
    def ok(self) -> bool:
        return not self.broken()

    def broken(self) -> list[tuple[str, str, list]]:
        """The anomalies found: (title, the behaviour items they break, examples), in the checker's order."""
        return [(title, judges, found) for title, judges, found in (
            ("lost", "D-38", self.lost), ("attempts not increasing", "C-12", self.attempt_violations),
            ("delivered after FIN", "P-FIN-06", self.delivered_after_fin),
            ("RDY exceeded", "D-01", self.rdy_violations)) if found]

    def judges(self) -> str:
        return ", ".join(judges for _, judges, _ in self.broken())

    def describe(self) -> str:
        """The anomalies first, then the totals: duplicates are allowed (at least once, D-38), never the headline."""
        lines = [f"{title} ({len(found)}, {judges}): {found[:5]}" for title, judges, found in self.broken()]
        return "\n".join([*lines, f"published {self.published}, deliveries {self.deliveries}, duplicates "
                                  f"{self.duplicates} (allowed: at least once, D-38)"])


def check(history: History) -> Report:
    events = sorted(history.events, key=lambda event: event.at)
    published = {event.body for event in events if event.kind == "publish"}
    finished_ids: set[bytes] = set()
    failed_fins = {event.message_id for event in events if event.kind == "fin_failed"}
    last_attempts: dict[bytes, int] = {}
    attempt_violations, after_fin, rdy_violations = [], [], []
    in_flight: dict[str, set[bytes]] = defaultdict(set)
    ready: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # previous, current
    body_of: dict[bytes, bytes] = {}
    deliveries = Counter()
    for event in events:
        connection = event.connection
        if event.kind == "rdy":
            ready[connection] = [ready[connection][1], event.value]
        elif event.kind == "deliver":
            deliveries[event.message_id] += 1
            body_of[event.message_id] = event.body
            if event.message_id in finished_ids and event.message_id not in failed_fins:
                # A FIN that raced a timeout fails (E_FIN_FAILED) and is not final.
                after_fin.append(f"{repr(event.message_id)[2:-1]} on {connection}")
            previous = last_attempts.get(event.message_id, 0)
            if event.attempts <= previous:
                attempt_violations.append(f"{repr(event.message_id)[2:-1]}: attempts {previous} then {event.attempts}")
            last_attempts[event.message_id] = event.attempts
            in_flight[connection].add(event.message_id)
            allowed = max(ready[connection])
            if len(in_flight[connection]) > allowed:
                rdy_violations.append(f"{connection}: {len(in_flight[connection])} in flight with RDY {allowed}")
        elif event.kind in ("fin", "req"):
            in_flight[connection].discard(event.message_id)
            if event.kind == "fin":
                finished_ids.add(event.message_id)
        elif event.kind == "fin_failed":
            finished_ids.discard(event.message_id)
        elif event.kind == "disconnect":
            in_flight[connection].clear()
            ready[connection] = [0, 0]
    finished_bodies = {body_of[message_id] for message_id in finished_ids}
    return Report(
        published=len(published),
        deliveries=sum(deliveries.values()),
        lost=sorted(published - finished_bodies),
        attempt_violations=attempt_violations,
        delivered_after_fin=after_fin,
        rdy_violations=rdy_violations,
        duplicates=sum(count - 1 for count in deliveries.values()),
    )
