"""Which channels a topic has, where the traffic shows it. nsqd v1.3.0 makes a channel on a SUB or /channel/create
of it, and removes one on /channel/delete, /topic/delete or its last client leaving an ephemeral channel; a topic it
makes afresh also gets, at once, the channels its nsqlookupds list for it (nsqd/nsqd.go GetTopic), which nsqd's own
traffic does not show. A capture of a broker already running does not show what it had either: a /stats JSON
answer does (each topic it lists, with all its channels, as of the answer). From such an answer on, with every
connection and HTTP request of the broker in the traffic, a topic's channels change only as the traffic shows.
A topic the judge knows the whole life of (Judge.is_fresh: a suite case's own) is known from its first mention
on: it had no channels then. A topic deleted since is not known again (made afresh it may get the lookupds'
channels) until a /stats answer shows it, nor an ephemeral one (it goes with its last channel)."""

from __future__ import annotations

from nsq_protocol.http import HttpExchange
from nsq_protocol.monitors.stats_counters import EPHEMERAL, stats_channels, stats_document, stats_topics

UNKNOWN = "no /stats JSON answer, with no SUB or /channel/create of the topic under way, showed its channels"


class Known:
    """One topic's channels, known since the /stats answer at ``since``: ``channels`` those there now (listed, or
    made since and answered), ``made`` each channel made since it was not there -> when its first creation was sent
    (a SUB or /channel/create: the channel exists from then at the earliest), ``depth`` the messages it held then."""

    __slots__ = ("since", "channels", "made", "depth")

    def __init__(self, since: float, channels: set[str], depth: int | None):
        self.since = since
        self.channels = channels
        self.made: dict[str, float] = {}
        self.depth = depth


class KnownChannels:
    """Fed by its monitor: ``command`` (each client command), ``mentioned`` (each HTTP request that names a topic,
    first), ``sub_answered``, ``exchange`` (every HTTP exchange), ``left`` (a consumer's connection ended),
    ``forget_all`` (the broker crashed); ``topics`` holds what is known."""

    def __init__(self) -> None:
        self.topics: dict[str, Known] = {}
        self._mentioned: set[str] = set()  # the topics the traffic named so far
        self._pending: dict[str, int] = {}  # topic -> its SUBs sent and not yet answered
        self._created_at: dict[str, float] = {}  # topic -> the last answer to a /channel/create of it

    def mentioned(self, judge, topic: str, ts: float) -> None:
        """The traffic names ``topic`` at ``ts``: at its first mention a fresh topic has no channels nor messages."""
        if topic not in self._mentioned:
            self._mentioned.add(topic)
            if judge.is_fresh(topic) and topic not in self.topics:
                self.topics[topic] = Known(ts, set(), 0)

    def command(self, judge, event) -> None:
        """A client's command: the topic it names is mentioned, and a SUB may make its channel."""
        topic = event.topic
        if not topic:
            return
        self.mentioned(judge, topic, event.ts)
        if event.name == "SUB" and event.channel:
            self._pending[topic] = self._pending.get(topic, 0) + 1
            self._creating(topic, event.channel, event.ts)

    def sub_answered(self, topic: str, channel: str, ok: bool) -> None:
        if self._pending.get(topic, 0) > 0:
            self._pending[topic] -= 1
        known = self.topics.get(topic)
        if known is None:
            return
        if ok:
            known.channels.add(channel)
        else:  # refused before or after it made the channel (E_SUB_FAILED comes after GetChannel)
            del self.topics[topic]

    def exchange(self, exchange: HttpExchange) -> None:
        request, status = exchange.request, exchange.response.status
        topic, channel = request.query("topic"), request.query("channel")
        if request.path == "/stats":
            self._learn(exchange)
        elif not topic:
            return
        elif request.path == "/channel/create" and channel:
            self._created_at[topic] = exchange.answered
            self._creating(topic, channel, exchange.ts)
            known = self.topics.get(topic)
            if known is not None and status == 200:
                known.channels.add(channel)
            elif known is not None:
                del self.topics[topic]
        elif request.path == "/channel/delete" and channel and status == 200 and topic in self.topics:
            known = self.topics[topic]
            known.channels.discard(channel)
            known.made.pop(channel, None)  # gone: made again by its next SUB or /channel/create
        elif request.path == "/topic/delete":
            self.topics.pop(topic, None)

    def left(self, topic: str, channel: str | None) -> None:
        """A consumer of ``topic``/``channel`` ended: an ephemeral channel may go with it (and is made again by the
        next SUB, whose time ``made`` then does not hold)."""
        if channel is not None and channel.endswith(EPHEMERAL):
            self.topics.pop(topic, None)

    def forget_all(self) -> None:
        self.topics.clear()

    def _creating(self, topic: str, channel: str, ts: float) -> None:
        known = self.topics.get(topic)
        if known is not None and channel not in known.channels and channel not in known.made:
            known.made[channel] = ts

    def _learn(self, exchange: HttpExchange) -> None:
        request, response = exchange.request, exchange.response
        if request.method != "GET" or response.status != 200 or not response.whole:
            return
        document = stats_document(exchange)
        params = request.params() or {}
        if document is None or params.get("channel"):
            return  # a channel filter lists only that channel
        for entry in stats_topics(document):
            topic = entry["topic_name"]
            if topic.endswith(EPHEMERAL) or entry.get("paused") or topic in self.topics:
                continue
            if self._pending.get(topic, 0) or self._created_at.get(topic, float("-inf")) >= exchange.ts:
                continue  # a channel made while the answer was written may or may not be in it
            depth = entry.get("depth")
            self.topics[topic] = Known(exchange.answered, {listed["channel_name"] for listed in stats_channels(entry)},
                                       depth if isinstance(depth, int) and not isinstance(depth, bool) else None)
