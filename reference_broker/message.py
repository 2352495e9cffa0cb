"""A message: queued as a plain tuple, in flight or deferred as a `Message`, and its disk form (nsqd/message.go).

A queued message is the tuple `(timestamp, attempts, id, body, deferred)`, in the order of its wire and disk
form. Topics and channels hold up to --mem-queue-size of them each (a million in a deep backlog), and CPython's
cyclic garbage collector stops tracking a tuple that holds only bytes and ints, while it would walk every
instance of a class on each full collection (and /stats' heap_objects counts them). A `Message` is made only
when a consumer takes a message, for the bookkeeping a delivery needs (owner, deadline), and goes back into
a queue as a tuple.
"""
from __future__ import annotations

import logging
import struct

from .wire import MESSAGE_ID_LENGTH

log = logging.getLogger("nsqd")

TIMESTAMP, ATTEMPTS, ID, BODY, DEFERRED = range(5)  # the fields of a queued message

_DISK_HEADER = struct.Struct(">qH%ds" % MESSAGE_ID_LENGTH)  # timestamp, attempts, ID; then the body
MIN_VALID_MSG_LENGTH = _DISK_HEADER.size


class Message:
    """A message in flight to a consumer, or waiting in a channel's deferred queue."""

    __slots__ = ("timestamp", "attempts", "id", "body", "client_id", "delivery_ts", "pri")

    def __init__(self, timestamp: int, attempts: int, message_id: bytes, body: bytes, client_id: int = 0,
                 delivery_ts: int = 0, pri: int = 0):
        self.timestamp = timestamp  # ns since the epoch, set at publish (C-09, D-34)
        self.attempts = attempts  # raised on every delivery (C-12)
        self.id = message_id
        self.body = body
        self.client_id = client_id  # the consumer that holds it in flight (D-10)
        self.delivery_ts = delivery_ts  # monotonic ns of the current delivery: TOUCH's cap (D-13)
        self.pri = pri  # monotonic ns deadline while in flight or deferred

    def queued(self) -> tuple:
        """Back to a queue (REQ, timeout, a deferral's end, shutdown): same ID, timestamp and attempts."""
        return self.timestamp, self.attempts, self.id, self.body, 0


def encode_many(messages) -> list[bytes]:
    """The disk queue's records: what survives a restart is ID, timestamp, attempts and body; a deferral does
    not (D-32, P-RST-03)."""
    pack = _DISK_HEADER.pack
    return [pack(timestamp, attempts & 0xFFFF, message_id) + body
            for timestamp, attempts, message_id, body, _ in messages]


def decode_many(records: list[bytes]) -> list[tuple]:
    """Disk records as queued messages; one too short to be a message is logged and dropped, as nsqd does."""
    unpack = _DISK_HEADER.unpack_from
    messages = []
    for data in records:
        if len(data) < MIN_VALID_MSG_LENGTH:
            log.error("failed to decode message - invalid message buffer size (%d)", len(data))
            continue
        messages.append((*unpack(data), data[MIN_VALID_MSG_LENGTH:], 0))
    return messages
