"""Pausing over HTTP (D-60, D-61): a paused channel delivers nothing to its consumers (nsqd's pump sees it not ready
and flushes what it had buffered); a paused topic copies nothing to its channels, which still deliver what they hold.
A pause holds from its answer (nsqd pauses before answering) until its unpause is sent."""

from __future__ import annotations

from heapq import heappop, heappush

from nsq_protocol.monitors.events import BROKER, COMMAND, FINS, MESSAGE, MESSAGES, RESPONSE
from nsq_protocol.monitors.judge import http_action
from nsq_protocol.monitors.monitor import Monitor
from nsq_protocol.monitors.published import PublishTimes
from nsq_protocol.monitors.stats_counters import stats_channels, stats_document, stats_topics

# a message the channel's pump had taken just before the pause still goes out, flushed at once (the pump finds the
# client not ready); this long after the pause's answer nothing may
FLUSH_S = 1.0
# the pump may not yet have woken to the pause when a message published right after its answer reaches the channel
# (Go's select picks among the ready cases at random): one published this long after it may not go out
WOKEN_S = 0.2
TIMED = "the times are when the client read the frames, not when they arrived"


class PausedHoldsBack(Monitor):
    """D-60: a consumer of a paused channel gets no message ``FLUSH_S`` after the pause was answered, nor one
    published ``WOKEN_S`` after it. D-61: no channel of a paused topic gets a message published after the pause was
    answered. Until the unpause is sent; the pause goes with a deletion of its channel or topic. A /stats answer
    asked for after the pause's answer, before any unpause or deletion of it was sent, shows it paused. Judged where the
    broker's HTTP requests are in the traffic (an unpause unseen would explain a delivery), on channels and topics
    that are not ephemeral (one whose last consumer left is made anew, unpaused), and the broker not crashed (D-65:
    what restores the pause may not have been written)."""

    ITEMS = ("D-60", "D-61")
    KINDS = frozenset({COMMAND, RESPONSE, MESSAGE})
    RUNS = frozenset({MESSAGES, FINS})

    def __init__(self):
        super().__init__()
        self._paused: dict[tuple, float] = {}  # (topic,) or (topic, channel) -> when its pause was answered
        self._publishes = PublishTimes()
        self._stats: list = []  # heap of (answered, sequence, where, exchange): a /stats answer showing it unpaused
        self._undone: dict[tuple, float] = {}  # (topic,) or (topic, channel) -> its latest unpause or deletion sent
        self._sequence = 0

    def observe(self, judge, connection, event, answered):
        if event.kind == COMMAND:
            self._publishes.command(event)
        elif answered is not None:
            self._publishes.answered(event, answered)
        elif event.kind == MESSAGE and self._paused and connection.subscription is not None:
            self._delivered(judge, connection, event)

    def observe_run(self, judge, connection, run):
        """Only deliveries on a paused channel, or of a paused topic, count; FINs publish nothing."""
        subscription = connection.subscription
        if run.key == MESSAGES and subscription is not None \
                and (subscription in self._paused or subscription[:1] in self._paused):
            for event in run.events():
                self.observe(judge, connection, event, None)

    def http_exchange(self, judge, exchange):
        path = exchange.request.path
        action = http_action(exchange.ts, exchange.request, exchange.response.status)
        if action is None:
            if self._paused and path == "/stats":
                self._shown(judge, exchange)
            return
        where = (action.topic,) if action.channel is None else (action.topic, action.channel)
        if path in ("/pub", "/mpub"):
            self._publishes.exchange(action, exchange.answered)
        elif path.endswith("/unpause"):
            self._paused.pop(where, None)
            self._undone[where] = exchange.ts
        elif path.endswith("/pause") and action.status == 200:
            self._paused[where] = exchange.answered
        elif path in ("/channel/delete", "/topic/delete"):
            self._paused = {key: at for key, at in self._paused.items() if key[:len(where)] != where}
            self._undone[where] = exchange.ts

    def _shown(self, judge, exchange):
        """The /stats answer's paused flags of what is paused: judged once its answer is due, when the traffic has
        shown whether an unpause or a deletion was sent before it."""
        document = stats_document(exchange)
        if document is None:
            return
        for topic in stats_topics(document):
            name = topic["topic_name"]
            channels = [((name, channel["channel_name"]), channel) for channel in stats_channels(topic)]
            for where, stats in [((name,), topic), *channels]:
                paused_at = self._paused.get(where)
                if paused_at is not None and paused_at < exchange.ts and stats.get("paused") is False \
                        and not any(part.endswith("#ephemeral") for part in where):
                    self._sequence += 1
                    heappush(self._stats, (exchange.answered, self._sequence, where, exchange))
                    self.due = min(self.due, exchange.answered)
                    judge.want_tick(self.due)

    def tick(self, judge, now):
        while self._stats and self._stats[0][0] <= now:
            answered, _, where, exchange = heappop(self._stats)
            # a topic's unpause or deletion may have undone what its channel showed too
            undone = max(self._undone.get(where, float("-inf")), self._undone.get(where[:1], float("-inf")))
            if undone < answered and judge.http_seen and judge.crashed_at is None:
                item = "D-61" if len(where) == 1 else "D-60"
                self.report(item, BROKER, exchange.ts, "HTTP", f"{'/'.join(where)} paused in the /stats answer "
                            "asked for after its pause was answered", "paused: false", exchange)
        self.due = self._stats[0][0] if self._stats else float("inf")
        judge.want_tick(self.due)

    def finish(self, judge, now):
        self.tick(judge, now)

    def forget(self, judge, now):
        self._publishes.forget(now)

    def _delivered(self, judge, connection, event):
        topic, channel = connection.subscription
        channel_paused = self._paused.get((topic, channel))
        topic_paused = self._paused.get((topic,))
        if channel_paused is None and topic_paused is None:
            return
        if not judge.timing:
            self.skip("D-60", TIMED)
            return
        if not judge.http_seen or judge.crashed_at is not None or topic.endswith("#ephemeral") \
                or channel.endswith("#ephemeral"):
            self.skip("D-60" if channel_paused is not None else "D-61",
                      "an unseen unpause, a crash or an ephemeral channel made anew may explain the delivery")
            return
        sent = self._publishes.sent(judge, topic, event)
        if channel_paused is not None:
            if event.ts > channel_paused + FLUSH_S:
                self.report("D-60", BROKER, event.ts, connection.name, f"no delivery on channel {channel} while "
                            "it is paused", f"a message {event.ts - channel_paused:.2f} s after the pause", event)
                return
            if sent is not None and sent[0] > channel_paused:
                self.report("D-60", BROKER, event.ts, connection.name, f"no delivery on channel {channel} while "
                            "it is paused", f"a message published {sent[0] - channel_paused:.2f} s after the pause",
                            event)
                return
        if topic_paused is not None and sent is not None and sent[0] > topic_paused:
            self.report("D-61", BROKER, event.ts, connection.name, f"nothing published to {topic} while it is "
                        "paused reaches its channels", f"a message published {sent[0] - topic_paused:.2f} s after "
                        "the pause delivered", event)
