"""When each body was published to each topic: what the rules about pausing and emptying (D-60, D-61, D-63, D-64)
need to tell a message the broker had before an HTTP action from one it got after. A publish counts from the
command's or request's sending, whatever its answer: a refused one only makes the rules judge less."""

from __future__ import annotations

from itertools import repeat
from operator import is_

from nsq_protocol.monitors.events import COMMAND

PUBLISHES = frozenset({"PUB", "MPUB", "DPUB"})
CLOCKS_S = 1.0  # between the broker's clock (a message's timestamp, C-09) and the traffic's


class PublishTimes:
    """(topic, body hash) -> the first and last time a publish of it was sent, and the last answer to one. Where a
    publish's bodies are not known (an MPUB that does not parse, a text /mpub) its topic is ``unknown``: no rule can
    tell its messages apart.

    A publish's bodies are almost always new and answered together: they share one record, made and answered at once
    for all of them, and a body whose times part from the others' (published or answered again on its own) gets a
    copy of its own first."""

    def __init__(self):
        self._by_topic: dict[str, dict[int, list]] = {}  # topic -> body hash -> its record (_record)
        self.unknown: set[str] = set()
        self.known_since = 0.0  # publishes before it were let go of (judge.MESSAGES_KEPT)

    def command(self, event) -> None:
        if event.kind == COMMAND and event.name in PUBLISHES and event.topic is not None:
            self._add(event.ts, event.topic, event.bodies if event.bodies else None)

    def answered(self, event, answered) -> None:
        """``event`` answers the command ``answered`` (C-13)."""
        if answered.name in PUBLISHES and answered.topic is not None:
            self._answer(event.ts, answered.topic, answered.bodies)

    def exchange(self, action, answered_at: float) -> None:
        """An HttpAction (judge.http_action) of any status, answered at ``answered_at``."""
        if action.path in ("/pub", "/mpub") and action.topic is not None:
            self._add(action.ts, action.topic, action.bodies)
            self._answer(answered_at, action.topic, action.bodies or ())

    def _add(self, ts: float, topic: str, bodies) -> None:
        if bodies is None:
            self.unknown.add(topic)
            return
        table = self._by_topic.setdefault(topic, {})
        if new_bodies(table, bodies):
            table.update(dict.fromkeys(bodies, _record(ts, len(bodies))))
            return
        for body in bodies:
            times = table.get(body)
            if times is None:
                table[body] = _record(ts, 1)
            else:
                times = _own(table, body, times)
                times[1] = ts
                times[2] += 1

    def _answer(self, ts: float, topic: str, bodies) -> None:
        table = self._by_topic.get(topic)
        if table is None or not bodies:
            return
        first = table.get(bodies[0])
        # the answer to the publish whose record its bodies share, and only theirs
        if first is not None and first[5] == len(bodies) and len(set(bodies)) == len(bodies) \
                and all(map(is_, map(table.get, bodies), repeat(first))):
            first[3] += 1
            first[4] = ts
            return
        for body in bodies:
            times = table.get(body)
            if times is not None:
                times = _own(table, body, times)
                times[3] += 1
                times[4] = ts

    def sent(self, judge, topic: str, event) -> tuple[float, float, float | None] | None:
        """The first and last publish to ``topic`` of the body of ``event``, a message frame, and the last answer to
        one (None: the last publish is not answered yet, or never), where the traffic shows
        every publish of it: every connection and HTTP request of the nsqd in it, the message stamped during it and
        since the publishes were last let go of."""
        if not (judge.all_started and judge.http_seen) or topic in self.unknown or event.msg_ts_ns is None \
                or not event.bodies:
            return None
        since = max(judge.started_at or 0.0, self.known_since)
        if event.msg_ts_ns < (since + CLOCKS_S) * 1e9:
            return None
        times = self._by_topic.get(topic, {}).get(event.bodies[0])
        if times is None:
            return None
        first, last, sent, answered, answer, _ = times
        return first, last, answer if answered >= sent else None

    def forget(self, now: float) -> None:
        self._by_topic, self.known_since = {}, now


def new_bodies(table: dict, bodies) -> bool:
    """None of ``bodies`` (or message keys) is in ``table``, nor twice in them: a publish's go in at once."""
    return table.keys().isdisjoint(bodies) and len(set(bodies)) == len(bodies)


def _record(ts: float, bodies: int) -> list:
    """A publish's record: first and last sent, how many sent, how many answered, the last answer; and how many
    bodies of the topic share it."""
    return [ts, ts, 1, 0, None, bodies]


def _own(table: dict[int, list], body: int, times: list) -> list:
    """``body``'s record, made its own (a copy) where other bodies share it."""
    if times[5] == 1:
        return times
    times[5] -= 1
    table[body] = own = [*times[:5], 1]
    return own
