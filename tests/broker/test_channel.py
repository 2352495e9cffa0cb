"""The channel's delivery bookkeeping, driven directly with stand-in consumers (no sockets).

The consumers here only record what the channel hands them; the channel is the thing under test."""
from __future__ import annotations

import tempfile
import time

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from reference_broker.channel import Channel, ChannelError, ChannelFullError
from reference_broker.client_v2 import STATE_SUBSCRIBED
from reference_broker.message import BODY, ID, TIMESTAMP, Message
from reference_broker.nsqd import NSQD
from reference_broker.options import MS, SECOND, Options


class Consumer:
    """What the channel needs of a client: room under RDY, and somewhere to put deliveries."""

    def __init__(self, client_id: int, ready: int = 0, msg_timeout: int = SECOND):
        self.id = client_id
        self.state = STATE_SUBSCRIBED
        self.ready_count = ready
        self.in_flight_count = 0
        self.finish_count = self.requeue_count = self.message_count = 0
        self.pump_sample_rate = 0
        self.pump_msg_timeout = msg_timeout
        self.received: list[Message] = []
        self.deliveries: list[tuple[bytes, int]] = []  # (id, attempts) as handed over

    def ready_room(self) -> int:
        return self.ready_count - self.in_flight_count

    def buffer_messages(self, messages) -> bool:
        assert self.in_flight_count + len(messages) <= self.ready_count, "delivered beyond RDY (D-01)"
        self.received.extend(messages)
        self.deliveries.extend((m.id, m.attempts) for m in messages)
        self.in_flight_count += len(messages)
        return False

    def request_flush(self) -> None:
        pass


_DATA_PATHS = tempfile.TemporaryDirectory(prefix="nsqd-data-")


def _channel(ephemeral=False, **option_overrides) -> Channel:
    """A channel of a real (not started) nsqd, with its own data path for the disk queue."""
    nsqd = NSQD(Options(data_path=tempfile.mkdtemp(dir=_DATA_PATHS.name), **option_overrides))
    return Channel("t", "c#ephemeral" if ephemeral else "c", nsqd, on_last_client_left=lambda channel: None)


def _messages(count: int, start: int = 0) -> list[tuple]:
    """Queued messages as a topic hands them over: (timestamp, attempts, id, body, deferred)."""
    return [(0, 0, b"%016x" % i, b"m%d" % i, 0) for i in range(start, start + count)]


def test_rdy_is_a_window_not_a_countdown():
    # D-02: with RDY 1, each FIN lets the next message through without another RDY.
    channel, consumer = _channel(), Consumer(1, ready=1)
    channel.add_client(consumer)
    channel.put_messages(_messages(3))
    assert [m.body for m in consumer.received] == [b"m0"]
    channel.finish(consumer, [consumer.received[0].id])
    channel.finish(consumer, [consumer.received[1].id])
    assert [m.body for m in consumer.received] == [b"m0", b"m1", b"m2"]
    assert consumer.finish_count == 2 and consumer.in_flight_count == 1


def test_consumers_of_one_channel_share_the_stream():
    # D-35: two consumers on one channel each get one of two messages.
    channel, a, b = _channel(), Consumer(1, ready=5), Consumer(2, ready=5)
    channel.add_client(a)
    channel.add_client(b)
    channel.put_messages(_messages(2))
    assert len(a.received) == 1 and len(b.received) == 1


def test_fin_of_another_consumers_message_is_refused_and_unknown_ids_are_not_in_flight():
    # P-FIN-04, P-FIN-05, D-10
    channel, a, b = _channel(), Consumer(1, ready=1), Consumer(2)
    channel.add_client(a)
    channel.add_client(b)
    channel.put_messages(_messages(1))
    message_id = a.received[0].id
    assert channel.finish(b, [message_id]) == [(message_id, "client does not own message")]
    assert channel.finish(a, [b"zzzzzzzzzzzzzzzz"]) == [(b"zzzzzzzzzzzzzzzz", "ID not in flight")]
    assert channel.finish(a, [message_id]) == []
    assert channel.finish(a, [message_id]) == [(message_id, "ID not in flight")]  # P-FIN-06


def test_timeout_requeues_with_attempts_plus_one():
    # D-11, C-12: the timed-out message comes back with attempts 2, same id and timestamp.
    channel, consumer = _channel(), Consumer(1, ready=1, msg_timeout=SECOND)
    channel.add_client(consumer)
    channel.put_messages(_messages(1))
    first = consumer.received[0]
    channel.process_queues(first.delivery_ts + SECOND - 1)
    assert len(consumer.received) == 1
    channel.process_queues(first.delivery_ts + SECOND)
    assert len(consumer.received) == 2 and consumer.received[1].attempts == 2
    assert consumer.received[1].id == first.id and channel.timeout_count == 1


def test_req_with_delay_waits_in_the_deferred_queue():
    # D-21: counted in deferred_count, not depth; released when due.
    channel, consumer = _channel(), Consumer(1, ready=1)
    channel.add_client(consumer)
    channel.put_messages(_messages(1))
    message = consumer.received[0]
    channel.requeue(consumer, message.id, 500 * MS)
    assert (len(channel.deferred), channel.depth, channel.requeue_count) == (1, 0, 1)
    channel.process_queues(message.pri)
    assert len(consumer.received) == 2 and len(channel.deferred) == 0


def test_touch_never_extends_past_max_msg_timeout():
    # D-13: now + msg_timeout, capped at delivery + --max-msg-timeout.
    channel, consumer = _channel(max_msg_timeout=3 * SECOND), Consumer(1, ready=1, msg_timeout=2 * SECOND)
    channel.add_client(consumer)
    channel.put_messages(_messages(1))
    message = consumer.received[0]
    channel.touch(consumer, message.id, 2 * SECOND)
    channel.touch(consumer, message.id, 100 * SECOND)
    assert message.pri == message.delivery_ts + 3 * SECOND


def test_ephemeral_overflow_is_dropped_but_counted():
    # D-53: mem-queue-size 2 -> depth 2, message_count 6.
    channel = _channel(ephemeral=True, mem_queue_size=2)
    channel.put_messages(_messages(6))
    assert (channel.depth, channel.backend_depth, channel.message_count) == (2, 0, 6)


def test_overflow_of_a_normal_channel_is_backend_depth():
    # D-70: mem-queue-size 2 -> depth 6, backend_depth 4.
    channel = _channel(mem_queue_size=2)
    channel.put_messages(_messages(6))
    assert (channel.depth, channel.backend_depth) == (6, 4)


def test_overflow_comes_back_from_disk_with_id_timestamp_and_body():
    # D-70: a consumer gets all six, the four from disk as they were published.
    channel, consumer = _channel(mem_queue_size=2), Consumer(1, ready=10)
    published = _messages(6)
    channel.put_messages(published)
    channel.add_client(consumer)
    channel.client_ready_changed()
    received = sorted(consumer.received, key=lambda m: m.id)
    assert [(m.id, m.timestamp, m.body, m.attempts) for m in received] == \
        [(m[ID], m[TIMESTAMP], m[BODY], 1) for m in published]
    assert channel.depth == 0 and channel.backend_depth == 0


def test_mem_queue_size_zero_sends_everything_through_disk():
    # D-74: backend_depth = depth.
    channel = _channel(mem_queue_size=0)
    channel.put_messages(_messages(3))
    assert (channel.depth, channel.backend_depth) == (3, 3)


def test_empty_clears_in_flight_and_makes_consumers_ready_again():
    # D-63
    channel, consumer = _channel(), Consumer(1, ready=1)
    channel.add_client(consumer)
    channel.put_messages(_messages(2))
    channel.empty()
    assert consumer.in_flight_count == 0 and len(channel.in_flight) == 0 and channel.depth == 0
    assert channel.finish(consumer, [consumer.received[0].id])[0][1] == "ID not in flight"


def test_pause_holds_messages_until_unpause():
    # D-60
    channel, consumer = _channel(), Consumer(1, ready=5)
    channel.add_client(consumer)
    channel.set_paused(True)
    channel.put_messages(_messages(2))
    assert consumer.received == [] and channel.depth == 2
    channel.set_paused(False)
    assert len(consumer.received) == 2


def test_max_channel_consumers():
    # P-SUB-06
    channel = _channel(max_channel_consumers=1)
    channel.add_client(Consumer(1))
    with pytest.raises(ChannelFullError, match="consumers for t:c exceeds limit of 1"):
        channel.add_client(Consumer(2))


def test_requeue_after_delete_reports_exiting():
    channel, consumer = _channel(), Consumer(1, ready=1)
    channel.add_client(consumer)
    channel.put_messages(_messages(1))
    assert channel.delete() == [consumer]
    with pytest.raises(ChannelError):
        channel.requeue(consumer, consumer.received[0].id, 0)


class ChannelMachine(RuleBasedStateMachine):
    """Random FIN/REQ/timeouts/RDY changes against a model: nothing is lost, RDY is never exceeded,
    attempts only grow, and every message ends up finished exactly once. A memory queue of 3 sends the
    rest through the disk queue (D-70)."""

    def __init__(self):
        super().__init__()
        self.channel = _channel(mem_queue_size=3)
        self.consumers = [Consumer(i, msg_timeout=SECOND) for i in (1, 2)]
        for consumer in self.consumers:
            self.channel.add_client(consumer)
        self.published: set[bytes] = set()
        self.finished: set[bytes] = set()
        self.clock = 0
        self.next_id = 0

    def _in_flight_of(self, consumer):
        return [m for m in self.channel.in_flight.messages() if m.client_id == consumer.id]

    @rule(count=st.integers(1, 5))
    def publish(self, count):
        messages = _messages(count, self.next_id)
        self.next_id += count
        self.published.update(m[ID] for m in messages)
        self.channel.put_messages(messages)

    @rule(index=st.integers(0, 1), ready=st.integers(0, 4))
    def rdy(self, index, ready):
        self.consumers[index].ready_count = ready
        self.channel.client_ready_changed()

    @precondition(lambda self: len(self.channel.in_flight) > 0)
    @rule(index=st.integers(0, 1), data=st.data())
    def fin(self, index, data):
        owned = self._in_flight_of(self.consumers[index])
        if owned:
            message = data.draw(st.sampled_from(owned))
            assert self.channel.finish(self.consumers[index], [message.id]) == []
            assert message.id not in self.finished
            self.finished.add(message.id)

    @precondition(lambda self: len(self.channel.in_flight) > 0)
    @rule(index=st.integers(0, 1), delay=st.sampled_from([0, 200 * MS]), data=st.data())
    def req(self, index, delay, data):
        owned = self._in_flight_of(self.consumers[index])
        if owned:
            self.channel.requeue(self.consumers[index], data.draw(st.sampled_from(owned)).id, delay)

    @rule(step=st.sampled_from([100 * MS, SECOND]))
    def time_passes(self, step):
        """The scan loop runs on a clock ahead of the real one (deadlines are monotonic ns)."""
        self.clock += step
        self.channel.process_queues(time.monotonic_ns() + self.clock)

    @invariant()
    def nothing_lost(self):
        in_memory = {m[ID] for m in self.channel.memory}
        elsewhere = {m.id for m in self.channel.in_flight.messages()} | {m.id for m in self.channel.deferred.messages()}
        assert not (in_memory & elsewhere) and not (self.finished & (in_memory | elsewhere))
        on_disk = self.published - self.finished - in_memory - elsewhere
        assert len(on_disk) == self.channel.backend_depth

    def teardown(self):
        """Drain: every message not yet finished comes out exactly once more and is finished."""
        for consumer in self.consumers:
            consumer.ready_count = 0
        for consumer in self.consumers:
            owned = self._in_flight_of(consumer)
            assert self.channel.finish(consumer, [m.id for m in owned]) == []
            self.finished.update(m.id for m in owned)
        drain = Consumer(3, ready=10_000)
        self.channel.add_client(drain)
        self.channel.process_queues(1 << 62)  # every deferral is over
        drained = [m.id for m in drain.received]
        assert len(drained) == len(set(drained)) and not set(drained) & self.finished
        assert set(drained) | self.finished == self.published

    @invariant()
    def in_flight_counts_agree(self):
        for consumer in self.consumers:
            assert consumer.in_flight_count == len(self._in_flight_of(consumer))

    @invariant()
    def attempts_only_grow(self):
        """C-12: every delivery of a message, from memory or from disk, has more attempts than the last."""
        last_attempts: dict[bytes, int] = {}
        deliveries = sorted((d for c in self.consumers for d in c.deliveries), key=lambda d: d[1])
        for message_id, attempts in deliveries:
            assert attempts > last_attempts.get(message_id, 0)
            last_attempts[message_id] = attempts


TestChannelModel = ChannelMachine.TestCase
