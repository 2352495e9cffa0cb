"""A channel: its queue (memory, overflowing to a disk queue), its consumers, and the in-flight and deferred
bookkeeping (nsqd/channel.go).

Consumers share a channel's stream (D-35). nsqd's consumers each pull from a Go channel; here the channel
pushes: whenever a message arrives or a consumer gains room, `_dispatch` hands queued messages round-robin,
one at a time, to consumers with RDY room (D-01), marking each in flight before it leaves (D-16). It takes
from memory and disk in turn, as nsqd's consumers select on both. Nothing here writes to a socket: callers
request flushes once the lock is released, so a consumer that stopped reading stalls nobody.
"""
from __future__ import annotations

import collections
import logging
import random
import threading
import time
from typing import TYPE_CHECKING

from .diskqueue import DiskQueueError
from .message import Message, decode_message
from .pqueue import MessagePQueue
from .wire import is_ephemeral

if TYPE_CHECKING:
    from .client_v2 import ClientV2

log = logging.getLogger("nsqd")


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
        self.memory: collections.deque[Message] = collections.deque()
        # D-50/D-53: an ephemeral channel has no disk queue; what memory cannot hold is dropped.
        self.backend = None if self.ephemeral else nsqd.new_backend(f"{topic_name}:{name}")
        self._next_from_backend = False
        self.in_flight = MessagePQueue()
        self.deferred = MessagePQueue()
        self.clients: dict[int, ClientV2] = {}
        self._rotation = 0
        self.paused = False
        self.exiting = False
        self.message_count = 0
        self.requeue_count = 0
        self.timeout_count = 0
        self.global_msg_count = 0  # deliveries; nsqd master's name, with no topology match ever (H-STATS-08)

    # -- queue ------------------------------------------------------------------------------------------

    def put_messages(self, messages: list[Message]) -> None:
        """From the topic: count them (H-STATS-11), defer those that ask for it (D-30), queue the rest."""
        with self.lock:
            if self.exiting:
                return
            self.message_count += len(messages)
            now = time.monotonic_ns()
            queued = []
            for message in messages:
                if message.deferred:
                    message.pri = now + message.deferred
                    self.deferred.push(message)
                else:
                    queued.append(message)
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

    def _enqueue(self, messages: list[Message]) -> None:
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
            self.backend.put_many([m.encode() for m in overflow])
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

    def _next_queued(self) -> Message | None:
        """Memory and disk in turn while both hold messages, so neither waits behind the other (D-73)."""
        backend = self.backend
        if backend is not None and backend.depth and (self._next_from_backend or not self.memory):
            self._next_from_backend = False
            data = backend.get()
            if data is not None:
                try:
                    return decode_message(data)
                except ValueError as error:
                    log.error("failed to decode message - %s", error)
                    return self._next_queued()
        self._next_from_backend = True
        return self.memory.popleft() if self.memory else None

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
        batches: dict[ClientV2, list[Message]] = {c: [] for c in ready}
        room = {c: c.ready_room() for c in ready}
        in_flight = self.in_flight
        now = time.monotonic_ns()
        while ready and self.depth:
            for client in ready:
                message = self._next_queued()
                if message is None:
                    break
                # D-45: a sampled-out message leaves the channel for good.
                if client.pump_sample_rate and random.randrange(100) > client.pump_sample_rate:
                    continue
                message.attempts += 1  # C-12
                self.global_msg_count += 1
                message.client_id = client.id
                message.delivery_ts = now
                message.pri = now + client.pump_msg_timeout
                in_flight.push(message)
                batches[client].append(message)
                room[client] -= 1
            ready = [c for c in ready if room[c] > 0]
        return [client for client, batch in batches.items() if batch and client.buffer_messages(batch)]

    # -- FIN / REQ / TOUCH (P-FIN, P-REQ, P-TOUCH) ----------------------------------------------------

    def _pop_in_flight(self, client: ClientV2, message_id: bytes) -> Message:
        message = self.in_flight.get(message_id)
        if message is None:
            raise ChannelError("ID not in flight")
        if message.client_id != client.id:
            raise ChannelError("client does not own message")  # D-10, issue #729
        self.in_flight.remove(message_id)
        return message

    def finish(self, client: ClientV2, message_ids: list[bytes]) -> list[tuple[bytes, str]]:
        """FIN a batch of IDs read from one socket read; returns (id, reason) for each that failed."""
        failures = []
        with self.lock:
            for message_id in message_ids:
                try:
                    self._pop_in_flight(client, message_id)
                except ChannelError as error:
                    failures.append((message_id, str(error)))
                    continue
                client.in_flight_count -= 1
                client.finish_count += 1
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
                self.deferred.push(message)
            else:
                self._enqueue([message])
            flushes = self._dispatch()
        _request_flushes(flushes)

    def touch(self, client: ClientV2, message_id: bytes, msg_timeout: int) -> None:
        """D-13: now + msg_timeout, never past delivery + --max-msg-timeout."""
        with self.lock:
            message = self.in_flight.get(message_id)
            if message is None:
                raise ChannelError("ID not in flight")
            if message.client_id != client.id:
                raise ChannelError("client does not own message")
            deadline = time.monotonic_ns() + msg_timeout
            cap = message.delivery_ts + self._options.max_msg_timeout
            message.pri = min(deadline, cap)
            self.in_flight.push(message)

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
            self._enqueue(timed_out)  # D-22: back to the tail, like REQ 0
            self._enqueue(self.deferred.pop_due(now))
            flushes = self._dispatch()
        _request_flushes(flushes)

    # -- HTTP-driven operations (D-60..D-63) ---------------------------------------------------------

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
        if self.backend is not None:
            self.backend.delete()
        return clients

    def close(self) -> None:
        """Shutdown: queued, in-flight and deferred messages go to disk, in that order, so a restart delivers
        them all at once, in-flight ones with their attempts (D-70, P-RST-02, P-RST-03)."""
        with self.lock:
            self.exiting = True
            held = list(self.memory) + self.in_flight.clear() + self.deferred.clear()
            self.memory.clear()
        if self.backend is None:
            return
        if held:
            log.info("CHANNEL(%s): flushing %d messages to backend", self.name, len(held))
            try:
                self.backend.put_many([m.encode() for m in held])
            except DiskQueueError as error:
                log.error("failed to write message to backend - %s", error)
        self.backend.close()


def _request_flushes(clients) -> None:
    for client in clients:
        client.request_flush()
