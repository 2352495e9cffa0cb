"""Channels that appear after a publish (nsqd/topic.go messagePump). A topic without channels keeps what is published
to it, and when its first channel appears (GetChannel wakes the pump) hands it all to the channels there then;
a deferred message's delay starts only then (channel.PutMessageDeferred). A channel made later gets only what the
pump copies after it joined the pump's list: never a message already copied to the topic's other channels. Which
channels a topic had the traffic shows only from a /stats answer on, or from its first mention where the judge
knows its whole life (channels_known.py)."""

from __future__ import annotations

from collections import Counter
from heapq import heappop, heappush
from itertools import repeat

from nsq_protocol.monitors.channels_known import UNKNOWN, KnownChannels
from nsq_protocol.monitors.events import BROKER, COMMAND, FINS, LET_GO, MESSAGE, MESSAGES, RESPONSE
from nsq_protocol.monitors.judge import http_action
from nsq_protocol.monitors.monitor import Monitor
from nsq_protocol.monitors.publishing import DUE_S, EARLY_SLACK_S, IDLE_S, REFRESH_S, SCAN_S, SELECTION
from nsq_protocol.monitors.stats_counters import EPHEMERAL

PUBLISHES = frozenset({"PUB", "MPUB", "DPUB"})
UNSEEN = "some connection, or the HTTP requests, of this nsqd are not in the traffic"
RESTART = "no connection open since its publish shows that the broker did not restart since"
MEM_QUEUE_SIZE = 10_000  # nsqd's --mem-queue-size by default: a topic keeps that many in memory, the rest on disk
# what changes a topic's or channel's queue (D-63, D-64): what was expected of them no longer holds
EMPTIED = frozenset({"/topic/empty", "/topic/delete", "/channel/empty", "/channel/delete"})


class FirstChannelGetsHeld(Monitor):
    """D-36: what was published to a topic without channels (a /stats answer showed it without any, or it was
    fresh, none made since) reaches its first channel once that appears (its SUB answered OK, or /channel/create
    200), so is delivered there at least once; D-31: a DPUB'd one not before its full delay after the channel's SUB or
    /channel/create was sent (while the topic held fewer than --mem-queue-size, ``MEM_QUEUE_SIZE`` unless
    /config/mem_queue_size tells: beyond, it went to disk and lost its delay, D-32), and by then, its scan (D-14)
    and ``DUE_S`` (with at most ``SELECTION`` channels in the traffic). Judged as PublishedIsDelivered judges a
    channel: once due, a consumer of the channel with room that got nothing for ``IDLE_S`` has emptied it; where
    every connection and HTTP request of the nsqd (Judge.knows: of the topic, where fresh) is in the traffic, and
    a connection open since the publish shows that no restart lost it (or its delay, D-33), or the topic's whole
    life is on one run of the broker."""

    ITEMS = ("D-36", "D-31")
    KINDS = frozenset({COMMAND, RESPONSE, MESSAGE})
    RUNS = frozenset({MESSAGES, FINS})

    def __init__(self):
        super().__init__()
        self.known = KnownChannels()
        self._held: dict[str, list] = {}  # topic -> [(body, delay ms, sent)] published while it had no channel
        self._expected: list = []  # heap of (due, sequence, topic, channel, body, item, when it was published)
        self._sequence = 0
        self._count: dict[tuple, int] = {}  # (topic, channel, body) -> messages expected there, due so far
        self._delivered: dict[tuple, set] = {}  # (topic, channel, body) of a watched channel -> message IDs
        self._watched: set[tuple] = set()  # channels something is expected of
        # (topic, body) of a DPUB held -> (its first channel, delivered there not before, when it was published)
        self._earliest: dict[tuple, tuple[str, float, float]] = {}
        self._last_delivery: dict[str, float] = {}
        self._channels: set[tuple] = set()  # channels made in the traffic (SELECTION)

    def observe(self, judge, connection, event, answered):
        if event.kind == COMMAND:
            self.known.command(judge, event)
        elif event.kind == MESSAGE:
            subscription = connection.subscription
            if subscription in self._watched and event.bodies and event.msg_id:
                self._delivered.setdefault((*subscription, event.bodies[0]), set()).add(event.msg_id)
                self._last_delivery[connection.name] = event.ts
                self._too_early(judge, connection.name, subscription, event)
        elif answered is not None and answered.topic:
            ok = event.name == "OK"
            if answered.name == "SUB" and answered.channel:
                first = self._first(answered.topic, answered.channel)
                self.known.sub_answered(answered.topic, answered.channel, ok)
                self._appeared(judge, answered.topic, answered.channel, ok, event.ts, first)
            elif answered.name in PUBLISHES and ok:
                delay = answered.number or 0 if answered.name == "DPUB" else 0
                self._published(answered.topic, answered.ts, answered.bodies, delay)

    def observe_run(self, judge, connection, run):
        if run.key == FINS:
            self.known.command(judge, next(run.events()))  # a FIN makes no channel: its topic's first mention at most
        elif connection.subscription in self._watched:  # only a watched channel's deliveries count
            for event in run.events():
                self.observe(judge, connection, event, None)

    def closed(self, judge, connection):
        if connection.subscription:
            self.known.left(*connection.subscription)

    def http_exchange(self, judge, exchange):
        request, status = exchange.request, exchange.response.status
        topic, channel = request.query("topic"), request.query("channel")
        if topic:
            self.known.mentioned(judge, topic, exchange.ts)
        if request.path == "/channel/create" and topic and channel:
            first = self._first(topic, channel)
            self.known.exchange(exchange)
            self._appeared(judge, topic, channel, status == 200, exchange.answered, first)
            return
        self.known.exchange(exchange)
        if status != 200 or not topic:
            return
        if request.path in ("/pub", "/mpub"):
            action = http_action(exchange.ts, request, status)
            if action.bodies is None:
                self._held.pop(topic, None)
                self.skip("D-36", "an /mpub's bodies are not known")
            else:  # H-MPUB-06: /mpub has no defer
                self._published(topic, exchange.ts, action.bodies, action.defer_ms if request.path == "/pub" else 0)
        elif request.path in EMPTIED:
            self._held.pop(topic, None)
            self._expected = [entry for entry in self._expected if entry[2] != topic
                              or channel is not None and entry[3] != channel]
            self._expected.sort()
            self._earliest = {key: at for key, at in self._earliest.items() if key[0] != topic}
            if request.path.endswith("/delete"):
                self._channels = {made for made in self._channels if made[0] != topic
                                  or channel not in (None, made[1])}

    def _published(self, topic: str, sent: float, bodies, delay_ms: int) -> None:
        if self._earliest:
            for body in bodies:
                if self._earliest.pop((topic, body), None) is not None:
                    self.skip("D-31", "its body was published again")
        known = self.known.topics.get(topic)
        if known is None or known.channels or sent < known.since:
            return  # published where a channel may already have been there: D-35's
        self._held.setdefault(topic, []).extend((body, delay_ms, sent) for body in bodies)

    def _first(self, topic: str, channel: str) -> bool:
        """``channel``, about to be answered, is the topic's first: none there before it, and no other made since
        the topic was known (either may have come first)."""
        known = self.known.topics.get(topic)
        return known is not None and not known.channels and set(known.made) <= {channel}

    def _appeared(self, judge, topic: str, channel: str, ok: bool, ts: float, first: bool) -> None:
        if judge.crashed_at is not None:  # P-RST-10: a crash loses what was in memory
            self.known.forget_all()
            self._held.clear()
        known = self.known.topics.get(topic)
        if not ok:
            self._held.pop(topic, None)
            return
        self._channels.add((topic, channel))
        held = self._held.pop(topic, ())
        if known is None:
            self.skip("D-36", UNKNOWN)
            return
        if not held:
            return
        if not first:
            self.skip("D-36", "another channel of the topic was made at the same time: either may be its first")
            return
        if topic.endswith(EPHEMERAL) or channel.endswith(EPHEMERAL):
            return  # an ephemeral channel drops what overflows its memory queue (D-53)
        sent = known.made[channel]
        kept = known.depth == 0 and len(held) < self._mem_queue_size(judge)
        copies = Counter(body for body, _, _ in held)
        for body, delay, published in held:
            # D-31: the scan releases it once its delay is past, the channel on its list within REFRESH_S
            due = ts + (delay / 1000 + REFRESH_S + SCAN_S if delay else 0.0) + DUE_S
            self._sequence += 1
            heappush(self._expected, (due, self._sequence, topic, channel, body, "D-31" if delay else "D-36",
                                      published))
            self.due = min(self.due, due)
            if delay and kept and copies[body] == 1:
                self._earliest[topic, body] = (channel, sent + delay / 1000 - EARLY_SLACK_S, published)
            elif delay:
                self.skip("D-31", "the topic held other messages, perhaps with its body, or more than its memory "
                          "queue takes (D-32: on disk a message loses its delay)")
        self._watched.add((topic, channel))
        judge.want_tick(self.due)

    def _too_early(self, judge, name: str, subscription: tuple[str, str], event) -> None:
        channel, earliest, published = self._earliest.get((subscription[0], event.bodies[0]), (None, 0.0, 0.0))
        if channel != subscription[1] or event.attempts != 1:
            return
        del self._earliest[subscription[0], event.bodies[0]]
        if not judge.timing:
            self.skip("D-31", "the times are when the client read the frames")
        elif not _lived_through(judge, subscription[0], published):  # D-33: a restart writes it to disk, delay lost
            self.skip("D-31", RESTART)
        elif event.ts < earliest:
            self.report("D-31", BROKER, event.ts, name, f"a DPUB'd message held by {subscription[0]}, without "
                        f"channels, delivered on {subscription[1]} its full delay after the channel appeared",
                        f"delivered {earliest + EARLY_SLACK_S - event.ts:.3f} s before that", event)

    @staticmethod
    def _mem_queue_size(judge) -> int:
        size = judge.limits.latest("mem_queue_size")
        return size if isinstance(size, int) and not isinstance(size, bool) else MEM_QUEUE_SIZE

    def tick(self, judge, now):
        while self._expected and self._expected[0][0] <= now:
            _, _, topic, channel, body, item, published = heappop(self._expected)
            key = (topic, channel, body)
            self._count[key] = self._count.get(key, 0) + 1
            if len(self._delivered.get(key, ())) < self._count[key]:
                self._judge(judge, now, topic, channel, item, published)
        self.due = self._expected[0][0] if self._expected else float("inf")
        judge.want_tick(self.due)

    def _judge(self, judge, now, topic, channel, item, published):
        if judge.crashed_at is not None:
            return  # P-RST-10: a crash loses what was in memory
        if not judge.knows(topic):
            self.skip(item, UNSEEN)
            return
        if not _lived_through(judge, topic, published):  # P-RST-10: a crash the traffic does not tell loses it too
            self.skip(item, RESTART)
            return
        if judge.is_paused(topic, channel):
            return
        if item == "D-31" and len(self._channels) > SELECTION:
            self.skip(item, f"more than {SELECTION} channels: the scan picks those it looks at by chance")
            return
        idle = [c for c in judge.consumers((topic, channel)) if c.has_room(now)
                and now - max(self._last_delivery.get(c.name, 0.0), c.subscribed_at or 0.0) >= IDLE_S]
        if idle:
            self.report(item, BROKER, now, idle[0].name, f"every message published to {topic} while it had no "
                        f"channel delivered on {channel}, its first", f"one never delivered, with {idle[0].name} "
                        f"idle and ready for {IDLE_S:g} s")

    def finish(self, judge, now):
        self.tick(judge, now)

    def forget(self, judge, now):
        for entry in self._expected:
            self.skip(entry[5], LET_GO)
        if self._held:
            self.skip("D-36", LET_GO)
        self._expected, self._delivered, self._count, self._earliest, self._held = [], {}, {}, {}, {}
        self.due = float("inf")


def _lived_through(judge, topic: str, since: float) -> bool:
    """The broker did not restart since ``since``: the traffic holds ``topic``'s whole life on one run of it (fresh),
    or a connection open since then is open still (a restart ends every connection)."""
    return judge.is_fresh(topic) or any(connection.opened_at is not None and connection.opened_at <= since
                                        and connection.open for connection in judge.connections.values())


class LaterChannelGetsLater(Monitor):
    """D-37: a channel made after a message was copied to its topic's channels never gets that message. The pump
    copies a message to the channels on its list, all at once, before any is delivered; a channel joins the list
    only once made. So a message delivered on one channel before another was made (its first SUB or
    /channel/create sent since a /stats answer, or the topic's first mention where fresh, showed it not there) is
    never delivered on that one (C-11: a topic's message IDs are unique). Where every connection and HTTP request
    of the nsqd (Judge.knows: of the topic, where fresh) is in the traffic."""

    ITEMS = ("D-37",)
    KINDS = frozenset({COMMAND, RESPONSE, MESSAGE})
    RUNS = frozenset({MESSAGES, FINS})

    def __init__(self):
        super().__init__()
        self.known = KnownChannels()
        self._first: dict[str, dict] = {}  # topic -> {message ID: (when, channel) of its first delivery}

    def observe(self, judge, connection, event, answered):
        if event.kind == COMMAND:
            self.known.command(judge, event)
            return
        if event.kind == RESPONSE:
            if answered is not None and answered.name == "SUB" and answered.topic and answered.channel:
                self.known.sub_answered(answered.topic, answered.channel, event.name == "OK")
                if answered.topic not in self.known.topics:
                    self.skip("D-37", UNKNOWN)
            return
        subscription = connection.subscription
        known = self.known.topics.get(connection.topic) if subscription and event.msg_id else None
        if known is None:
            return
        if judge.crashed_at is not None:
            self.known.forget_all()  # P-RST-11: a restored queue hands messages on again
            return
        firsts = self._first.setdefault(subscription[0], {})
        first = firsts.get(event.msg_id)
        if first is None:
            firsts[event.msg_id] = (event.ts, subscription[1])
            return
        made = known.made.get(subscription[1])
        if first[1] == subscription[1] or made is None or first[0] >= made:
            return
        if not judge.knows(subscription[0]):
            self.skip("D-37", UNSEEN)
            return
        self.report("D-37", BROKER, event.ts, connection.name, f"message {event.msg_id}, delivered on {first[1]} "
                    f"before {subscription[1]} was made, never delivered on {subscription[1]}",
                    f"delivered on it {event.ts - made:.3f} s after it was made", event)

    def observe_run(self, judge, connection, run):
        """A run of IDs none delivered on the topic before only records where each came first."""
        if run.key == FINS:
            self.known.command(judge, next(run.events()))  # a FIN makes no channel: its topic's first mention at most
            return
        topic = connection.topic
        if topic not in self.known.topics:
            return
        firsts = self._first.get(topic, {})
        if judge.crashed_at is not None or not firsts.keys().isdisjoint(run.msg_ids):
            for event in run.events():
                self.observe(judge, connection, event, None)
            return
        came = zip(run.ts, repeat(connection.channel))
        self._first.setdefault(topic, firsts).update(zip(run.msg_ids, came, strict=True))

    def closed(self, judge, connection):
        if connection.subscription:
            self.known.left(*connection.subscription)

    def http_exchange(self, judge, exchange):
        topic = exchange.request.query("topic")
        if topic:
            self.known.mentioned(judge, topic, exchange.ts)
        self.known.exchange(exchange)  # a topic deleted is not known again, nor what was delivered on it judged

    def forget(self, judge, now):
        self._first = {}
