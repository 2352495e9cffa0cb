"""/stats counters held against what the traffic proves the broker counted before each /stats request was sent
(nsqd v1.3.0 nsqd/channel.go: PutMessage and PutMessageDeferred count message_count, RequeueMessage requeue_count,
processInFlightQueue timeout_count; nsqd/topic.go PutMessage(s) the topic's message_count). The counters go on
moving between the traffic the capture saw and the answer, so each is judged as a floor: never below what the
traffic proves. A counter starts from zero when its topic or channel is made again (a delete, an ephemeral one
left by its last client) or the broker restarts: the floors start again there, and where such a start may have gone
unseen the answer is not judged."""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import partial
from itertools import compress
from operator import is_not

from nsq_protocol.http import HttpExchange
from nsq_protocol.monitors.events import BROKER, MESSAGE, MESSAGES, RESPONSE
from nsq_protocol.monitors.judge import http_action
from nsq_protocol.monitors.monitor import Monitor

HTTP = "HTTP"
EPHEMERAL = "#ephemeral"
PUBLISHES = ("PUB", "MPUB", "DPUB")
UNSEEN_HTTP = "the broker's HTTP requests are not all in the traffic: an unseen delete starts its counters again"
EPHEMERAL_AGAIN = "an ephemeral topic or channel starts its counters again each time it is made anew"
RESTARTED = "the broker restarted (its start_time changed): what the traffic showed before counts in another life"
OLDER = "a message delivered was published before the broker's start (restored from disk, not counted anew)"


class _Floors:
    """What the traffic proves the broker counted in one channel since its counters last started."""

    __slots__ = ("entered", "returned", "requeued", "timed_out", "oldest_ns")

    def __init__(self) -> None:
        self.entered = 0  # first deliveries (attempts 1): each entered the channel once
        self.returned = 0  # deliveries with attempts 2 or more: each came back after a REQ or a timeout
        self.requeued = 0  # of them, after a REQ sent while the message was surely in flight (D-20)
        self.timed_out = 0  # of them, after a delivery with no FIN or REQ (D-22)
        self.oldest_ns: int | None = None  # the earliest publish time among the messages counted


class CountersNeverBehind(Monitor):
    """H-STATS-11: each /stats JSON answer's topic message_count at least the publishes answered OK before it was
    asked, a channel's message_count at least the messages first delivered on it, and requeue_count plus
    timeout_count at least the messages that came back; D-20: requeue_count at least the REQs that brought one back
    while it was surely in flight; D-22: timeout_count at least the messages that came back without a FIN or REQ.
    Judged where every HTTP request of the broker is in the traffic (``http_seen``), ephemeral ones aside."""

    ITEMS = ("H-STATS-11", "D-20", "D-22")
    KINDS = frozenset({MESSAGE, RESPONSE})
    RUNS = frozenset({MESSAGES})

    def __init__(self) -> None:
        super().__init__()
        self._published: dict[str, int] = {}  # topic -> messages accepted since its counters started
        self._channels: dict[tuple[str, str], _Floors] = {}
        self._http_publishes: list[tuple[float, str, int]] = []  # (answered, topic, messages) not yet counted
        self._gone_until: dict[tuple, float] = {}  # (topic,) or (topic, channel) deleted -> when the delete answered
        self._start_time: int | None = None  # the broker's, from the /stats answers: its life
        self._closed: set[str] = set()  # the connections closed: when all are, the broker may have restarted

    # ---- what the traffic proves ----------------------------------------------------------------------------
    def observe(self, judge, connection, event, answered):
        if event.kind == RESPONSE:
            if answered is not None and answered.name in PUBLISHES and event.name == "OK" and answered.topic:
                messages = answered.number if answered.name == "MPUB" else 1
                if messages and not self._gone(event.ts, (answered.topic,)):
                    self._published[answered.topic] = self._published.get(answered.topic, 0) + messages
            return
        subscription = connection.subscription
        if subscription is None or event.msg_id is None or event.attempts is None or \
                self._gone(event.ts, (subscription[0],), subscription):
            return
        floors = self._floors(subscription, (event.msg_ts_ns,))
        if event.attempts <= 1:
            floors.entered += 1
            return
        floors.returned += 1
        if judge.timing:
            self._came_back(judge, connection, floors, event.msg_id, event.attempts)

    def observe_run(self, judge, connection, run):
        """Counted at once where the channel was deleted before none or after all of the run; only the messages that
        came back read the ledger."""
        subscription = connection.subscription
        if subscription is None or self._gone(max(run.ts), (subscription[0],), subscription):
            return
        if None in run.attempts or self._gone(min(run.ts), (subscription[0],), subscription):
            for event in run.events():
                self.observe(judge, connection, event, None)
            return
        floors = self._floors(subscription, run.msg_ts_ns)
        back = list(map((1).__lt__, run.attempts))
        returned = sum(back)
        floors.entered += len(back) - returned
        floors.returned += returned
        if returned and judge.timing:
            for msg_id, attempts in compress(zip(run.msg_ids, run.attempts, strict=True), back):
                self._came_back(judge, connection, floors, msg_id, attempts)

    def _floors(self, subscription: tuple, stamps) -> _Floors:
        """The channel's floors, their oldest publish time past ``stamps`` (None: not shown)."""
        floors = self._channels.get(subscription)
        if floors is None:
            floors = self._channels[subscription] = _Floors()
        oldest = min(filter(partial(is_not, None), stamps), default=None)
        if oldest is not None and (floors.oldest_ns is None or oldest < floors.oldest_ns):
            floors.oldest_ns = oldest
        return floors

    def _came_back(self, judge, connection, floors: _Floors, msg_id: str, attempts: int) -> None:
        """A message delivered again (``attempts`` 2 or more): by a REQ or a timeout, as its delivery before ended."""
        before = judge.messages.get(judge.message_key(connection, msg_id))  # the ledger's, not yet this one
        if before is None or before.attempts != attempts - 1:
            return
        if before.settled == "REQ" and not before.settle_failed and before.earliest_timeout is not None \
                and before.settled_at < before.earliest_timeout:
            floors.requeued += 1  # D-20: it was in flight when the REQ came, so the REQ brought it back
        elif before.settled is None and judge.connections[before.connection].started:
            floors.timed_out += 1  # D-22: nothing settled it on a connection seen whole

    def closed(self, judge, connection):
        self._closed.add(connection.name)
        if len(self._closed) == len(judge.connections) and self._start_time is None:
            # no connection open: the broker may have restarted unseen, before any answer told its life
            self._published.clear()

    def _gone(self, ts: float, *where: tuple) -> bool:
        return any(ts <= self._gone_until.get(one, float("-inf")) for one in where)

    # ---- the answers --------------------------------------------------------------------------------------
    def http_exchange(self, judge, exchange: HttpExchange):
        request, response = exchange.request, exchange.response
        self._count_http_publishes(exchange.ts)
        if response.status != 200:
            return
        path = request.path
        if path in ("/pub", "/mpub") and self._start_time is not None:
            action = http_action(exchange.ts, request, response.status)
            if action is not None and action.topic and action.bodies:
                self._http_publishes.append((exchange.answered, action.topic, len(action.bodies)))
        elif path in ("/topic/delete", "/channel/delete"):
            self._deleted(request.query("topic"), request.query("channel") if path == "/channel/delete" else None,
                          exchange.answered)
        elif path == "/stats" and request.method == "GET" and response.whole:
            self._stats(judge, exchange)

    def _count_http_publishes(self, now: float) -> None:
        if not self._http_publishes:
            return
        waiting = []
        for answered, topic, messages in self._http_publishes:
            if answered >= now:
                waiting.append((answered, topic, messages))
            elif not self._gone(answered, (topic,)):
                self._published[topic] = self._published.get(topic, 0) + messages
        self._http_publishes = waiting

    def _deleted(self, topic: str | None, channel: str | None, answered: float) -> None:
        if not topic:
            return
        if channel is None:
            self._gone_until[topic,] = answered
            self._published.pop(topic, None)
            for key in [key for key in self._channels if key[0] == topic]:
                del self._channels[key]
        elif channel:
            self._gone_until[topic, channel] = answered
            self._channels.pop((topic, channel), None)

    def _stats(self, judge, exchange: HttpExchange) -> None:
        document = stats_document(exchange)
        if document is None:
            return
        if not judge.http_seen:
            for item in self.ITEMS:
                self.skip(item, UNSEEN_HTTP)
            return
        start_time = document.get("start_time")
        if self._start_time is not None and start_time != self._start_time:
            self._published.clear()
            self._channels.clear()
            self._http_publishes.clear()
            for item in self.ITEMS:
                self.skip(item, RESTARTED)
        self._start_time = start_time
        if not isinstance(start_time, int):
            return
        for topic in stats_topics(document):
            self._topic(exchange, topic, (start_time + 1) * 1_000_000_000)

    def _topic(self, exchange: HttpExchange, topic: dict, born_ns: int) -> None:
        name = topic["topic_name"]
        if name.endswith(EPHEMERAL):
            self.skip("H-STATS-11", EPHEMERAL_AGAIN)
            return
        floor = self._published.get(name, 0)
        if _number(topic.get("message_count")) < floor:
            self.report("H-STATS-11", BROKER, exchange.ts, HTTP, f"topic {name}'s message_count at least {floor}, "
                        "the publishes answered before the request", f"{topic.get('message_count')}", exchange)
        for channel in stats_channels(topic):
            self._channel(exchange, name, channel, born_ns)

    def _channel(self, exchange: HttpExchange, topic: str, channel: dict, born_ns: int) -> None:
        name = channel["channel_name"]
        if name.endswith(EPHEMERAL):
            self.skip("H-STATS-11", EPHEMERAL_AGAIN)
            return
        floors = self._channels.get((topic, name))
        if floors is None:
            return
        if floors.oldest_ns is None or floors.oldest_ns < born_ns:
            for item in self.ITEMS:
                self.skip(item, OLDER)
            return
        label = f"channel {topic}/{name}'s"
        messages, requeues, timeouts = (_number(channel.get(key))
                                        for key in ("message_count", "requeue_count", "timeout_count"))
        faults = (
            ("H-STATS-11", messages < floors.entered, f"{label} message_count at least {floors.entered}, the messages "
             "first delivered before the request", f"{messages}"),
            ("H-STATS-11", requeues + timeouts < floors.returned, f"{label} requeue_count plus timeout_count at least "
             f"{floors.returned}, the messages that came back before the request", f"{requeues} + {timeouts}"),
            ("D-20", requeues < floors.requeued, f"{label} requeue_count at least {floors.requeued}, the messages a "
             "REQ brought back before the request", f"{requeues}"),
            ("D-22", timeouts < floors.timed_out, f"{label} timeout_count at least {floors.timed_out}, the messages "
             "that came back unsettled before the request", f"{timeouts}"),
        )
        for item, broken, expected, observed in faults:
            if broken:
                self.report(item, BROKER, exchange.ts, HTTP, expected, observed, exchange)


def _number(value) -> float:
    """A counter as the answer gives it; anything else is no floor's concern (DocumentsAsNsqd judges the shape)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else float("inf")


def stats_document(exchange: HttpExchange) -> dict | None:
    """A /stats?format=json answer's document, with its topics; None for any other answer."""
    params = exchange.request.params()
    if params is None or params.get("format") != "json":
        return None
    try:
        document = json.loads(exchange.response.body)
    except ValueError:
        return None
    return document if isinstance(document, dict) and isinstance(document.get("topics"), list) else None


def stats_topics(document: dict) -> Iterator[dict]:
    """A /stats document's topic entries that name their topic (the others are DocumentsAsNsqd's concern)."""
    return (topic for topic in document["topics"]
            if isinstance(topic, dict) and isinstance(topic.get("topic_name"), str))


def stats_channels(topic: dict) -> Iterator[dict]:
    """A topic entry's channel entries that name their channel."""
    channels = topic.get("channels")
    if isinstance(channels, list):
        yield from (channel for channel in channels
                    if isinstance(channel, dict) and isinstance(channel.get("channel_name"), str))
