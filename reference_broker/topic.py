"""A topic: fan-out of every message to each of its channels (nsqd/topic.go).

nsqd's topic pump copies messages to channels in a goroutine; here the publishing thread does it under the
topic lock, which keeps per-publisher order and saves a thread hop. A topic with no channels, or a paused
one, holds its messages until that changes (D-36, D-61).
"""
from __future__ import annotations

import collections
import threading
import time

from .channel import Channel
from .guid import GUIDFactory
from .message import Message
from .wire import is_ephemeral


class Topic:
    def __init__(self, name: str, options, on_last_channel_deleted):
        self.name = name
        self.ephemeral = is_ephemeral(name)
        self._options = options
        self._on_last_channel_deleted = on_last_channel_deleted
        self._guids = GUIDFactory(options.node_id)
        self.lock = threading.RLock()
        self.channels: dict[str, Channel] = {}
        self.memory: collections.deque[Message] = collections.deque()
        self.backend: collections.deque[Message] = collections.deque()
        self.paused = False
        self.exiting = False
        self.message_count = 0
        self.message_bytes = 0

    def new_messages(self, bodies: list[bytes], deferred: int = 0) -> list[Message]:
        timestamp = time.time_ns()
        return [Message(message_id, body, timestamp, deferred)
                for message_id, body in zip(self._guids.new_ids(len(bodies)), bodies, strict=False)]

    def put_messages(self, messages: list[Message]) -> None:
        with self.lock:
            if self.exiting:
                raise TopicExiting("exiting")
            self.message_count += len(messages)
            self.message_bytes += sum(len(m.body) for m in messages)
            if self.paused or not self.channels:
                for message in messages:
                    self._hold(message)
            else:
                self._fan_out(messages)

    def _hold(self, message: Message) -> None:
        if len(self.memory) < self._options.mem_queue_size:
            self.memory.append(message)
        elif not self.ephemeral:  # D-53: an ephemeral topic drops its overflow
            message.deferred = 0  # D-32: deferral does not survive the disk queue
            self.backend.append(message)

    def _fan_out(self, messages: list[Message]) -> None:
        """D-35: every channel gets its own copy, same ID and timestamp (C-11)."""
        for index, channel in enumerate(list(self.channels.values())):
            channel.put_messages(messages if index == 0 else [m.copy() for m in messages])

    def _release_held(self) -> None:
        """D-36/D-31: held messages flow to the channels that exist now; deferral starts from here."""
        if self.paused or not self.channels or not (self.memory or self.backend):
            return
        held = list(self.memory) + list(self.backend)
        self.memory.clear()
        self.backend.clear()
        self._fan_out(held)

    @property
    def depth(self) -> int:
        return len(self.memory) + len(self.backend)

    # -- channels ---------------------------------------------------------------------------------------

    def get_channel(self, name: str) -> Channel:
        """Get or create (SUB and /channel/create both create, P-SUB-08)."""
        with self.lock:
            channel = self.channels.get(name)
            if channel is None:
                channel = Channel(self.name, name, self._options, is_ephemeral(name), self._channel_emptied)
                self.channels[name] = channel
                self._release_held()
            return channel

    def _channel_emptied(self, channel: Channel) -> None:
        self.delete_channel(channel.name)

    def delete_channel(self, name: str) -> bool:
        """D-62: its consumers are disconnected; D-52: an ephemeral topic goes with its last channel."""
        with self.lock:
            channel = self.channels.pop(name, None)
            if channel is None:
                return False
            last = not self.channels
        for client in channel.close():
            client.close_connection()
        if last and self.ephemeral:
            self._on_last_channel_deleted(self)
        return True

    # -- HTTP-driven operations ------------------------------------------------------------------------

    def set_paused(self, paused: bool) -> None:
        with self.lock:
            self.paused = paused
            self._release_held()

    def empty(self) -> None:
        """D-64: only what the topic still holds itself."""
        with self.lock:
            self.memory.clear()
            self.backend.clear()

    def close(self) -> None:
        with self.lock:
            self.exiting = True
            channels = list(self.channels.values())
            self.channels.clear()
            self.memory.clear()
            self.backend.clear()
        for channel in channels:
            for client in channel.close():
                client.close_connection()


class TopicExiting(Exception):
    pass
