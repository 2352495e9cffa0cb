"""PublishTimes (what D-60, D-61, D-63 and D-64 know of when each body was published to each topic) answers as a
record per (topic, body) would, however publishes and answers repeat bodies, within one publish and across them."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from nsq_protocol.http import Request
from nsq_protocol.monitors import http_action
from nsq_protocol.monitors.events import COMMAND, RESPONSE, Observed
from nsq_protocol.monitors.published import PublishTimes

TOPICS = st.sampled_from(["t", "u"])
BODIES = st.integers(0, 5)
JUDGE = SimpleNamespace(all_started=True, http_seen=True, started_at=0.0)


class PublishTimesAsPerBody(RuleBasedStateMachine):
    """The model: (topic, body) -> [first sent, last sent, how many sent, how many answered, last answer], each body
    of each publish counted on its own."""

    def __init__(self):
        super().__init__()
        self.times = PublishTimes()
        self.model: dict[tuple, list] = {}
        self.unknown: set[str] = set()
        self.now = 0.0
        self.sent: list[Observed] = []

    def _tick(self) -> float:
        self.now += 1.0
        return self.now

    def _add(self, ts: float, topic: str, bodies: tuple) -> None:
        for body in bodies:
            record = self.model.setdefault((topic, body), [ts, ts, 0, 0, None])
            record[1] = ts
            record[2] += 1

    def _answer(self, ts: float, topic: str, bodies: tuple) -> None:
        for body in bodies:
            record = self.model.get((topic, body))
            if record is not None:
                record[3] += 1
                record[4] = ts

    @rule(topic=TOPICS, bodies=st.lists(BODIES, max_size=6))
    def publish(self, topic, bodies):
        command = Observed(self._tick(), COMMAND, "MPUB" if len(bodies) != 1 else "PUB", topic=topic,
                           bodies=tuple(bodies))
        self.times.command(command)
        if bodies:
            self._add(command.ts, topic, command.bodies)
        else:  # an MPUB whose bodies are not known
            self.unknown.add(topic)
        self.sent.append(command)

    @rule(data=st.data())
    def answer(self, data):
        if not self.sent:
            return
        command = data.draw(st.sampled_from(self.sent))
        answer = Observed(self._tick(), RESPONSE, "OK")
        self.times.answered(answer, command)
        self._answer(answer.ts, command.topic, command.bodies)

    @rule(topic=TOPICS, body=BODIES, status=st.sampled_from([200, 400]))
    def http_pub(self, topic, body, status):
        """/pub over HTTP: one body, sent and answered in one exchange (the body hashed as http_action does)."""
        sent = self._tick()
        action = http_action(sent, Request("POST", f"/pub?topic={topic}", b"%d" % body), status)
        answered = self._tick()
        self.times.exchange(action, answered)
        self._add(sent, topic, action.bodies)
        self._answer(answered, topic, action.bodies)
        self.sent.append(Observed(sent, COMMAND, "PUB", topic=topic, bodies=action.bodies))

    @rule()
    def forget(self):
        """The records let go of; a topic with a publish of unknown bodies stays unknown, and the publishes sent
        before may still be answered."""
        self.times.forget(self._tick())
        self.model = {}

    @invariant()
    def answers_as_per_body(self):
        for topic in ("t", "u"):
            bodies = {body for (named, body) in self.model if named == topic} | set(range(6))
            for body in bodies:
                message = SimpleNamespace(msg_ts_ns=1 << 62, bodies=(body,))
                record = self.model.get((topic, body))
                expected = None if topic in self.unknown or record is None else (
                    record[0], record[1], record[4] if record[3] >= record[2] else None)
                assert self.times.sent(JUDGE, topic, message) == expected, (topic, body)


TestPublishTimesAsPerBody = PublishTimesAsPerBody.TestCase
TestPublishTimesAsPerBody.settings = settings(max_examples=400, stateful_step_count=40, deadline=None)


def test_an_answer_naming_a_body_twice_counts_for_that_body_only():
    """An MPUB sent before the records were let go of, answered after a later MPUB made its bodies share a record
    with another: only the bodies it carried are answered (the one it carried twice, twice: as sent twice)."""
    times = PublishTimes()
    twice = Observed(1.0, COMMAND, "MPUB", topic="t", bodies=(0, 0))
    times.command(twice)
    times.forget(2.0)
    times.command(Observed(3.0, COMMAND, "MPUB", topic="t", bodies=(0, 1)))
    times.answered(Observed(4.0, RESPONSE, "OK"), twice)
    assert [times.sent(JUDGE, "t", SimpleNamespace(msg_ts_ns=1 << 62, bodies=(body,))) for body in (0, 1)] == [
        (3.0, 3.0, 4.0), (3.0, 3.0, None)]
