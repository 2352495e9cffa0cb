"""A channel: its queue (memory, overflowing to a disk queue), its consumers, and the in-flight and deferred
bookkeeping (nsqd/channel.go).

Consumers share a channel's stream (D-35). nsqd's consumers each pull from a Go channel; here the channel
pushes: whenever a message arrives or a consumer gains room, `_dispatch` takes as many queued messages as the
consumers have RDY room for, deals them round-robin, one at a time, to consumers with room (D-01), and marks
each in flight before it leaves (D-16). It takes from memory and disk in turn, as nsqd's consumers select on
both. Nothing here writes to a socket: callers request flushes once the lock is released, so a consumer that
stopped reading stalls nobody.
"""
from __future__ import annotations

import collections
import logging
import operator
import random
import threading
import time
from typing import TYPE_CHECKING

from .diskqueue import DiskQueueError
from .message import DEFERRED, Message, decode_many, encode_many
from .pqueue import MessagePQueue
from .wire import is_ephemeral

if TYPE_CHECKING:
    from .client_v2 import ClientV2

log = logging.getLogger("nsqd")

_deferral = operator.itemgetter(DEFERRED)


class ChannelError(Exception):
    """The text after `FIN <id> failed ` (D-10, D-12)."""


class ChannelFullError(Exception):
    """--max-channel-consumers reached (P-SUB-06)."""


class Channel:
    def __init__(self, topic_name: str, name: str, nsqd, on_last_client_left):
        self.topic_name = topic_name
        self.name = name
        self.ephemeral = is_ephemeral(name)
        self._nsqd = nsqd
        self._options = nsqd.options
        self._on_last_client_left = on_last_client_left
        self.lock = threading.Lock()
        self.memory: collections.deque[tuple] = collections.deque()  # queued messages (message.py)
        # D-50/D-53: an ephemeral channel has no disk queue; what memory cannot hold is dropped.
        self.backend = None if self.ephemeral else nsqd.new_backend(f"{topic_name}:{name}")
        self._next_from_backend = False
        self.in_flight = MessagePQueue()
        self.deferred = MessagePQueue()
        self.clients: dict[int, ClientV2] = {}
        self._rotation = 0
        self.paused = False
        self.exiting = False
        self.message_count = 0  # P-RST-13: from zero at every start, restored messages not counted
        self.requeue_count = 0
        self.timeout_count = 0
        self.global_msg_count = 0  # deliveries; nsqd master's name, with no topology match ever (H-STATS-08)

    # -- queue ------------------------------------------------------------------------------------------

    def put_messages(self, messages: list[tuple]) -> None:
        """From the topic: count them (H-STATS-11), defer those that ask for it (D-30), queue the rest."""
        with self.lock:
            if self.exiting:
                return
            self.message_count += len(messages)
            queued = messages
            if any(map(_deferral, messages)):
                now = time.monotonic_ns()
                for timestamp, attempts, message_id, body, deferred in messages:
                    if deferred:
                        self.deferred.push([Message(timestamp, attempts, message_id, body, pri=now + deferred)])
                queued = [m for m in messages if not m[DEFERRED]]
            if self._spills(len(queued)) and any(c.ready_room() > 0 for c in self.clients.values()):
                # nsqd's topic pump hands over one message at a time and a ready consumer takes each from
                # the disk queue before the next is written; which files end up `*.bad` depends on it (D-76).
                flushes = set()
                for message in queued:
                    self._enqueue([message])
                    flushes.update(self._dispatch())
            else:
                self._enqueue(queued)
                flushes = self._dispatch()
        _request_flushes(flushes)

    def _spills(self, count: int) -> bool:
        return self.backend is not None and len(self.memory) + count > self._options.mem_queue_size

    def _enqueue(self, messages: list[tuple]) -> None:
        """Memory while it has room, then disk (D-70); an ephemeral channel drops the rest (D-53)."""
        room = self._options.mem_queue_size - len(self.memory)
        if self.ephemeral and self._options.mem_queue_size == 0:
            # D-74: nsqd's unbuffered hand-over succeeds only while a consumer is ready for it.
            room = sum(max(client.ready_room(), 0) for client in self.clients.values()) - len(self.memory)
        self.memory.extend(messages[:max(room, 0)])
        overflow = messages[max(room, 0):]
        if not overflow or self.backend is None:
            return
        try:
            self.backend.put_many(encode_many(overflow))
            self._nsqd.set_health(None)
        except DiskQueueError as error:
            self._nsqd.set_health(error)
            log.error("CHANNEL(%s): failed to write message to backend - %s", self.name, error)

    @property
    def depth(self) -> int:
        return len(self.memory) + self.backend_depth

    @property
    def backend_depth(self) -> int:
        return self.backend.depth if self.backend is not None else 0

    def _take_queued(self, count: int) -> list[tuple]:
        """Up to `count` queued messages: memory and disk in turn while both hold messages, so neither waits
        behind the other (D-73); from one of them alone, as many as it has."""
        memory, backend, taken = self.memory, self.backend, []
        while len(taken) < count:
            on_disk = backend.depth if backend is not None else 0
            if on_disk and (self._next_from_backend or not memory):
                self._next_from_backend = False
                records = backend.get_many(1 if memory else count - len(taken))
                if records:
                    taken += decode_many(records)
                    continue
            self._next_from_backend = True
            if not memory:
                break
            taken += [memory.popleft() for _ in range(1 if on_disk else min(count - len(taken), len(memory)))]
        return taken

    # -- consumers --------------------------------------------------------------------------------------

    def add_client(self, client: ClientV2) -> None:
        with self.lock:
            if self.exiting:
                raise ChannelError("exiting")
            limit = self._options.max_channel_consumers
            if client.id not in self.clients and limit and len(self.clients) >= limit:
                raise ChannelFullError(
                    f"consumers for {self.topic_name}:{self.name} exceeds limit of {limit}")
            self.clients[client.id] = client

    def remove_client(self, client: ClientV2) -> None:
        """D-15: its in-flight messages stay in flight until they time out. D-50: the last consumer of an
        ephemeral channel takes the channel with it."""
        with self.lock:
            if self.exiting or self.clients.pop(client.id, None) is None:
                return
            last = not self.clients
        if last and self.ephemeral:
            self._on_last_client_left(self)

    def client_ready_changed(self) -> None:
        """RDY raised, or room freed outside FIN/REQ: see if anything can go out now."""
        with self.lock:
            flushes = self._dispatch()
        _request_flushes(flushes)

    def _dispatch(self) -> list[ClientV2]:
        """Hand queued messages to consumers with room; the caller holds the lock. Returns the consumers
        whose buffers must be flushed now: those that became not-ready or whose buffer filled (D-40)."""
        if self.paused or not self.depth:
            return []
        ready = [c for c in self.clients.values() if c.ready_room() > 0]
        if not ready:
            return []
        start = self._rotation % len(ready)
        self._rotation += 1
        ready = ready[start:] + ready[:start]
        rooms = [c.ready_room() for c in ready]
        shares: list[list[tuple]] = [[] for _ in ready]
        while any(rooms) and (queued := self._take_queued(sum(rooms))):
            for index, dealt in enumerate(_deal(queued, rooms)):
                sample_rate = ready[index].pump_sample_rate
                if sample_rate:  # D-45: a sampled-out message leaves the channel for good
                    kept = [m for m in dealt if random.randrange(100) <= sample_rate]
                    rooms[index] += len(dealt) - len(kept)
                    dealt = kept
                shares[index] += dealt
        now = time.monotonic_ns()
        flushes = []
        for client, share in zip(ready, shares, strict=True):
            if not share:
                continue
            pri = now + client.pump_msg_timeout
            messages = [Message(timestamp, attempts + 1, message_id, body, client.id, now, pri)  # C-12
                        for timestamp, attempts, message_id, body, _ in share]
            self.in_flight.push(messages)
            self.global_msg_count += len(messages)
            if client.buffer_messages(messages):
                flushes.append(client)
        return flushes

    # -- FIN / REQ / TOUCH (P-FIN, P-REQ, P-TOUCH) ----------------------------------------------------

    def _pop_in_flight(self, client: ClientV2, message_id: bytes) -> Message:
        message = _held_by(client, self.in_flight.get(message_id))
        self.in_flight.remove(message_id)
        return message

    def finish(self, client: ClientV2, message_ids: list[bytes]) -> list[tuple[bytes, str]]:
        """FIN a batch of IDs read from one socket read; returns (id, reason) for each that failed."""
        failures = []
        with self.lock:
            for message_id, holder in self.in_flight.remove_held(message_ids, client.id):
                try:
                    _held_by(client, holder)
                except ChannelError as error:
                    failures.append((message_id, str(error)))
            finished = len(message_ids) - len(failures)
            client.in_flight_count -= finished
            client.finish_count += finished
            flushes = self._dispatch()
        _request_flushes(flushes)
        return failures

    def requeue(self, client: ClientV2, message_id: bytes, delay: int) -> None:
        """D-20: delay 0 goes to the tail of the queue; D-21: later ones wait in the deferred queue."""
        with self.lock:
            message = self._pop_in_flight(client, message_id)
            client.in_flight_count -= 1
            client.requeue_count += 1
            self.requeue_count += 1
            if self.exiting:
                raise ChannelError("exiting")
            if delay:
                message.pri = time.monotonic_ns() + delay
                self.deferred.push([message])
            else:
                self._enqueue([message.queued()])
            flushes = self._dispatch()
        _request_flushes(flushes)

    def touch(self, client: ClientV2, message_id: bytes, msg_timeout: int) -> None:
        """D-13: now + msg_timeout, never past delivery + --max-msg-timeout."""
        with self.lock:
            message = _held_by(client, self.in_flight.get(message_id))
            deadline = time.monotonic_ns() + msg_timeout
            cap = message.delivery_ts + self._options.max_msg_timeout
            message.pri = min(deadline, cap)
            self.in_flight.push([message])

    # -- the queue-scan loop's work (D-11, D-14, D-21, D-22) -------------------------------------------

    def process_queues(self, now: int) -> None:
        with self.lock:
            if self.exiting:
                return
            timed_out = self.in_flight.pop_due(now)
            for message in timed_out:
                self.timeout_count += 1
                client = self.clients.get(message.client_id)
                if client is not None:
                    client.in_flight_count -= 1
            self._enqueue([m.queued() for m in timed_out])  # D-22: back to the tail, like REQ 0
            self._enqueue([m.queued() for m in self.deferred.pop_due(now)])
            flushes = self._dispatch()
        _request_flushes(flushes)

    # -- HTTP-driven operations (D-60, D-61, D-62, D-63) ---------------------------------------------------------

    def set_paused(self, paused: bool) -> None:
        with self.lock:
            self.paused = paused
            flushes = self._dispatch()
        _request_flushes(flushes)

    def empty(self) -> None:
        """D-63: drop queued, in-flight and deferred messages; every consumer's in-flight count is reset."""
        with self.lock:
            self.memory.clear()
            if self.backend is not None:
                self.backend.empty()
            self.in_flight.clear()
            self.deferred.clear()
            for client in self.clients.values():
                client.in_flight_count = 0
            flushes = self._dispatch()
        _request_flushes(flushes)

    def delete(self) -> list[ClientV2]:
        """Deletion: drop every message and the files; returns the consumers, whose connections the caller
        closes (D-62)."""
        with self.lock:
            self.exiting = True
            clients = list(self.clients.values())
            self.memory.clear()
            self.in_flight.clear()
            self.deferred.clear()
        # UNREGISTER (only deletion, not shutdown, tells lookupd)
        self._nsqd.lookup.notify(self)
        if self.backend is not None:
            self.backend.delete()
        return clients

    def close(self) -> None:
        """Shutdown: queued, in-flight and deferred messages go to disk, in that order, so a restart delivers
        them all at once, in-flight ones with their attempts (D-70, P-RST-02, P-RST-03)."""
        with self.lock:
            self.exiting = True
            held = list(self.memory) + [m.queued() for m in self.in_flight.clear() + self.deferred.clear()]
            self.memory.clear()
        if self.backend is None:
            return
        if held:
            log.info("CHANNEL(%s): flushing %d messages to backend", self.name, len(held))
        self.backend.close(encode_many(held))


def _held_by(client: ClientV2, message: Message | None) -> Message:
    """The in-flight message, if it is `client`'s: else nothing is in flight under its ID, or another consumer
    holds it (D-10, issue #729)."""
    if message is None:
        raise ChannelError("ID not in flight")
    if message.client_id != client.id:
        raise ChannelError("client does not own message")
    return message


def _deal(messages: list[tuple], rooms: list[int]) -> list[list[tuple]]:
    """Round-robin, one message at a time, to each consumer with room left, taking from `rooms` (D-01): while
    all k of them have room, the i-th gets messages[i::k]."""
    shares: list[list[tuple]] = [[] for _ in rooms]
    active = [index for index, room in enumerate(rooms) if room > 0]
    start = 0
    while active and start < len(messages):
        width = len(active)
        rounds = max(min(min(rooms[i] for i in active), (len(messages) - start) // width), 1)
        end = min(start + rounds * width, len(messages))
        for offset, index in enumerate(active):
            dealt = messages[start + offset:end:width]
            shares[index] += dealt
            rooms[index] -= len(dealt)
        start = end
        active = [index for index in active if rooms[index] > 0]
    return shares


def _request_flushes(clients) -> None:
    for client in clients:
        client.request_flush()
