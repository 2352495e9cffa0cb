"""nsqd-style message IDs (nsqd/guid.go, C-10): 64 bits rendered as 16 lowercase hex characters.

((UnixNano >> 20) - twepoch) << 22 | node_id << 12 | sequence. The time unit is a pseudo-millisecond of 2^20 ns;
each topic has its own factory, so IDs strictly increase within a topic (C-11). The sequence is the last 3 hex
characters, so the IDs of one pseudo-ms share their first 13: a batch is that prefix joined to each suffix.
"""
from __future__ import annotations

import threading
import time

_NODE_ID_BITS = 10
_SEQUENCE_BITS = 12
_SEQUENCE_LIMIT = 1 << _SEQUENCE_BITS
_TWEPOCH = 1288834974288
_SEQUENCE_HEX = [b"%03x" % sequence for sequence in range(_SEQUENCE_LIMIT)]


class GUIDFactory:
    def __init__(self, node_id: int):
        self._node_id = node_id
        self._last_timestamp = 0
        self._sequence = 0
        self._lock = threading.Lock()

    def new_ids(self, count: int) -> list[bytes]:
        """`count` fresh IDs in increasing order; waits for the next pseudo-ms when a sequence runs out."""
        ids: list[bytes] = []
        with self._lock:
            while len(ids) < count:
                timestamp = time.time_ns() >> 20
                if timestamp > self._last_timestamp:
                    self._last_timestamp, self._sequence = timestamp, 0
                elif self._sequence >= _SEQUENCE_LIMIT:
                    time.sleep(0.001)  # nsqd's GenerateID retries after ~1 ms (ErrSequenceExpired)
                    continue
                # A clock step backwards keeps using the last timestamp: IDs must never go backwards.
                prefix = b"%013x" % (((self._last_timestamp - _TWEPOCH) << _NODE_ID_BITS) | self._node_id)
                take = min(count - len(ids), _SEQUENCE_LIMIT - self._sequence)
                ids += [prefix + suffix for suffix in _SEQUENCE_HEX[self._sequence:self._sequence + take]]
                self._sequence += take
        return ids
