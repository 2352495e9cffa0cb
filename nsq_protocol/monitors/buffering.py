"""Output buffering (D-40, ID-04): nsqd buffers message frames, but flushes at once when a message fills the client's
RDY window (its pump stops being ready) and writes straight through with output_buffer_size -1. Such a message is on
the wire as soon as the broker could send it: once it was published (its PUB or MPUB answered OK) and the client had
room for it (its last command or frame before it)."""

from __future__ import annotations

from collections import Counter
from itertools import islice, repeat
from typing import NamedTuple

from nsq_protocol.monitors.connection import MIN_MSG_TIMEOUT_MS
from nsq_protocol.monitors.events import BROKER, COMMAND, FINS, LET_GO, MESSAGE, MESSAGES
from nsq_protocol.monitors.judge import buffered_margin
from nsq_protocol.monitors.monitor import Monitor

FLUSH_S = 0.2  # the broker's own latency between a message ready to go and the wire; its buffer ticker is 250 ms
UNBUFFERED = -1  # ID-04: a 1-byte buffer, every write straight to the socket


class FlushedAtOnce(Monitor):
    """D-40: a message that fills the RDY window is flushed at once; ID-04: with output_buffer_size -1 every message
    is. Judged for a first delivery of a body published once, by PUB or MPUB answered OK, to the only consumer of
    its channel, with no compression layer (which buffers on its own) and every connection and HTTP request of the
    nsqd in the traffic (no publish, consumer or pause unseen)."""

    ITEMS = ("D-40", "ID-04")
    RUNS = frozenset({MESSAGES, FINS})

    def __init__(self):
        super().__init__()
        self._published: dict[tuple, float] = {}  # (topic, body hash) -> when its publish was answered OK
        self._again: set[tuple] = set()  # (topic, body hash) published more than once
        self._elsewhere: set[tuple] = set()  # (topic, body hash) also published by DPUB or over HTTP
        self._paused_until: dict[tuple, float] = {}  # (topic,) or (topic, channel) -> its last pause or unpause
        self._last_event: dict[str, float] = {}  # connection -> its latest event
        self._known_since = 0.0  # publishes before it were let go of (judge.MESSAGES_KEPT)

    def observe(self, judge, connection, event, answered):
        before = self._last_event.get(connection.name)
        self._last_event[connection.name] = event.ts
        if event.kind == COMMAND and event.name == "DPUB":
            self._elsewhere.update((event.topic, body) for body in event.bodies)
        elif answered is not None and answered.name in ("PUB", "MPUB") and event.name == "OK":
            self._published_at(answered.topic, answered.bodies, event.ts)
        elif event.kind == MESSAGE and event.attempts == 1 and event.bodies and judge.timing and before is not None:
            self._delivered(judge, connection, event, before, connection.in_flight)

    def observe_run(self, judge, connection, run):
        before = self._last_event.get(connection.name)
        self._last_event[connection.name] = run.ts[-1]
        if run.key == FINS or not judge.timing:
            return
        # the messages in flight at each of the run's: those before it, and as many as its earlier ones at most
        held, rdy = len(connection.in_flight), connection.rdy or 0
        if _asked_unbuffered(connection) or held <= rdy <= held + len(run.ts):
            self._run_delivered(judge, connection, run, before)
        elif self._known_since:  # none fills the window: what is left is whether its publish was let go of
            self._let_go_of(run, before)

    def _let_go_of(self, run, before):
        """D-40 not judged on each first delivery of the run's published before the judge let go (as _delivered)."""
        let_go, stamps = self._known_since * 1e9 + 1e9, run.msg_ts_ns
        if None not in stamps and min(stamps) >= let_go:
            return  # all published since
        first = 0 if before is not None else 1
        for attempts, stamp in islice(zip(run.attempts, stamps, strict=True), first, None):
            if attempts == 1 and (stamp is None or stamp < let_go):
                self.skip("D-40", LET_GO)

    def _run_delivered(self, judge, connection, run, before):
        """The run's messages one by one, each with the connection's messages in flight as the ledger will hold
        them then: those before the run, the run's earlier ones in place of theirs. Of those only the earliest the
        broker may have timed one out is read, as the ledger sets it."""
        in_flight = dict(connection.in_flight)
        timeout_s = (connection.msg_timeout_ms or MIN_MSG_TIMEOUT_MS) / 1000
        margin = buffered_margin(connection)
        for event in run.events():
            if event.attempts == 1 and before is not None:
                self._delivered(judge, connection, event, before, in_flight)
            in_flight.pop(event.msg_id, None)
            in_flight[event.msg_id] = _Timeout(event.ts + timeout_s - margin)
            before = event.ts

    def http(self, judge, action):
        if action.path in ("/pub", "/mpub"):
            self._elsewhere.update((action.topic, body) for body in action.bodies or ())
            if action.bodies is None:
                self._elsewhere.add((action.topic, None))
        elif action.path.endswith("pause"):
            where = (action.topic,) if action.channel is None else (action.topic, action.channel)
            self._paused_until[where] = action.ts

    def forget(self, judge, now):
        self._published, self._again, self._elsewhere, self._known_since = {}, set(), set(), now

    def _published_at(self, topic: str | None, bodies: tuple[int, ...], ts: float) -> None:
        """A publish's bodies at once (an MPUB's are hundreds); the time of one published again is never read."""
        keys = list(zip(repeat(topic), bodies))
        self._again.update(self._published.keys() & keys)
        if len(set(keys)) < len(keys):
            self._again.update(key for key, count in Counter(keys).items() if count > 1)
        self._published.update(zip(keys, repeat(ts)))

    def _delivered(self, judge, connection, event, before, held):
        """``held``: the connection's messages in flight when ``event`` came, ID -> their delivery."""
        topic, channel = connection.topic, connection.channel
        if self._known_since and (event.msg_ts_ns is None or event.msg_ts_ns < self._known_since * 1e9 + 1e9):
            self.skip("D-40", LET_GO)  # a copy published before, its publish let go of
            return
        key = (topic, event.bodies[0])
        if key not in self._published or key in self._again or {key, (topic, None)} & self._elsewhere:
            return
        unbuffered = _asked_unbuffered(connection)
        rdy = connection.rdy or 0
        others = len(held) - (event.msg_id in held)
        if not unbuffered and others + 1 != rdy:
            return  # buffered: it does not fill the window
        in_flight = [delivery for msg_id, delivery in held.items() if msg_id != event.msg_id]
        # the window fills only if none of the messages in flight may have timed out meanwhile
        fills = len(in_flight) + 1 == rdy and all(delivery.earliest_timeout is not None
                                                  and delivery.earliest_timeout > event.ts for delivery in in_flight)
        if not (unbuffered or fills) or len(in_flight) >= rdy:
            return  # buffered, or no room for it since its last event: it waited for a timeout
        if not (judge.all_started and judge.http_seen) or judge.consumers(connection.subscription) != [connection] \
                or judge.is_paused(topic, channel) or _compressed(connection):
            self.skip("D-40", "another consumer, publish, pause or a compression layer may have held it")
            return
        ready_at = max(self._published[key], before, self._paused_until.get((topic,), 0.0),
                       self._paused_until.get((topic, channel), 0.0))
        late = event.ts - ready_at
        if late > FLUSH_S:
            item, why = ("ID-04", "with output_buffer_size -1") if unbuffered else ("D-40", f"filling RDY {rdy}")
            self.report(item, BROKER, event.ts, connection.name, f"a message {why} on the wire at once",
                        f"{late * 1000:.0f} ms after it could go", event)


def _asked_unbuffered(connection) -> bool:
    return (connection.identify or {}).get("output_buffer_size") == UNBUFFERED


def _compressed(connection) -> bool:
    answer = connection.identify_answer or {}
    return answer.get("snappy") is True or answer.get("deflate") is True


class _Timeout(NamedTuple):
    """A delivery of the run's, as far as ``_delivered`` reads it."""

    earliest_timeout: float
