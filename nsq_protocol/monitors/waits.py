"""What a monitor must look at again once a time has passed (a message's timeout, a REQ's delay), in the order of
(time, arrival), as a heap would give it; a run (events.Run) of message frames puts its messages in at once, as one
entry, rather than one heap push per message over a capture's millions."""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from heapq import heapify, heappop, heappush
from itertools import islice
from operator import le

from nsq_protocol.wire import MESSAGE_ID_SIZE


class RunKeys:
    """A run's message keys (ledger_runs.message_keys) held as what they share and their IDs, each key made when
    asked: a key tuple for each of a capture's millions of waits would take more memory than the rest. IDs of the
    wire's length are held as one string of them all."""

    __slots__ = ("shared", "ids", "width")

    def __init__(self, shared: tuple, msg_ids: list[str]):
        self.shared = shared
        fixed = all(len(msg_id) == MESSAGE_ID_SIZE for msg_id in msg_ids)
        self.ids, self.width = ("".join(msg_ids), MESSAGE_ID_SIZE) if fixed else (msg_ids, 0)

    def __len__(self) -> int:
        return len(self.ids) // self.width if self.width else len(self.ids)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return RunKeys(self.shared, [self._id(at) for at in range(len(self))[index]])
        return (*self.shared, self._id(index))

    def _id(self, index: int) -> str:
        return self.ids[index * self.width:(index + 1) * self.width] if self.width else self.ids[index]


class Waits:
    def __init__(self):
        # heap of (due, sequence, index, batch): a batch's next entry; a batch is (dues, sequences, keys, delivered
        # at), dues in time order
        self._heap: list = []
        self._sequence = 0

    def __bool__(self) -> bool:
        return bool(self._heap)

    @property
    def first(self) -> float:
        """The earliest due; inf when none waits."""
        return self._heap[0][0] if self._heap else float("inf")

    def add(self, dues: list[float], keys: Sequence, delivered: list[float]) -> None:
        """``keys`` (message keys: a list, or a run's ``RunKeys``, which it keeps), due at ``dues``, of the deliveries
        at ``delivered``: an entry for each stretch whose dues do not decrease (a run's, unless its times do). The
        times are kept as arrays: a capture's waits are every message delivered within a timeout."""
        dues, delivered = array("d", dues), array("d", delivered)
        sequences = range(self._sequence, self._sequence + len(dues))
        self._sequence += len(dues)
        if all(map(le, dues, islice(dues, 1, None))):
            heappush(self._heap, (dues[0], sequences[0], 0, (dues, sequences, keys, delivered)))
            return
        start = 0
        for end in [end for end in range(1, len(dues)) if dues[end] < dues[end - 1]] + [len(dues)]:
            batch = (dues[start:end], sequences[start:end], keys[start:end], delivered[start:end])
            heappush(self._heap, (dues[start], sequences[start], 0, batch))
            start = end

    def due_by(self, now: float):
        """(due, key, delivered at) of each entry due by ``now``, taken out, in the order of (due, arrival); what
        the caller adds meanwhile takes its place in that order."""
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, _, index, batch = heappop(heap)
            dues, sequences, keys, delivered = batch
            while True:
                yield dues[index], keys[index], delivered[index]
                index += 1
                if index == len(dues):
                    break
                if dues[index] > now or heap and heap[0][:2] < (dues[index], sequences[index]):
                    heappush(heap, (dues[index], sequences[index], index, batch))
                    break

    def keep(self, wanted) -> None:
        """Only the entries whose key is ``wanted`` (a predicate) wait on."""
        kept = []
        for _, _, index, (dues, sequences, keys, delivered) in self._heap:
            chosen = [at for at in range(index, len(dues)) if wanted(keys[at])]
            if chosen:
                batch = tuple([column[at] for at in chosen] for column in (dues, sequences, keys, delivered))
                kept.append((batch[0][0], batch[1][0], 0, batch))
        heapify(kept)
        self._heap = kept


def before_a_tick(ts: list[float], dues: list[float], due: float) -> int:
    """How many of a run's events (at ``ts``) come before one that comes once ``due`` (the monitor's, as the run
    starts) or a due of the events before it (``dues``) has passed: one by one, the monitor's tick would come
    before that event."""
    if max(islice(ts, 1, None), default=float("-inf")) < min(due, min(dues)):
        return len(ts)
    for index in range(1, len(ts)):
        due = min(due, dues[index - 1])
        if ts[index] >= due:
            return index
    return len(ts)
