"""A /stats channel's counts of its deliveries by the consumer's locality (H-STATS-12; nsqd master after v1.3.0,
nsqd/protocol_v2.go messagePump, nsqd/stats.go ChannelStats): global_msg_count, zone_local_msg_count and
region_local_msg_count, each left out while zero. The pump counts each message it takes from the channel's
in-memory queues, before it samples it (D-45) and writes it, in one of the three by the consumer's topology and the
experiment's flag, which the traffic does not carry: their sum is what it judges. A message the pump reads from the
channel's disk queue is not counted; an ephemeral channel has none (its backend drops what overflows), so there the
sum is never below the deliveries on the channel since it was last made. A message is delivered within the output
buffer's timeout of its take, or held back by a client that reads slowly, at most a window (RDY) of them per
consumer: between two answers of one broker's life the sum grows by no more than the deliveries from the first
request to the second answer (and that buffer), and the windows of the channel's consumers, open or ended (what an
ended one's buffer held was counted, never delivered)."""

from __future__ import annotations

from dataclasses import dataclass, field
from heapq import heappop, heappush

from nsq_protocol.http import HttpExchange
from nsq_protocol.monitors.events import BROKER, COMMAND, FINS, MESSAGE, MESSAGES
from nsq_protocol.monitors.monitor import Monitor
from nsq_protocol.monitors.scan import LATE_S, UNSEEN, buffered_s
from nsq_protocol.monitors.stats_counters import EPHEMERAL, HTTP, stats_channels, stats_document, stats_topics

COUNTS = ("global_msg_count", "zone_local_msg_count", "region_local_msg_count")
MASTER = (1 << 31,)  # conformance/versions.py: master comes after every release
SAMPLED = "a consumer of the channel samples its messages: the pump counts those it drops (D-45)"


@dataclass
class _Channel:
    """One channel's deliveries, since the broker last made it (a deletion, an ephemeral one's last consumer gone,
    a restart start its counts again)."""

    delivered: int = 0  # message frames on its consumers
    lost: int = 0  # the windows (largest RDY) of its consumers that ended: taken, counted, perhaps never written
    sampled: bool = False
    buffered_s: float = 0.0  # the longest output buffer timeout of its consumers
    snapshot: tuple | None = None  # (the last answer's sum, deliveries and lost at its request, its start_time)


@dataclass(order=True)
class _Check:
    due: float
    sequence: int
    key: tuple = field(compare=False)
    channel: _Channel = field(compare=False)  # as it was at the answer: a channel made again since counts anew
    grown: int = field(compare=False)  # the sum's growth since the answer before
    delivered: int = field(compare=False)  # deliveries at that answer's request
    lost: int = field(compare=False)
    exchange: HttpExchange = field(compare=False)


class CountedByLocality(Monitor):
    """H-STATS-12: in each /stats JSON answer of a broker that counts by locality (told master, or an answer that
    carries the counts), a count that is zero left out; on an ephemeral channel the three counts' sum at least the
    deliveries on it since it was last made; between two answers of one broker's life, the sum grown by no more than
    the deliveries from the first request to the second answer, the output buffer's timeout after (capture times).
    Judged where every connection and HTTP request of the broker is in the traffic and no consumer of the channel
    samples."""

    ITEMS = ("H-STATS-12",)
    KINDS = frozenset({COMMAND, MESSAGE})
    RUNS = frozenset({MESSAGES, FINS})

    def __init__(self):
        super().__init__()
        self._channels: dict[tuple, _Channel] = {}
        self._rdy: dict[str, int] = {}  # consumer connection -> its largest RDY
        self._checks: list[_Check] = []
        self._sequence = 0
        self._crashed_at: float | None = None  # the broker's kill the counts last started again at

    def observe(self, judge, connection, event, answered):
        subscription = connection.subscription
        if subscription is None or subscription[1] is None:  # a SUB without its channel is refused
            return
        if event.kind == MESSAGE:
            self._channel(subscription).delivered += 1
            return
        if event.name == "SUB" and subscription[1].endswith(EPHEMERAL) and not any(
                other.open and other is not connection for other in judge.consumers(subscription)):
            self._channels.pop(subscription, None)  # D-50: made again by its first consumer
        elif event.name == "RDY" and event.number is not None:
            self._rdy[connection.name] = max(self._rdy.get(connection.name, 0), event.number)
        if event.name == "SUB":
            channel = self._channel(subscription)
            channel.sampled |= bool((connection.identify or {}).get("sample_rate"))
            channel.buffered_s = max(channel.buffered_s, buffered_s(connection))

    def observe_run(self, judge, connection, run):
        """Only the deliveries are counted; a FIN changes no count."""
        subscription = connection.subscription
        if run.key == MESSAGES and subscription is not None and subscription[1] is not None:
            self._channel(subscription).delivered += len(run.ts)

    def closed(self, judge, connection):
        subscription = connection.subscription
        window = self._rdy.pop(connection.name, 0)
        if subscription is None or subscription[1] is None:
            return
        channel = self._channels.get(subscription)
        if channel is not None:
            channel.lost += window
        if subscription[1].endswith(EPHEMERAL) and not any(other.open for other in judge.consumers(subscription)):
            self._channels.pop(subscription, None)  # D-50: gone with its last consumer

    def http(self, judge, action):
        if action.status == 200 and action.path in ("/channel/delete", "/topic/delete"):
            for key in [key for key in self._channels if key[0] == action.topic and action.channel in (None, key[1])]:
                del self._channels[key]

    def http_exchange(self, judge, exchange):
        document = stats_document(exchange) if exchange.response.status == 200 and exchange.response.whole else None
        if document is None:
            return
        entries = [(topic["topic_name"], channel) for topic in stats_topics(document)
                   for channel in stats_channels(topic)]
        counting = (judge.release or ()) >= MASTER or any(name in entry for _, entry in entries for name in COUNTS)
        if not counting:
            return
        if judge.crashed_at != self._crashed_at:  # the kill started every count again
            self._crashed_at = judge.crashed_at
            self._channels.clear()
        whole = judge.all_started and judge.http_seen
        for topic, entry in entries:
            self._entry(judge, exchange, (topic, entry["channel_name"]), entry, document.get("start_time"), whole)

    def _entry(self, judge, exchange, key, entry, start_time, whole):
        counts = [entry.get(name, 0) for name in COUNTS]
        zeros = [name for name in COUNTS if type(entry.get(name)) is int and entry[name] == 0]
        label = f"channel {'/'.join(key)}"
        if zeros:
            self.report("H-STATS-12", BROKER, exchange.ts, HTTP, f"{label}'s {', '.join(zeros)} left out while zero",
                        "0", exchange)
        if not all(isinstance(count, int) and not isinstance(count, bool) and count >= 0 for count in counts):
            return  # the document's shape is DocumentsAsNsqd's
        if not whole:
            self.skip("H-STATS-12", UNSEEN)
            return
        channel = self._channel(key)
        if channel.sampled:
            self.skip("H-STATS-12", SAMPLED)
            return
        total = sum(counts)
        if key[1].endswith(EPHEMERAL) and total < channel.delivered:
            self.report("H-STATS-12", BROKER, exchange.ts, HTTP, f"{label}'s counts at least {channel.delivered}, its "
                        "deliveries before the request (an ephemeral channel has no disk queue)", f"{total}", exchange)
        before, channel.snapshot = channel.snapshot, (total, channel.delivered, channel.lost, start_time)
        if before is None or before[3] != start_time or not judge.timing or channel.buffered_s == float("inf"):
            return
        self._sequence += 1
        check = _Check(exchange.answered + channel.buffered_s + LATE_S, self._sequence, key, channel, total - before[0],
                       before[1], before[2], exchange)
        heappush(self._checks, check)
        self.due = min(self.due, check.due)
        judge.want_tick(self.due)

    def tick(self, judge, now):
        while self._checks and self._checks[0].due <= now:
            check = heappop(self._checks)
            channel = check.channel
            if self._channels.get(check.key) is not channel:
                continue  # deleted since, perhaps made again: its counts too
            # taken and counted, not written yet: at most each consumer's window (the pump takes while in flight
            # stays below RDY), those that ended since (``lost``) and those still open
            held = sum(self._rdy.get(consumer.name, 0) for consumer in judge.consumers(check.key) if consumer.open)
            most = channel.delivered - check.delivered + channel.lost - check.lost + held
            if check.grown > most:
                self.report("H-STATS-12", BROKER, check.exchange.ts, HTTP,
                            f"channel {'/'.join(check.key)}'s counts grown by at most {most}, its deliveries from the "
                            "request before to the output buffer's timeout after this answer", f"{check.grown}",
                            check.exchange)
        self.due = self._checks[0].due if self._checks else float("inf")
        judge.want_tick(self.due)

    def finish(self, judge, now):
        while self._checks and self._checks[0].due > now:
            heappop(self._checks)
            self.skip("H-STATS-12", "the traffic ended within the output buffer's timeout of the answer")
        self.tick(judge, now)

    def _channel(self, key: tuple) -> _Channel:
        channel = self._channels.get(key)
        if channel is None:
            channel = self._channels[key] = _Channel()
        return channel
