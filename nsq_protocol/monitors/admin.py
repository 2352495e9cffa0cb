"""What the broker's HTTP API does to its TCP consumers: deleting a channel or topic closes their connections (D-62)."""

from __future__ import annotations

from heapq import heappop, heappush

from nsq_protocol.monitors.events import BROKER, RESPONSE
from nsq_protocol.monitors.monitor import Monitor

CLOSE_S = 1.0  # the broker closes a deleted channel's clients as it deletes it, before it answers the request


class DeletionClosesConsumers(Monitor):
    """D-62: after /channel/delete (or /topic/delete) answered 200, every consumer of the channel (of the topic's
    channels) whose SUB was answered before the request was sent is closed by the broker within ``CLOSE_S``."""

    ITEMS = ("D-62",)
    KINDS = frozenset({RESPONSE})

    def __init__(self):
        super().__init__()
        self._subscribed: dict[str, float] = {}  # connection -> when its SUB was answered OK
        self._deleted: list = []  # heap of (due, sequence, path, connection names)
        self._sequence = 0

    def observe(self, judge, connection, event, answered):
        if answered is not None and answered.name == "SUB" and event.name == "OK":
            self._subscribed[connection.name] = event.ts

    def http(self, judge, action):
        if action.status != 200 or action.path not in ("/channel/delete", "/topic/delete"):
            return
        if not judge.timing:
            self.skip("D-62", "the times are when the client read the frames, not when they arrived")
            return
        names = [c.name for c in judge.connections.values() if c.open and c.topic == action.topic
                 and action.channel in (None, c.channel) and self._subscribed.get(c.name, action.ts) < action.ts]
        if names:
            self._sequence += 1
            heappush(self._deleted, (action.ts + CLOSE_S, self._sequence, action.path, names))
            self.due = min(self.due, action.ts + CLOSE_S)
            judge.want_tick(self.due)

    def tick(self, judge, now):
        while self._deleted and self._deleted[0][0] <= now:
            due, _, path, names = heappop(self._deleted)
            for name in names:
                connection = judge.connections[name]
                if connection.closed_at is None or connection.closed_at > due:
                    self.report("D-62", BROKER, due, name, f"the consumer closed by the broker once {path} was "
                                f"answered", f"still open {CLOSE_S:g} s after the request")
        self.due = self._deleted[0][0] if self._deleted else float("inf")
        judge.want_tick(self.due)

    def finish(self, judge, now):
        self.tick(judge, now)
        for _ in self._deleted:
            self.skip("D-62", f"the traffic ends less than {CLOSE_S:g} s after the deletion")
