"""What /stats shows after a restart (another start_time): nsqd v1.3.0 writes only its non-ephemeral topics and
channels to its metadata file (nsqd/nsqd.go GetMetadata) and starts every counter from zero (nsqd/stats.go: the
counters live in the Topic and Channel it makes anew). So an ephemeral name listed after the restart was made by a
client or request since, and a topic's message_count counts only the publishes since: Topic.PutMessage(s), from
PUB, MPUB, DPUB, /pub and /mpub alone, counts it. "Since" begins at the last answer of the life before: whatever was
sent before that answer reached the old life. A channel's message_count also counts the messages restored from its
topic's disk queue, so it has no such bound."""

from __future__ import annotations

from nsq_protocol.http import HttpExchange
from nsq_protocol.monitors.events import BROKER, COMMAND, FINS
from nsq_protocol.monitors.monitor import Monitor
from nsq_protocol.monitors.stats_counters import EPHEMERAL, HTTP, stats_channels, stats_document, stats_topics
from nsq_protocol.wire import ProtocolViolation, parse_mpub_body

PUBLISHES = ("PUB", "MPUB", "DPUB")
MAKERS = frozenset({"/pub", "/mpub", "/topic/create", "/channel/create"})  # the HTTP requests that make names
UNSEEN = "a connection not seen whole may have made names or published since the restart"
UNSEEN_HTTP = "the broker's HTTP requests are not all in the traffic: an unseen one may have made names or published"
ITEMS = ("D-54", "P-RST-06", "P-RST-13")


class RestartForgets(Monitor):
    """D-54, P-RST-06: a /stats JSON answer after a restart lists no ephemeral topic or channel that no SUB, publish
    or HTTP request named since the life before last answered; P-RST-13: each topic's message_count at most the
    messages published to it since. Judged where every connection and HTTP request is in the traffic."""

    ITEMS = ITEMS
    KINDS = frozenset({COMMAND})
    RUNS = frozenset({FINS})

    def __init__(self) -> None:
        super().__init__()
        self._life: int | None = None  # the start_time the answers told last
        self._restarted = False
        self._topics: set[str] = set()  # topics named since the last answer of the life before
        self._channels: set[tuple[str, str]] = set()
        self._sent: dict[str, float] = {}  # topic -> messages published to it since (inf: a count not known)

    def observe_run(self, judge, connection, run):
        """A FIN names no topic and publishes nothing."""

    def observe(self, judge, connection, event, answered):
        if event.name == "SUB" and event.topic is not None:
            self._topics.add(event.topic)
            self._channels.add((event.topic, event.channel))
        elif event.name in PUBLISHES and event.topic is not None:
            self._topics.add(event.topic)
            count = 1 if event.name != "MPUB" else event.number if event.number is not None else float("inf")
            self._sent[event.topic] = self._sent.get(event.topic, 0) + count

    def http_exchange(self, judge, exchange: HttpExchange):
        request, response = exchange.request, exchange.response
        if request.path in MAKERS:
            topic = request.query("topic")
            self._topics.add(topic)
            self._channels.add((topic, request.query("channel")))
            if request.path in ("/pub", "/mpub"):
                self._sent[topic] = self._sent.get(topic, 0) + _messages(request)
            return
        if request.path != "/stats" or request.method != "GET" or response.status != 200 or not response.whole:
            return
        document = stats_document(exchange)
        if document is None or not isinstance(document.get("start_time"), int):
            return
        if document["start_time"] != self._life:
            self._restarted = self._life is not None
            self._life = document["start_time"]
        if not self._restarted:
            self._topics.clear()  # all sent before reached this life, which a restart would end
            self._channels.clear()
            self._sent.clear()
            return
        why = UNSEEN if not judge.all_started else UNSEEN_HTTP if not judge.http_seen else None
        if why is not None:
            for item in ITEMS:
                self.skip(item, why)
            return
        for topic in stats_topics(document):
            self._topic(exchange, topic)

    def _topic(self, exchange: HttpExchange, topic: dict) -> None:
        name = topic["topic_name"]
        if name.endswith(EPHEMERAL) and name not in self._topics:
            self._remembered(exchange, f"topic {name}")
        for channel in stats_channels(topic):
            listed = channel["channel_name"]
            if listed.endswith(EPHEMERAL) and (name, listed) not in self._channels:
                self._remembered(exchange, f"channel {name}/{listed}")
        count, most = topic.get("message_count"), self._sent.get(name, 0)
        if isinstance(count, int) and count > most:  # P-RST-13: the counter started from zero
            self.report("P-RST-13", BROKER, exchange.ts, HTTP, f"topic {name}'s message_count at most {most}, the "
                        "messages published to it since the restart", f"{count}", exchange)

    def _remembered(self, exchange: HttpExchange, what: str) -> None:
        for item in ("D-54", "P-RST-06"):
            self.report(item, BROKER, exchange.ts, HTTP, f"no ephemeral {what} after the restart: nothing named it "
                        "since", "listed", exchange)


def _messages(request) -> float:
    """The most messages a /pub or /mpub can have put (inf where its body is not all in the traffic)."""
    if request.size is not None:
        return float("inf")
    if request.path == "/pub":
        return 1
    lines = request.body.count(b"\n") + 1  # text mode: one message a line, empty ones skipped
    if request.query("binary") is None:
        return lines
    try:  # binary mode unless the value is a false one (nsqd/http.go doMPUB): either way, the larger
        return max(lines, len(parse_mpub_body(request.body)))
    except ProtocolViolation:
        return lines
