"""A topic: its queue (memory, overflowing to a disk queue) and the pump that copies every message to each
of its channels (nsqd/topic.go).

Publishers only queue and return: the OK never waits for fan-out, and no publisher holds a channel's lock.
The pump moves messages to the channels while there are channels and the topic is not paused; until then
they stay here (D-36, D-61). A turn of the pump runs on the pump's thread, or on the publisher's (`hand_over`):
right after a TCP publisher's OK went out, before an HTTP publisher's OK. Go runs the goroutine a send woke next
on the sender's processor, so nsqd's fan-out follows its OK at once, where a woken Python thread may wait for the
GIL or the OS, and a client that saw the OK would find its message still in the topic (an empty channel, a
stats count); an HTTP client's next request comes on another connection, served by another thread, so its
publish's turn must be over before it sees the OK.
As in nsqd, the pump takes from memory and disk in turn, so once both are in use the publish order is not kept (D-73).
"""
from __future__ import annotations

import collections
import itertools
import logging
import operator
import threading
import time

from .channel import Channel
from .diskqueue import DiskQueueError
from .guid import GUIDFactory
from .message import BODY, DEFERRED, decode_many, encode_many
from .wire import is_ephemeral

log = logging.getLogger("nsqd")

# Messages the pump moves per turn, from memory and from disk each. Each turn ends in I/O that lets go of the
# GIL (a disk write, a socket flush), and getting it back can take a switch interval (5 ms) while publishers
# run: a small turn starves the pump, the topic's memory fills and every further message takes the detour
# through the topic's disk queue.
_PUMP_BATCH = 4096
_body = operator.itemgetter(BODY)


class PutError(Exception):
    """The text after `PUB failed `: the topic is exiting, or its disk queue refused the write."""


class Topic:
    def __init__(self, nsqd, name: str):
        self.name = name
        self.ephemeral = is_ephemeral(name)
        self._nsqd = nsqd
        self._options = nsqd.options
        self._guids = GUIDFactory(self._options.node_id)
        self.lock = threading.RLock()
        self._changed = threading.Condition(self.lock)
        self._turn_lock = threading.Lock()  # one pump turn at a time: every channel gets the queue's order
        self.channels: dict[str, Channel] = {}
        self.memory: collections.deque[tuple] = collections.deque()  # queued messages (message.py)
        # D-50/D-53: an ephemeral topic has no disk queue; what memory cannot hold is dropped.
        self.backend = None if self.ephemeral else nsqd.new_backend(name)
        self.paused = False
        self.exiting = False
        self._started = False  # loading metadata creates every channel before anything flows
        self.message_count = 0
        self.message_bytes = 0
        self._pump = threading.Thread(target=self._message_pump, name=f"topic-{name}", daemon=True)
        self._pump.start()

    def start(self) -> None:
        with self.lock:
            self._started = True
            self._changed.notify()

    # -- publishing ---------------------------------------------------------------------------------------

    def new_messages(self, bodies: list[bytes], deferred: int = 0) -> list[tuple]:
        """Queued messages (message.py) with fresh IDs, one timestamp and one deferral for the batch."""
        repeat = itertools.repeat
        return list(zip(repeat(time.time_ns()), repeat(0), self._guids.new_ids(len(bodies)), bodies,
                        repeat(deferred), strict=False))

    def put_messages(self, messages: list[tuple]) -> None:
        with self.lock:
            if self.exiting:
                raise PutError("exiting")
            room = max(self._memory_room(), 0)
            held, overflow = messages[:room], messages[room:]
            if overflow and self._options.mem_queue_size == 0 and self._flowing():
                # nsqd's --mem-queue-size=0 sends plain messages straight to disk, but a deferred one keeps
                # its deferral by going through memory when the pump can take it now (D-32, D-74).
                held += [m for m in overflow if m[DEFERRED]]
                overflow = [m for m in overflow if not m[DEFERRED]]
            self.memory.extend(held)
            if overflow and self.backend is not None:
                try:
                    self.backend.put_many(encode_many(overflow))  # D-32: a deferral is lost on disk
                    self._nsqd.set_health(None)
                except DiskQueueError as error:
                    self._nsqd.set_health(error)
                    log.error("TOPIC(%s) ERROR: failed to write message to backend - %s", self.name, error)
                    raise PutError(str(error)) from None
            self.message_count += len(messages)  # D-53: counted even when an ephemeral topic drops them
            self.message_bytes += sum(map(len, map(_body, messages)))
            self._changed.notify()

    def _memory_room(self) -> int:
        limit = self._options.mem_queue_size
        if limit == 0 and self.ephemeral and self._flowing():
            limit = _PUMP_BATCH  # an unbuffered hand-over to a waiting pump, in nsqd
        return limit - len(self.memory)

    @property
    def depth(self) -> int:
        return len(self.memory) + self.backend_depth

    @property
    def backend_depth(self) -> int:
        return self.backend.depth if self.backend is not None else 0

    # -- the message pump ---------------------------------------------------------------------------------

    def _flowing(self) -> bool:
        return self._started and bool(self.channels) and not self.paused

    def _message_pump(self) -> None:
        while True:
            with self.lock:
                while not self.exiting and not self._has_work():
                    self._changed.wait()
                if self.exiting:
                    return
            with self._turn_lock:
                self._pump_turn()

    def hand_over(self) -> None:
        """A pump turn on the publisher's thread, after the pump's current turn if it is in one (which may have
        taken the queue before this publisher's messages): once it returns, they are in the channels."""
        with self._turn_lock:
            if self._has_work():
                self._pump_turn()

    def _has_work(self) -> bool:
        return self._flowing() and bool(self.memory or self.backend_depth)

    def _pump_turn(self) -> None:
        """Under the turn lock: up to a batch from memory and one from disk, to every channel."""
        with self.lock:
            if self.exiting or not self._has_work():
                return
            memory = self.memory
            if len(memory) <= _PUMP_BATCH:
                batch = list(memory)
                memory.clear()
            else:
                batch = [memory.popleft() for _ in range(_PUMP_BATCH)]
            channels = list(self.channels.values())
        if self.backend is not None:
            batch += decode_many(self.backend.get_many(_PUMP_BATCH))
        for channel in channels:
            # D-35: each channel queues every message; queued messages are immutable, so they share them.
            channel.put_messages(batch)

    # -- channels ---------------------------------------------------------------------------------------

    def get_channel(self, name: str) -> Channel:
        """Get or create (SUB and /channel/create both create, P-SUB-08)."""
        with self.lock:
            channel = self.channels.get(name)
            if channel is not None:
                return channel
            channel = Channel(self.name, name, self._nsqd, self._channel_emptied)
            self.channels[name] = channel
            self._changed.notify()
        log.info("TOPIC(%s): new channel(%s)", self.name, name)
        self._nsqd.lookup.notify(channel)
        if not channel.ephemeral:
            self._nsqd.persist_metadata()  # D-71
        return channel

    def _channel_emptied(self, channel: Channel) -> None:
        """D-50: the last consumer of an ephemeral channel left."""
        self.delete_channel(channel.name)

    def delete_channel(self, name: str) -> bool:
        """D-62: its consumers are disconnected; D-52: an ephemeral topic goes with its last channel."""
        with self.lock:
            channel = self.channels.pop(name, None)
            if channel is None:
                return False
            last = not self.channels
        for client in channel.delete():
            client.close_connection()
        if not channel.ephemeral:
            self._nsqd.persist_metadata()
        if last and self.ephemeral:
            self._nsqd.topic_emptied(self)
        return True

    # -- HTTP-driven operations ------------------------------------------------------------------------

    def set_paused(self, paused: bool) -> None:
        with self.lock:
            self.paused = paused
            self._changed.notify()

    def empty(self) -> None:
        """D-64: only what the topic still holds itself."""
        with self.lock:
            self.memory.clear()
            if self.backend is not None:
                self.backend.empty()

    # -- the end ----------------------------------------------------------------------------------------

    def _stop_pump(self) -> list[Channel]:
        with self.lock:
            self.exiting = True
            self._changed.notify()
        self._pump.join()
        with self._turn_lock, self.lock:  # a publisher's turn, begun before `exiting`, ends first
            return list(self.channels.values())

    def delete(self) -> None:
        """Topic deletion: every channel deleted, every message dropped, files removed."""
        channels = self._stop_pump()
        self._nsqd.lookup.notify(self)  # UNREGISTER (only deletion, not shutdown, tells lookupd)
        with self.lock:
            self.channels.clear()
            self.memory.clear()
        for channel in channels:
            for client in channel.delete():
                client.close_connection()
        if self.backend is not None:
            self.backend.delete()

    def close(self) -> None:
        """Shutdown: channels write what they hold to disk, then the topic does, a topic without channels too (D-70,
        P-RST-01, P-RST-12)."""
        for channel in self._stop_pump():
            channel.close()
        with self.lock:
            held, self.memory = list(self.memory), collections.deque()
        if self.backend is None:
            return
        if held:
            log.info("TOPIC(%s): flushing %d memory messages to backend", self.name, len(held))
        self.backend.close(encode_many(held))
