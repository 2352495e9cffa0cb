"""The in-flight/deferred queue against a plain model: a dict of id -> deadline."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from reference_broker.message import Message
from reference_broker.pqueue import MessagePQueue

IDS = st.sampled_from([b"%016x" % i for i in range(12)])
DEADLINES = st.integers(0, 50)


class PQueueMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.queue = MessagePQueue()
        self.model: dict[bytes, int] = {}
        self.messages: dict[bytes, Message] = {}

    def _message(self, message_id: bytes) -> Message:
        holder = int(message_id, 16) % 2  # two consumers hold them in turn
        return self.messages.setdefault(message_id, Message(0, 0, message_id, b"body", client_id=holder))

    @rule(message_ids=st.lists(IDS, min_size=1, max_size=4, unique=True), deadline=DEADLINES)
    def push(self, message_ids, deadline):
        """A delivery's batch, or TOUCH moving an existing one (a batch of one)."""
        messages = [self._message(message_id) for message_id in message_ids]
        for message in messages:
            message.pri = deadline
        self.queue.push(messages)
        self.model.update(dict.fromkeys(message_ids, deadline))

    @rule(message_id=IDS)
    def remove(self, message_id):
        removed = self.queue.remove(message_id)
        expected = self.model.pop(message_id, None)
        assert (removed is None) == (expected is None)

    @rule(message_ids=st.lists(IDS, max_size=4), client_id=st.sampled_from([0, 1]))
    def remove_held(self, message_ids, client_id):
        """FIN's batch: only what this consumer holds leaves; the rest comes back with its holder, if any."""
        refused = self.queue.remove_held(message_ids, client_id)
        expected_refused = []
        for message_id in message_ids:
            if message_id in self.model and self.messages[message_id].client_id == client_id:
                del self.model[message_id]
            else:
                expected_refused.append((message_id, self.messages[message_id] if message_id in self.model else None))
        assert refused == expected_refused

    @rule(now=DEADLINES)
    def pop_due(self, now):
        due = self.queue.pop_due(now)
        expected = sorted((d, i) for i, d in self.model.items() if d <= now)
        assert sorted(m.id for m in due) == sorted(i for _, i in expected)
        assert [m.pri for m in due] == sorted(m.pri for m in due)  # earliest first
        for message in due:
            del self.model[message.id]

    @invariant()
    def same_contents(self):
        assert len(self.queue) == len(self.model)
        assert all((i in self.queue) for i in self.model)


TestPQueue = PQueueMachine.TestCase


@given(st.lists(st.tuples(IDS, DEADLINES), max_size=3000))
def test_many_removals_keep_the_heap_bounded(pushes):
    queue = MessagePQueue()
    for message_id, deadline in pushes:
        message = Message(0, 0, message_id, b"", pri=deadline)
        queue.push([message])
        queue.remove(message_id)
    assert len(queue) == 0
    assert len(queue._heap) <= 1024 + 1  # stale entries are compacted away
