"""Ephemeral topics and channels that nsqd v1.3.0 must keep, held against the /stats answers: only a channel's last
client leaving removes an ephemeral channel (nsqd/channel.go RemoveClient, the one path that deletes it), and only
its last channel's deletion an ephemeral topic (nsqd/topic.go DeleteExistingChannel). What no traffic can remove
stays listed; when the removal that may follow is asynchronous, the catalogue's other half (D-50's), a capture
cannot bound it, so only the keeping is judged here."""

from __future__ import annotations

from urllib.parse import unquote

from nsq_protocol.http import HttpExchange
from nsq_protocol.monitors.events import BROKER, COMMAND, FINS
from nsq_protocol.monitors.monitor import Monitor
from nsq_protocol.monitors.stats_counters import stats_channels, stats_document, stats_topics

HTTP = "HTTP"
EPHEMERAL = "#ephemeral"
UNSEEN_HTTP = "the broker's HTTP requests are not all in the traffic: an unseen delete may have removed it"
UNSEEN_SUB = "a connection not seen whole may have subscribed to the channel and left, which removes it"


class EphemeralKept(Monitor):
    """D-51: an ephemeral channel made by /channel/create and never subscribed stays in every /stats JSON answer
    asked after; D-52: an ephemeral topic an answer showed with a normal channel stays in every later answer. Both
    until a /topic/delete or /channel/delete of theirs or a restart (another start_time). H-08: such a channel's
    name, its '#' sent as %23 (a bare one begins the URL's fragment), is listed decoded, not as sent."""

    ITEMS = ("D-51", "D-52", "H-08")
    KINDS = frozenset({COMMAND})
    RUNS = frozenset({FINS})

    def __init__(self) -> None:
        super().__init__()
        # ephemeral channel made over HTTP -> the answer's time; only those made in a life an answer told (its
        # start_time): one made before the first answer may have gone with a restart no traffic shows
        self._created: dict[tuple[str, str], float] = {}
        self._subscribed: set[tuple[str, str]] = set()  # ephemeral channels a SUB named
        self._kept: set[str] = set()  # ephemeral topics shown with a normal channel
        self._start_time: int | None = None

    def observe_run(self, judge, connection, run):
        """A FIN names no channel."""

    def observe(self, judge, connection, event, answered):
        if event.name == "SUB" and event.channel and event.channel.endswith(EPHEMERAL):
            self._subscribed.add((event.topic, event.channel))

    def http_exchange(self, judge, exchange: HttpExchange):
        request, response = exchange.request, exchange.response
        if response.status != 200:
            return
        path, topic, channel = request.path, request.query("topic"), request.query("channel")
        if path == "/channel/create" and topic and channel and channel.endswith(EPHEMERAL) and \
                self._start_time is not None:
            self._created.setdefault((topic, channel), exchange.answered)
        elif path == "/channel/delete" and topic:
            self._created.pop((topic, channel), None)
            self._kept.discard(topic)  # perhaps its last normal channel: an answer shows whether one remains
        elif path == "/topic/delete" and topic:
            self._created = {key: at for key, at in self._created.items() if key[0] != topic}
            self._kept.discard(topic)
        elif path == "/stats" and request.method == "GET" and response.whole:
            self._stats(judge, exchange)

    def _stats(self, judge, exchange: HttpExchange) -> None:
        document = stats_document(exchange)
        if document is None:
            return
        listed = {topic["topic_name"]: {channel["channel_name"] for channel in stats_channels(topic)}
                  for topic in stats_topics(document)}
        params = exchange.request.params()  # a stats_document's request parses
        wanted_topic, wanted_channel = params.get("topic", ""), params.get("channel", "")
        if document.get("start_time") != self._start_time or not judge.http_seen:
            if not judge.http_seen and (self._created or self._kept):
                for item in self.ITEMS:
                    self.skip(item, UNSEEN_HTTP)
            # another life (a restart: no ephemeral one survives it, D-54) or one no answer told before
            self._created.clear()
            self._kept.clear()
            self._start_time = document.get("start_time")
            self._learn(listed, wanted_channel)
            return
        for (topic, channel), made in self._created.items():
            if made >= exchange.ts or wanted_topic not in ("", topic) or wanted_channel not in ("", channel):
                continue
            if (topic, channel) in self._subscribed or not judge.all_started:
                self.skip("D-51", UNSEEN_SUB if (topic, channel) not in self._subscribed else
                          "a client subscribed: its leaving removes the channel")
            elif channel not in listed.get(topic, ()):  # D-51: only a client's leaving removes it
                encoded = [name for name in listed.get(topic, ()) if isinstance(name, str) and name != channel
                           and unquote(name) == channel]
                if encoded:  # H-08: the %23 it was sent as kept in the name
                    self.report("H-08", BROKER, exchange.ts, HTTP, f"ephemeral channel {topic}/{channel}, its '#' "
                                "sent as %23", f"{encoded[0]} listed instead", exchange)
                else:
                    self.report("D-51", BROKER, exchange.ts, HTTP, f"ephemeral channel {topic}/{channel}, made by "
                                "/channel/create and never subscribed, still listed", "not listed", exchange)
        for topic in self._kept:
            if wanted_topic in ("", topic) and not wanted_channel and topic not in listed:
                self.report("D-52", BROKER, exchange.ts, HTTP, f"ephemeral topic {topic}, shown with a normal "
                            "channel and none deleted since, still listed", "not listed", exchange)
        self._learn(listed, wanted_channel)

    def _learn(self, listed: dict, wanted_channel: str) -> None:
        """D-52: an ephemeral topic shown with a normal channel (all its channels shown: no channel filter)."""
        if wanted_channel:
            return
        for topic, channels in listed.items():
            if topic.endswith(EPHEMERAL) and any(not name.endswith(EPHEMERAL) for name in channels):
                self._kept.add(topic)
