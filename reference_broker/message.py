"""One message as a channel holds it (nsqd/message.go)."""
from __future__ import annotations


class Message:
    __slots__ = ("id", "body", "timestamp", "attempts", "deferred", "client_id", "delivery_ts", "pri")

    def __init__(self, message_id: bytes, body: bytes, timestamp: int, deferred: int = 0):
        self.id = message_id
        self.body = body
        self.timestamp = timestamp  # ns since the epoch, set at publish (C-09, D-34)
        self.attempts = 0  # raised on every delivery (C-12)
        self.deferred = deferred  # ns to wait in each channel's deferred queue (DPUB)
        self.client_id = 0  # the consumer that holds it in flight (D-10)
        self.delivery_ts = 0  # monotonic ns of the current delivery: TOUCH's cap (D-13)
        self.pri = 0  # monotonic ns deadline while in flight or deferred

    def copy(self) -> Message:
        """Each channel gets its own instance of a topic's message (D-35), same ID and timestamp (C-11)."""
        return Message(self.id, self.body, self.timestamp, self.deferred)
