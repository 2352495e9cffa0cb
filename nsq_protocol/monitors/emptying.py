"""Emptying over HTTP (D-63, D-64): /channel/empty drops the channel's queued, deferred and in-flight messages, so a
FIN, REQ or TOUCH of one in flight before it is refused and nothing the channel held is delivered after it;
/topic/empty drops what waits in the topic itself (a paused topic holds what is published to it, D-61)."""

from __future__ import annotations

from heapq import heappop, heappush

from nsq_protocol.monitors.events import BROKER, COMMAND, ERROR, FINS, MESSAGE, MESSAGES, RESPONSE
from nsq_protocol.monitors.judge import http_action
from nsq_protocol.monitors.monitor import Monitor
from nsq_protocol.monitors.published import PublishTimes
from nsq_protocol.monitors.scan import buffered_s
from nsq_protocol.monitors.stats_counters import stats_channels, stats_document, stats_topics

SETTLED_S = 0.5  # an E_*_FAILED follows its command at once: this much later, its absence says it settled
# the topic's pump copies a message to its channels after the publish was answered: one published this long before
# the empty was in the channel by then (unless the topic was paused)
COPIED_S = 2.0
LATE_S = 0.5  # the broker's own latency between its pump and the wire, beyond the output buffer's timeout
SETTLES = frozenset({"FIN", "REQ", "TOUCH"})
UNSEEN = "some connection, or the HTTP requests, of this nsqd are not in the traffic"


class EmptiedStaysEmpty(Monitor):
    """D-63: after /channel/empty answered 200, a FIN, REQ or TOUCH sent by a consumer of the channel for a message in
    flight to it before the request is refused (E_<verb>_FAILED), and no message whose every publish was answered
    ``COPIED_S`` before the request, to a topic not paused since, is delivered on the channel once what its output
    buffer held is out. D-64: a message whose every publish to a paused topic was answered between the pause's answer
    and a /topic/empty's request, the pause in force until the empty was answered, is never delivered. Judged where
    the times are the wire's and the broker did not crash. D-63 too: a /stats answer asked for after the empty was
    answered counts no more messages in flight on the channel than were delivered on it since the empty was asked
    for (by the answer, and what an output buffer held then): those before are gone. Judged where every connection
    of the nsqd is in the traffic."""

    ITEMS = ("D-63", "D-64")
    KINDS = frozenset({COMMAND, RESPONSE, ERROR, MESSAGE})
    RUNS = frozenset({MESSAGES, FINS})

    def __init__(self):
        super().__init__()
        self._publishes = PublishTimes()
        self._emptied_ids: dict[str, dict] = {}  # connection -> {message ID: the empty's answer} of emptied messages
        self._channel_emptied: dict[tuple, tuple] = {}  # (topic, channel) -> (its latest empty's request, answer)
        self._topic_emptied: dict[str, list] = {}  # topic -> (request, answer) of each /topic/empty
        self._paused: dict[str, list] = {}  # topic -> [pause requested, answered, unpause requested] of each pause
        self._delivered_since: dict[tuple, int] = {}  # (topic, channel) -> deliveries on it since its latest empty
        self._counts: list = []  # heap of (due, sequence, (topic, channel), in_flight_count, the /stats exchange)
        self._settles: list = []  # heap of (due, sequence, connection, ID, verb)
        self._refused: set[tuple] = set()  # (connection, ID) of the settles awaited that were refused
        self._sequence = 0

    def observe(self, judge, connection, event, answered):
        kind = event.kind
        if kind == COMMAND:
            self._publishes.command(event)
            if event.name in SETTLES and connection.name in self._emptied_ids:
                self._settle(judge, connection, event)
            return
        if answered is not None:
            self._publishes.answered(event, answered)
        if kind == ERROR and event.msg_id is not None and self._settles:
            self._refused.add((connection.name, event.msg_id))
        elif kind == MESSAGE and connection.subscription is not None:
            emptied = self._emptied_ids.get(connection.name)
            if emptied is not None:
                emptied.pop(event.msg_id, None)  # delivered again: in flight anew
            if self._channel_emptied or self._topic_emptied:
                if connection.subscription in self._delivered_since:
                    self._delivered_since[connection.subscription] += 1
                self._delivered(judge, connection, event)

    def observe_run(self, judge, connection, run):
        """Only a FIN of a message emptied, and a delivery on a channel or topic emptied, is judged. A FIN's wait for
        its E_FIN_FAILED may fall due within the run, ticked there once the run is all taken: judged alike, as the
        tick reads nothing the later FINs change, and their waits fall due after it."""
        subscription, emptied = connection.subscription, self._emptied_ids.get(connection.name)
        if run.key == FINS:
            if emptied and not emptied.keys().isdisjoint(run.msg_ids):
                for event in run.events():
                    self._settle(judge, connection, event)
            return
        if subscription is None:
            return
        for msg_id in run.msg_ids if emptied else ():
            emptied.pop(msg_id, None)  # delivered again: in flight anew
        if subscription in self._delivered_since:
            self._delivered_since[subscription] += len(run.ts)
        if subscription in self._channel_emptied or subscription[0] in self._topic_emptied:
            for event in run.events():
                self._delivered(judge, connection, event)

    def http_exchange(self, judge, exchange):
        action = http_action(exchange.ts, exchange.request, exchange.response.status)
        if action is None:
            if self._channel_emptied and exchange.request.path == "/stats":
                self._counted(judge, exchange)
            return
        path, topic = action.path, action.topic
        if path in ("/pub", "/mpub"):
            self._publishes.exchange(action, exchange.answered)
        elif path == "/topic/pause" and action.status == 200:
            self._paused.setdefault(topic, []).append([exchange.ts, exchange.answered, float("inf")])
        elif path == "/topic/unpause":
            for pause in self._paused.get(topic, ()):
                pause[2] = min(pause[2], exchange.ts)
        elif path == "/channel/empty" and action.status == 200:
            self._channel_emptied[topic, action.channel] = (exchange.ts, exchange.answered)
            self._delivered_since[topic, action.channel] = 0
            for consumer in judge.consumers((topic, action.channel)):
                emptied = self._emptied_ids.setdefault(consumer.name, {})
                for msg_id, delivery in consumer.in_flight.items():
                    if delivery.at < exchange.ts:
                        emptied[msg_id] = exchange.answered
        elif path == "/topic/empty" and action.status == 200:
            self._topic_emptied.setdefault(topic, []).append((exchange.ts, exchange.answered))

    def _counted(self, judge, exchange):
        """The in_flight_count of each channel emptied before the /stats request: judged once what the consumers'
        output buffers held when it was answered is on the wire."""
        document = stats_document(exchange)
        if document is None:
            return
        for topic in stats_topics(document):
            for channel in stats_channels(topic):
                where = (topic["topic_name"], channel["channel_name"])
                emptied = self._channel_emptied.get(where)
                count = channel.get("in_flight_count")
                if emptied is None or emptied[1] >= exchange.ts or not isinstance(count, int) or count == 0:
                    continue
                held = max((buffered_s(c) for c in judge.consumers(where)), default=0.0)
                if held == float("inf") or not judge.all_started or not judge.timing:
                    self.skip("D-63", "a consumer's output buffer may hold its deliveries until a heartbeat, or "
                              "some connection of this nsqd is not in the traffic")
                    continue
                due = exchange.answered + held + LATE_S
                self._sequence += 1
                heappush(self._counts, (due, self._sequence, where, count, exchange))
                self.due = min(self.due, due)
                judge.want_tick(self.due)

    def _settle(self, judge, connection, event):
        emptied_at = self._emptied_ids[connection.name].get(event.msg_id)
        if emptied_at is None or event.ts <= emptied_at:
            return
        if not judge.timing or judge.crashed_at is not None:
            self.skip("D-63", "the times are not the wire's, or the broker crashed")
            return
        self._sequence += 1
        heappush(self._settles, (event.ts + SETTLED_S, self._sequence, connection.name, event.msg_id, event.name))
        self.due = min(self.due, event.ts + SETTLED_S)
        judge.want_tick(self.due)

    def tick(self, judge, now):
        while self._settles and self._settles[0][0] <= now:
            due, _, name, msg_id, verb = heappop(self._settles)
            refused = (name, msg_id) in self._refused
            connection = judge.connections[name]
            if not refused and (connection.closed_at is None or connection.closed_at > due) \
                    and connection.fatal_error is None:
                self.report("D-63", BROKER, due, name, f"{verb} of a message emptied from its channel refused",
                            f"{verb} {msg_id} accepted: no E_{verb}_FAILED within {SETTLED_S:g} s")
        if not self._settles:
            self._refused.clear()
        while self._counts and self._counts[0][0] <= now:
            _, _, where, count, exchange = heappop(self._counts)
            self._count_judged(judge, where, count, exchange)
        self.due = min(self._settles[0][0] if self._settles else float("inf"),
                       self._counts[0][0] if self._counts else float("inf"))
        judge.want_tick(self.due)

    def finish(self, judge, now):
        self.tick(judge, now)
        for _, _, where, count, exchange in self._counts:
            if all(not consumer.open for consumer in judge.consumers(where)):
                self._count_judged(judge, where, count, exchange)  # no buffer of theirs can deliver more
            else:
                self.skip("D-63", "the traffic ends before what the consumers' output buffers held was out")

    def forget(self, judge, now):
        self._publishes.forget(now)

    def _count_judged(self, judge, where, count, exchange):
        delivered = self._delivered_since.get(where, 0)
        if count > delivered and judge.crashed_at is None:
            self.report("D-63", BROKER, exchange.ts, "HTTP", f"in_flight_count of {'/'.join(where)} at most "
                        f"{delivered}, the deliveries since its /channel/empty", f"{count}", exchange)

    def _delivered(self, judge, connection, event):
        topic, channel = connection.subscription
        channel_emptied = self._channel_emptied.get((topic, channel))
        topic_emptied = self._topic_emptied.get(topic)
        if channel_emptied is None and topic_emptied is None:
            return
        if not judge.timing or judge.crashed_at is not None:
            self.skip("D-63", "the times are not the wire's, or the broker crashed")
            return
        sent = self._publishes.sent(judge, topic, event)
        if sent is None:
            self.skip("D-63", UNSEEN)  # or published before the traffic: a message the rule cannot place
            return
        first, _, answered = sent
        if answered is None:
            return  # a publish of it may still be on its way
        pauses = self._paused.get(topic, ())
        if channel_emptied is not None:
            requested, done = channel_emptied
            if answered < requested - COPIED_S and event.ts > done + buffered_s(connection) + LATE_S \
                    and not any(paused < requested and unpaused > first for paused, _, unpaused in pauses):
                self.report("D-63", BROKER, event.ts, connection.name, f"nothing {channel} held delivered after "
                            "its /channel/empty", f"a message published {requested - answered:.2f} s before it "
                            f"delivered {event.ts - done:.2f} s after", event)
                return
        for requested, done in topic_emptied or ():
            if any(held <= first and answered < requested and unpaused > done for _, held, unpaused in pauses):
                self.report("D-64", BROKER, event.ts, connection.name, f"nothing that waited in the paused topic "
                            f"{topic} delivered after its /topic/empty", "a message published while it was paused, "
                            "before the empty, delivered", event)
                return
