"""An ephemeral channel gone from /stats once its last consumer left. nsqd v1.3.0 removes it in the background: the
connection's IOLoop reads the client's end (its FIN), calls RemoveClient (nsqd/channel.go), which starts the deleter
goroutine for the last client of an ephemeral channel; that runs Topic.DeleteExistingChannel (nsqd/topic.go), which
empties the channel and takes it out of the topic's map. No timer, disk or network lies on that path, only goroutine
hops and locks held for memory work, so a /stats request sent ``GONE_S`` after the client's end no longer lists it.
The broker's IOLoop finishes what the client sent before its end first: the end counts from the last answer too.
A capture tells the judge of a close at the connection's last packet, which a broker that noticed the FIN late
delays too: the answers asked before that are held until then."""

from __future__ import annotations

from nsq_protocol.http import HttpExchange
from nsq_protocol.monitors.events import BROKER, CLIENT, COMMAND, ERROR, FINS, RESPONSE
from nsq_protocol.monitors.monitor import Monitor
from nsq_protocol.monitors.stats_counters import EPHEMERAL, HTTP, stats_channels, stats_document, stats_topics

GONE_S = 0.5  # goroutine hops on a loaded machine (as emptying.py's LATE_S); the suite waits 1 s (NSQ-EPH-001)
NOT_TIMED = "the traffic's times are when a client read it, not when it crossed the wire"
UNSEEN = "a connection not seen whole may be a consumer of it"
UNSEEN_HTTP = "the broker's HTTP requests are not all in the traffic: an unseen /channel/create may have made it again"
REFUSED = "a SUB of it was refused or unanswered: a channel made without a client stays (D-51)"
UNANSWERED = "its last consumer left with a command unanswered: the broker may still have been busy with it"


class _Channel:
    __slots__ = ("consumers", "refused", "left_at", "made_at", "listed")

    def __init__(self) -> None:
        self.consumers: set[str] = set()  # the connections whose SUB of it was answered OK
        self.refused = False  # a SUB of it was not answered OK
        self.left_at: float | None = None  # when its last consumer's end reached the broker; None: one remains
        self.made_at = float("-inf")  # the last SUB naming it
        self.listed: HttpExchange | None = None  # the last /stats answer that listed it


class EphemeralChannelGone(Monitor):
    """D-50: an ephemeral channel whose consumers all left (no SUB of it since, none refused) is not listed by a
    /stats JSON answer requested ``GONE_S`` after the last one's end, unless /channel/create made it again; judged
    on capture times where every connection and HTTP request is in the traffic."""

    ITEMS = ("D-50",)
    KINDS = frozenset({COMMAND, RESPONSE, ERROR})
    RUNS = frozenset({FINS})

    def __init__(self) -> None:
        super().__init__()
        self._channels: dict[tuple[str, str], _Channel] = {}
        self._last_answer: dict[str, float] = {}  # connection -> its last answer's time

    def observe_run(self, judge, connection, run):
        """A FIN neither makes a channel nor subscribes to one."""

    def observe(self, judge, connection, event, answered):
        if event.kind == COMMAND:
            if event.name == "SUB" and event.channel and event.channel.endswith(EPHEMERAL):
                channel = self._channels.setdefault((event.topic, event.channel), _Channel())
                channel.left_at, channel.made_at = None, event.ts  # it is made again, or gets a client
            return
        self._last_answer[connection.name] = event.ts
        if answered is None or answered.name != "SUB" or not (answered.channel or "").endswith(EPHEMERAL):
            return
        channel = self._channels.setdefault((answered.topic, answered.channel), _Channel())
        if event.kind == RESPONSE and event.name == "OK":
            channel.consumers.add(connection.name)
        else:
            channel.refused = True

    def closed(self, judge, connection):
        subscription = connection.subscription
        channel = self._channels.get(subscription) if subscription else None
        if channel is None or connection.name not in channel.consumers:
            return
        if any(judge.connections[name].open for name in channel.consumers):
            return
        if any(judge.connections[name].unanswered for name in channel.consumers):
            self.skip("D-50", UNANSWERED)
            channel.refused = True
            return
        channel.left_at = max(self._end(judge.connections[name]) for name in channel.consumers)
        listed = channel.listed
        if listed is not None and listed.ts > channel.left_at + GONE_S and channel.made_at < channel.left_at:
            self._judge(judge, listed, subscription, channel)  # asked before the close reached the judge

    def _end(self, connection) -> float:
        """When the broker read the client's end, at the latest: its FIN (the broker's own comes only after
        RemoveClient), or the connection's last packet, and not before the last answer to what it sent."""
        if connection.client_done_at is not None and connection.closed_by == CLIENT:
            end = connection.client_done_at
        else:
            end = connection.closed_at
        return max(end, self._last_answer.get(connection.name, end))

    def http_exchange(self, judge, exchange: HttpExchange):
        request, response = exchange.request, exchange.response
        if request.path == "/channel/create":
            channel = self._channels.get((request.query("topic"), request.query("channel")))
            if channel is not None:
                channel.refused = True  # made without a client: it stays
                channel.left_at = None
            return
        if request.path != "/stats" or request.method != "GET" or response.status != 200 or not response.whole:
            return
        document = stats_document(exchange)
        if document is None:
            return
        for topic in stats_topics(document):
            for listed in stats_channels(topic):
                key = (topic["topic_name"], listed["channel_name"])
                channel = self._channels.get(key)
                if channel is None:
                    continue
                channel.listed = exchange
                if channel.left_at is not None and exchange.ts > channel.left_at + GONE_S:
                    self._judge(judge, exchange, key, channel)

    def _judge(self, judge, exchange: HttpExchange, key: tuple[str, str], channel: _Channel) -> None:
        why = (NOT_TIMED if not judge.timing else UNSEEN if not judge.all_started else
               UNSEEN_HTTP if not judge.http_seen else REFUSED if channel.refused else None)
        if why is not None:
            self.skip("D-50", why)
        else:
            self.report("D-50", BROKER, exchange.ts, HTTP, f"ephemeral channel {key[0]}/{key[1]} gone: its last "
                        f"consumer left {exchange.ts - channel.left_at:.2f} s before the request (more than "
                        f"{GONE_S} s)", "still listed", exchange)
        channel.left_at = channel.listed = None  # once is enough
