"""A consumer with room is fed while its channel has messages (D-02, D-05, D-41, D-42). nsqd's pump for a client waits
on its channel's queue whenever the client has fewer messages in flight than its RDY (the channel unpaused), and takes
a queued message at once: a FIN, a REQ or a RDY that makes room wakes it; what it takes leaves the output buffer by
the buffer's next timed flush, the next heartbeat where the timed flush is off (output_buffer_timeout -1), or at once
with output_buffer_size -1. So a consumer that had room, got nothing, while a message accepted for its channel was
still undelivered, for longer than the slowest flush among the channel's consumers and the broker's own latency,
was starved."""

from __future__ import annotations

from bisect import bisect_left
from collections import OrderedDict, deque
from heapq import heappop, heappush
from itertools import accumulate
from operator import not_, sub

from nsq_protocol.monitors.events import BROKER, COMMAND, FINS, MESSAGE, MESSAGES, RESPONSE
from nsq_protocol.monitors.judge import http_action
from nsq_protocol.monitors.monitor import Monitor
from nsq_protocol.monitors.published import new_bodies

LATE_S = 0.5  # the broker's own latency, between its pump taking a message and the wire, beyond the buffer's flush
DEFAULT_OUTPUT_BUFFER_TIMEOUT_MS = 250  # nsqd's --output-buffer-timeout, where no IDENTIFY answer shows it
UNBUFFERED_SIZE = 1  # the IDENTIFY answer's output_buffer_size after output_buffer_size -1 (ID-04)
INFINITY = float("inf")
UNSEEN = "some connection, or the HTTP requests, of this nsqd are not in the traffic"
PUBLISHES = frozenset({"PUB", "MPUB", "DPUB"})


class Backlog:
    """What a channel holds that no consumer was seen to get: the messages of each publish to it once a consumer had
    subscribed (by their bodies' hashes, ints), and each message REQ'd with no delay (by its ID, a str), oldest first,
    each publish's as one block with when the broker had them (its answer: infinity until then, as the broker may
    deliver them before the answer crosses the wire). A delivery takes the oldest message held with its key."""

    def __init__(self, subscription: tuple):
        self.subscription = subscription
        self.blocks: OrderedDict[int, Block] = OrderedDict()  # sequence -> a block with messages left, oldest first
        self.held = 0  # messages left in all blocks
        # key -> its block, or a deque of its blocks (oldest first; a block once per message) where more than one
        # message has the key: bodies are mostly unique, so a publish's keys go in at once
        self._by_key: dict[int | str, Block | deque] = {}

    def add(self, sequence: int, at: float, keys: tuple | list) -> None:
        block = self.blocks[sequence] = Block(sequence, at, keys)
        self.held += len(keys)
        by_key = self._by_key
        if new_bodies(by_key, keys):
            by_key.update(dict.fromkeys(keys, block))
            return
        for key in keys:
            found = by_key.get(key)
            if found is None:
                by_key[key] = block
            elif type(found) is deque:
                found.append(block)
            else:
                by_key[key] = deque((found, block))

    def take(self, key: int | str) -> bool:
        found = self._by_key.pop(key, None)
        if found is None:
            return False
        if type(found) is deque:
            block = found.popleft()
            self._by_key[key] = found if len(found) > 1 else found[0]
        else:
            block = found
        block.left -= 1
        self.held -= 1
        if not block.left:
            del self.blocks[block.sequence]
        return True

    def accepted(self, sequence: int, at: float) -> None:
        block = self.blocks.get(sequence)
        if block is not None:
            block.at = at

    def refused(self, sequence: int) -> None:
        block = self.blocks.pop(sequence, None)
        if block is None:
            return
        self.held -= block.left
        by_key = self._by_key
        for key in block.keys:
            found = by_key.get(key)
            if found is block:
                del by_key[key]
            elif type(found) is deque:
                kept = [other for other in found if other is not block]
                if len(kept) > 1:
                    by_key[key] = deque(kept)
                elif kept:
                    by_key[key] = kept[0]
                else:
                    del by_key[key]

    def oldest(self) -> float | None:
        """When the broker had the oldest message it holds; past those whose publish is not answered (yet)."""
        return next((block.at for block in self.blocks.values() if block.at != INFINITY), None)


class Block:
    """A publish's messages to one channel (or one REQ'd message), as a backlog holds them."""

    __slots__ = ("sequence", "at", "keys", "left")

    def __init__(self, sequence: int, at: float, keys: tuple | list):
        self.sequence, self.at, self.keys, self.left = sequence, at, keys, len(keys)


class ReadyConsumerFed(Monitor):
    """D-02: a consumer with room, by a FIN or with messages in flight below its RDY (a window, not a budget), is sent
    what its channel holds; D-05: so is one a REQ made room for (the same message after REQ 0); D-41: with RDY above
    1 what its pump took is out within output_buffer_timeout; D-42: within the next heartbeat where the timed flush
    is off. Judged on a consumer subscribed (SUB answered) and open since before the oldest message its channel holds
    (no restart between), that had room for the slowest flush among the channel's consumers plus ``LATE_S`` with
    nothing delivered to it, while a message accepted for the channel (published after a consumer's SUB was
    answered, not deferred) was delivered to no one; the channel and its topic not paused nor paused meanwhile, not
    ephemeral, no consumer of it sampling (D-45 drops what it takes), none closed while it held messages (what its
    buffer held never reached the wire); every connection and HTTP request of the nsqd in the traffic."""

    ITEMS = ("D-02", "D-05", "D-41", "D-42")
    KINDS = frozenset({COMMAND, RESPONSE, MESSAGE})
    RUNS = frozenset({MESSAGES, FINS})

    def __init__(self):
        super().__init__()
        self._consumers: dict[tuple, dict] = {}  # (topic, channel) -> {connection: its SUB's answer}
        self._channels: dict[str, set] = {}  # topic -> its channels with a consumer
        self._backlogs: dict[tuple, Backlog] = {}
        self._idle: dict[str, tuple] = {}  # connection -> (had room since, what made it: FIN, REQ, RDY or MESSAGE)
        self._peak_rdy: dict[str, int] = {}  # connection -> the highest RDY it sent
        self._sampled: set[tuple] = set()  # channels a consumer with a sample_rate took from (D-45)
        self._changed: dict[tuple, float] = {}  # (topic,) or (topic, channel) -> its latest pause or unpause answered
        self._waiting: list = []  # heap of (due, connection)
        self._scheduled: dict[str, float] = {}  # connection -> its entry's due in _waiting
        self._sequence = 0
        # id of a publish command -> (the command, [(backlog, sequence)] of its messages) until its answer
        self._unanswered: dict[int, tuple] = {}
        # connection -> what its ledger will hold in flight beyond what it does, while a run is judged ahead of it
        self._ahead: dict[str, int] = {}

    # ---- the traffic ------------------------------------------------------------------------------------
    def observe(self, judge, connection, event, answered):
        if not judge.timing:
            return
        kind, name = event.kind, connection.name
        if kind == MESSAGE:
            subscription = connection.subscription
            if subscription is None or event.msg_id is None:
                return
            if event.bodies:
                self._taken(subscription, event.msg_id, event.bodies[0])
            in_flight = len(connection.in_flight) + (event.msg_id not in connection.in_flight)
            self._room(judge, connection, event.ts, in_flight, "MESSAGE", fed=True)
        elif kind == COMMAND:
            verb = event.name
            if verb in ("FIN", "REQ") and event.msg_id is not None:
                held = event.msg_id in connection.in_flight
                if verb == "REQ" and held and event.number == 0 and connection.subscription in self._consumers:
                    backlog, _ = self._add(connection.subscription, event.ts, (event.msg_id,))  # D-05
                    self._held(judge, backlog, event.ts)
                self._room(judge, connection, event.ts, len(connection.in_flight) - held, verb)
            elif verb in PUBLISHES and event.topic is not None and (verb != "DPUB" or not event.number):
                # P-DPUB-03: no delay is no deferral
                self._unanswered[id(event)] = (event, self._published(event.ts, event.topic, event.bodies))
            elif verb in ("RDY", "CLS"):
                self._peak_rdy[name] = max(self._peak_rdy.get(name, 0), connection.rdy or 0)
                self._room(judge, connection, event.ts, len(connection.in_flight), verb)
        elif answered is not None:
            command, entries = self._unanswered.pop(id(answered), (None, ()))
            if command is not answered:
                entries = ()
            if event.name != "OK":
                for backlog, sequence in entries:
                    backlog.refused(sequence)
            elif answered.name == "SUB" and answered.channel is not None:
                self._subscribed(connection, event.ts)
            if event.name == "OK":
                self._accepted(judge, entries, event.ts)

    def observe_run(self, judge, connection, run):
        """Counted as the ledger counts them, the messages in flight after each event only grow over message frames
        and only shrink over FINs, so the events with room are a prefix of the ones, a suffix of the others; of
        them only the first can start a wait (the later ones wait no earlier). Where that wait falls due within the
        run, its tick comes between the events: they are judged one by one."""
        if not judge.timing:
            return
        fed = run.key == MESSAGES
        subscription, name, ts = connection.subscription, connection.name, run.ts
        if fed and subscription is None:
            return
        in_flight = connection.in_flight
        held = map(in_flight.__contains__, run.msg_ids)
        # a message frame adds its ID unless it is in flight already; a FIN of one in flight takes it away
        counts = list(accumulate(map(not_, held) if fed else held, None if fed else sub, initial=len(in_flight)))[1:]
        rdy = connection.rdy or 0 if connection.open and not connection.closing and connection.fatal_error is None \
            else 0
        first, end = (0, bisect_left(counts, rdy)) if fed else (len(ts) - bisect_left(counts[::-1], rdy), len(ts))
        why = "MESSAGE" if fed else "FIN"
        waits = first < end and (fed or first > 0 or name not in self._idle)
        if waits and ts[first] + LATE_S <= ts[-1]:
            self._one_by_one(judge, connection, run, counts, why)
            return
        backlog = self._backlogs.get(subscription) if fed else None
        if backlog is not None and backlog.held:
            for msg_id, body in zip(run.msg_ids, run.bodies, strict=True):
                if not backlog.take(msg_id):
                    backlog.take(body)
        if waits:
            self._wait(judge, name, ts[first] + LATE_S)
        if end < len(ts) or first == end:
            self._idle.pop(name, None)
        elif waits:
            self._idle[name] = (ts[-1] if fed else ts[first], why)

    def _one_by_one(self, judge, connection, run, counts: list, why: str) -> None:
        """``run``'s events one by one, each with the ticks the judge would give this monitor before it, and what its
        ledger would hold in flight by then (``_ahead``)."""
        fed, name = run.key == MESSAGES, connection.name
        for index, ts in enumerate(run.ts):
            if ts >= self.due:
                self._ahead[name] = counts[index - 1] - len(connection.in_flight)
                self.due = INFINITY
                self.tick(judge, ts)
            if fed:
                self._taken(connection.subscription, run.msg_ids[index], run.bodies[index])
            self._room(judge, connection, ts, counts[index], why, fed)
        self._ahead.clear()

    def _taken(self, subscription: tuple, msg_id: str, body: int) -> None:
        """A message of ``subscription``'s channel delivered: REQ'd (by its ID), else published (by its body)."""
        backlog = self._backlogs.get(subscription)
        if backlog is not None and not backlog.take(msg_id):
            backlog.take(body)

    def http_exchange(self, judge, exchange):
        action = http_action(exchange.ts, exchange.request, exchange.response.status)
        if action is None or action.status != 200 or action.topic is None or not judge.timing:
            return
        path, topic = action.path, action.topic
        if path == "/pub" and not action.defer_ms or path == "/mpub":  # /mpub has no defer (H-MPUB-06)
            self._accepted(judge, self._published(exchange.ts, topic, action.bodies or ()), exchange.answered)
        elif path.endswith("pause"):
            self._changed[(topic,) if action.channel is None else (topic, action.channel)] = exchange.answered
        elif path in ("/channel/empty", "/channel/delete"):
            self._backlogs.pop((topic, action.channel), None)
        elif path in ("/topic/empty", "/topic/delete"):
            for channel in self._channels.get(topic, ()):
                self._backlogs.pop((topic, channel), None)

    def closed(self, judge, connection):
        name, subscription = connection.name, connection.subscription
        self._idle.pop(name, None)
        consumers = self._consumers.get(subscription)
        if consumers is None or name not in consumers:
            return
        del consumers[name]
        if self._peak_rdy.get(name, 0) > len(connection.in_flight):
            self._backlogs.pop(subscription, None)  # its output buffer may have held some, never sent

    def forget(self, judge, now):
        self._backlogs, self._unanswered = {}, {}

    def _subscribed(self, connection, at: float) -> None:
        topic, channel = connection.subscription
        if topic.endswith("#ephemeral") or channel.endswith("#ephemeral"):
            return  # an ephemeral channel drops what overflows its memory queue (D-53)
        self._consumers.setdefault((topic, channel), {})[connection.name] = at
        self._channels.setdefault(topic, set()).add(channel)
        if (connection.identify or {}).get("sample_rate"):
            self._sampled.add((topic, channel))

    def _published(self, sent: float, topic: str, bodies) -> list[tuple]:
        """The backlogs a publish sent at ``sent`` adds its messages to, with each one's sequence there."""
        # the channel existed when the publish was sent: a consumer's SUB was answered before, on a connection open
        # since (a restart ends them all)
        channels = [channel for channel in self._channels.get(topic, ())
                    if any(at < sent for at in self._consumers[topic, channel].values())]
        return [self._add((topic, channel), INFINITY, bodies) for channel in channels] if bodies else []

    def _accepted(self, judge, entries: list[tuple], at: float) -> None:
        """The broker had the messages of ``entries`` (_published) at ``at``."""
        for backlog, sequence in entries:
            backlog.accepted(sequence, at)
        for backlog in dict.fromkeys(backlog for backlog, _ in entries):
            self._held(judge, backlog, at)

    def _add(self, subscription: tuple, at: float, keys: tuple | list) -> tuple:
        self._sequence += 1
        backlog = self._backlogs.get(subscription)
        if backlog is None:
            backlog = self._backlogs[subscription] = Backlog(subscription)
        backlog.add(self._sequence, at, keys)
        return backlog, self._sequence

    def _held(self, judge, backlog: Backlog, at: float) -> None:
        """``backlog`` holds a message the broker had at ``at``: its idle consumers are judged from then."""
        for name in self._consumers.get(backlog.subscription, ()):
            if name in self._idle:
                self._wait(judge, name, at + LATE_S)  # the earliest it can be due

    def _room(self, judge, connection, at: float, in_flight: int, why: str, fed: bool = False) -> None:
        """After ``why`` at ``at``, ``connection`` has ``in_flight`` messages in flight."""
        name = connection.name
        room = connection.open and not connection.closing and connection.fatal_error is None \
            and (connection.rdy or 0) > in_flight
        if not room:
            self._idle.pop(name, None)
        elif fed or name not in self._idle:
            self._idle[name] = (at, why)
            self._wait(judge, name, at + LATE_S)

    # ---- the judging ------------------------------------------------------------------------------------
    def _wait(self, judge, name: str, due: float) -> None:
        scheduled = self._scheduled.get(name)
        if scheduled is not None and scheduled <= due:
            return  # its entry comes first, and looks again then
        self._scheduled[name] = due
        heappush(self._waiting, (due, name))
        self.due = min(self.due, due)
        judge.want_tick(due)

    def tick(self, judge, now):
        while self._waiting and self._waiting[0][0] <= now:
            due, name = heappop(self._waiting)
            if self._scheduled.get(name) == due:
                del self._scheduled[name]
                self._judge(judge, now, name)
        self.due = self._waiting[0][0] if self._waiting else float("inf")
        judge.want_tick(self.due)

    def finish(self, judge, now):
        self.tick(judge, now)
        if not judge.timing:
            for item in self.ITEMS:
                self.skip(item, "the times are when the client read the frames")

    def _judge(self, judge, now: float, name: str) -> None:
        idle = self._idle.get(name)
        connection = judge.connections[name]
        subscription = connection.subscription
        backlog = self._backlogs.get(subscription)
        if idle is None or backlog is None or not backlog.held or name not in self._consumers.get(subscription, ()):
            return
        oldest = backlog.oldest()
        if oldest is None or connection.opened_at is None or oldest <= connection.opened_at:
            return  # the broker may have restarted since the channel got it
        consumers = [judge.connections[other] for other in self._consumers[subscription]]
        flushes = [flush_s(consumer) for consumer in consumers]
        if None in flushes:
            return  # a consumer's buffer with no timed flush nor heartbeat may hold what it took
        since, why = idle
        topic, channel = subscription
        start = max(since, oldest, self._changed.get((topic,), 0.0), self._changed.get(subscription, 0.0))
        due = start + max(flushes) + LATE_S
        if now < due:
            self._wait(judge, name, due)
            return
        if judge.is_paused(topic, channel) or subscription in self._sampled or judge.crashed_at is not None:
            return
        in_flight = len(connection.in_flight) + self._ahead.get(name, 0)
        item = _item(connection, why, in_flight)
        if not (judge.all_started and judge.http_seen):
            self.skip(item, UNSEEN)
            return
        self.report(item, BROKER, now, name, f"a message of channel {channel} ({backlog.held} held, none "
                    f"delivered) sent within {due - start:.2f} s of room ({why}, RDY {connection.rdy}, "
                    f"{len(connection.in_flight)} in flight)", f"nothing for {now - start:.2f} s")
        del self._backlogs[subscription]  # one report for what it held


def _item(connection, why: str, in_flight: int) -> str:
    if why == "REQ":
        return "D-05"
    if why == "FIN" or in_flight:
        return "D-02"
    answer = connection.identify_answer or {}
    if answer.get("output_buffer_timeout") == 0 or (connection.identify or {}).get("output_buffer_timeout") == -1 \
            or (connection.identify or {}).get("output_buffer_size") == -1:
        return "D-42"
    return "D-41" if (connection.rdy or 0) > 1 else "D-02"


def flush_s(connection) -> float | None:
    """How long what the pump wrote may wait in this connection's output buffer (D-40, D-41, D-42, ID-04): its timed
    flush's period; with that off, the next heartbeat's; nothing with output_buffer_size -1 unless a deflate layer
    buffers; None where nothing bounds it."""
    answer, asked = connection.identify_answer or {}, connection.identify or {}
    size, timeout = answer.get("output_buffer_size"), answer.get("output_buffer_timeout")
    if not isinstance(timeout, int):  # no JSON answer: what the IDENTIFY asked for, else nsqd's defaults
        size = UNBUFFERED_SIZE if asked.get("output_buffer_size") == -1 else None
        wanted = asked.get("output_buffer_timeout")
        timeout = 0 if wanted == -1 or size == UNBUFFERED_SIZE else wanted if isinstance(wanted, int) and wanted > 0 \
            else DEFAULT_OUTPUT_BUFFER_TIMEOUT_MS
    if timeout > 0:
        return timeout / 1000
    if size == UNBUFFERED_SIZE and answer.get("deflate") is not True:
        return 0.0
    heartbeat = connection.heartbeat_ms
    return heartbeat / 1000 if heartbeat else None
