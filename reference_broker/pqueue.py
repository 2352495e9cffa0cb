"""The in-flight and deferred queues of a channel (nsqd/in_flight_pqueue.go, internal/pqueue).

A dict keyed by message ID (FIN/REQ/TOUCH look a message up in O(1)) plus a min-heap ordered by the `pri`
deadline, which only the queue-scan loop pops. One heap entry holds the messages pushed together with one
deadline: a delivery's batch (one dispatch, one consumer, one msg_timeout), or a single TOUCHed or deferred
message. Instead of nsqd's heap that stores each message's index for O(log n) removal, removal here drops the
message from the dict and leaves it in its heap entry; the pop skips messages that left or got a new
deadline. heapq's C sift is an order of magnitude faster than a Python one, and this is the hot path of
every delivery and FIN.
"""
from __future__ import annotations

import heapq
import itertools

from .message import Message

_COMPACT_MIN = 1024


class MessagePQueue:
    def __init__(self) -> None:
        self._by_id: dict[bytes, Message] = {}
        self._heap: list[tuple[int, int, list[Message]]] = []
        self._heap_messages = 0  # messages held by heap entries, stale ones included
        self._order = itertools.count()  # breaks ties so two entries never compare their messages

    def __len__(self) -> int:
        return len(self._by_id)

    def __contains__(self, message_id: bytes) -> bool:
        return message_id in self._by_id

    def get(self, message_id: bytes) -> Message | None:
        return self._by_id.get(message_id)

    def push(self, messages: list[Message]) -> None:
        """Add messages that share one deadline, their `pri` (or move one to its new `pri`, as TOUCH does)."""
        self._by_id.update({message.id: message for message in messages})
        heapq.heappush(self._heap, (messages[0].pri, next(self._order), messages))
        self._heap_messages += len(messages)
        if self._heap_messages > _COMPACT_MIN and self._heap_messages > 4 * len(self._by_id):
            self._compact()

    def remove(self, message_id: bytes) -> Message | None:
        return self._by_id.pop(message_id, None)

    def remove_held(self, message_ids: list[bytes], client_id: int) -> list[tuple[bytes, Message | None]]:
        """Remove each of `message_ids` that `client_id` holds; returns the others, in order, each with the
        message another client holds, or None."""
        by_id, refused = self._by_id, []
        for message_id in message_ids:
            message = by_id.get(message_id)
            if message is not None and message.client_id == client_id:
                del by_id[message_id]
            else:
                refused.append((message_id, message))
        return refused

    def pop_due(self, now: int) -> list[Message]:
        """Every message whose deadline is <= now, earliest first (PeekAndShift in a loop)."""
        heap, by_id, due = self._heap, self._by_id, []
        while heap and heap[0][0] <= now:
            pri, _, messages = heapq.heappop(heap)
            self._heap_messages -= len(messages)
            for message in messages:
                if by_id.get(message.id) is message and message.pri == pri:
                    del by_id[message.id]
                    due.append(message)
        return due

    def clear(self) -> list[Message]:
        messages = list(self._by_id.values())
        self._by_id.clear()
        self._heap.clear()
        self._heap_messages = 0
        return messages

    def messages(self):
        return self._by_id.values()

    def _compact(self) -> None:
        """Drop the messages that left: one entry per deadline, in the order the messages arrived."""
        by_deadline: dict[int, list[Message]] = {}
        for message in self._by_id.values():
            by_deadline.setdefault(message.pri, []).append(message)
        self._heap = [(pri, next(self._order), messages) for pri, messages in by_deadline.items()]
        heapq.heapify(self._heap)
        self._heap_messages = len(self._by_id)
