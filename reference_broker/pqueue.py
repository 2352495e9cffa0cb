"""The in-flight and deferred queues of a channel (nsqd/in_flight_pqueue.go, internal/pqueue).

A dict keyed by message ID (FIN/REQ/TOUCH look a message up in O(1)) plus a min-heap ordered by each
message's `pri` deadline, which only the queue-scan loop pops. Instead of nsqd's heap that stores each
message's index for O(log n) removal, removal here drops the message from the dict and leaves its heap
entry behind; the pop skips entries whose message left or got a new deadline. heapq's C sift is an order
of magnitude faster than a Python one, and this is the hot path of every FIN.
"""
from __future__ import annotations

import heapq
import itertools

from .message import Message

_COMPACT_MIN = 1024


class MessagePQueue:
    def __init__(self) -> None:
        self._by_id: dict[bytes, Message] = {}
        self._heap: list[tuple[int, int, Message]] = []
        self._order = itertools.count()  # breaks ties so two entries never compare their messages

    def __len__(self) -> int:
        return len(self._by_id)

    def __contains__(self, message_id: bytes) -> bool:
        return message_id in self._by_id

    def get(self, message_id: bytes) -> Message | None:
        return self._by_id.get(message_id)

    def push(self, message: Message) -> None:
        """Add `message` (or move it to its new `pri`, as TOUCH does)."""
        self._by_id[message.id] = message
        heapq.heappush(self._heap, (message.pri, next(self._order), message))
        if len(self._heap) > _COMPACT_MIN and len(self._heap) > 4 * len(self._by_id):
            self._compact()

    def remove(self, message_id: bytes) -> Message | None:
        return self._by_id.pop(message_id, None)

    def pop_due(self, now: int) -> list[Message]:
        """Every message whose deadline is <= now, earliest first (PeekAndShift in a loop)."""
        heap, by_id, due = self._heap, self._by_id, []
        while heap and heap[0][0] <= now:
            pri, _, message = heapq.heappop(heap)
            if by_id.get(message.id) is message and message.pri == pri:
                del by_id[message.id]
                due.append(message)
        return due

    def clear(self) -> list[Message]:
        messages = list(self._by_id.values())
        self._by_id.clear()
        self._heap.clear()
        return messages

    def messages(self):
        return self._by_id.values()

    def _compact(self) -> None:
        self._heap = [(m.pri, next(self._order), m) for m in self._by_id.values()]
        heapq.heapify(self._heap)
