"""When each body was published to each topic: what the rules about pausing and emptying (D-60, D-61, D-63, D-64)
need to tell a message the broker had before an HTTP action from one it got after. A publish counts from the
command's or request's sending, whatever its answer: a refused one only makes the rules judge less."""

from __future__ import annotations

from nsq_protocol.monitors.events import COMMAND

PUBLISHES = frozenset({"PUB", "MPUB", "DPUB"})
CLOCKS_S = 1.0  # between the broker's clock (a message's timestamp, C-09) and the traffic's


class PublishTimes:
    """(topic, body hash) -> the first and last time a publish of it was sent, and the last answer to one. Where a
    publish's bodies are not known (an MPUB that does not parse, a text /mpub) its topic is ``unknown``: no rule can
    tell its messages apart."""

    def __init__(self):
        self._times: dict[tuple, list] = {}
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
        for body in bodies:
            times = self._times.get((topic, body))
            if times is None:
                self._times[topic, body] = [ts, ts, 1, 0, None]  # first, last, how many sent, answered, last answer
            else:
                times[1] = ts
                times[2] += 1

    def _answer(self, ts: float, topic: str, bodies) -> None:
        for body in bodies:
            times = self._times.get((topic, body))
            if times is not None:
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
        times = self._times.get((topic, event.bodies[0]))
        if times is None:
            return None
        first, last, sent, answered, answer = times
        return first, last, answer if answered >= sent else None

    def forget(self, now: float) -> None:
        self._times, self.known_since = {}, now
