"""One message as a channel holds it, and its disk form (nsqd/message.go)."""
from __future__ import annotations

import struct

from .wire import MESSAGE_ID_LENGTH

_DISK_HEADER = struct.Struct(">qH")  # timestamp, attempts; then the 16-byte ID, then the body
MIN_VALID_MSG_LENGTH = _DISK_HEADER.size + MESSAGE_ID_LENGTH


class Message:
    __slots__ = ("id", "body", "timestamp", "attempts", "deferred", "client_id", "delivery_ts", "pri")

    def __init__(self, message_id: bytes, body: bytes, timestamp: int, deferred: int = 0, attempts: int = 0):
        self.id = message_id
        self.body = body
        self.timestamp = timestamp  # ns since the epoch, set at publish (C-09, D-34)
        self.attempts = attempts  # raised on every delivery (C-12)
        self.deferred = deferred  # ns to wait in each channel's deferred queue (DPUB)
        self.client_id = 0  # the consumer that holds it in flight (D-10)
        self.delivery_ts = 0  # monotonic ns of the current delivery: TOUCH's cap (D-13)
        self.pri = 0  # monotonic ns deadline while in flight or deferred

    def copy(self) -> Message:
        """Each channel gets its own instance of a topic's message (D-35), same ID and timestamp (C-11)."""
        return Message(self.id, self.body, self.timestamp, self.deferred)

    def encode(self) -> bytes:
        """The disk queue's record: what survives a restart is ID, timestamp, attempts and body; a
        deferral does not (D-32, P-RST-03)."""
        return _DISK_HEADER.pack(self.timestamp, self.attempts & 0xFFFF) + self.id + self.body


def decode_message(data: bytes) -> Message:
    if len(data) < MIN_VALID_MSG_LENGTH:
        raise ValueError(f"invalid message buffer size ({len(data)})")
    timestamp, attempts = _DISK_HEADER.unpack_from(data)
    return Message(data[10:MIN_VALID_MSG_LENGTH], data[MIN_VALID_MSG_LENGTH:], timestamp, attempts=attempts)
