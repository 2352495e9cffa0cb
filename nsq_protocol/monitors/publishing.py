"""What was published is what is delivered: a deferred publish waits its delay (P-DPUB-04), and a delivered body
is a body published to its topic (C-09). Both join a publish with its deliveries by the body's hash."""

from __future__ import annotations

from heapq import heapify, heappop, heappush

from nsq_protocol.monitors.events import BROKER, COMMAND, ERROR, FINS, LET_GO, MESSAGE, MESSAGES, RESPONSE
from nsq_protocol.monitors.monitor import Monitor
from nsq_protocol.monitors.published import new_bodies

UNPUBLISHED = "some publishes to this nsqd may not be in the traffic"
EARLY_SLACK_S = 0.02  # the broker starts a DPUB's delay after it read the command, later than the wire showed it
PUBLISHED_SLACK_NS = 1_000_000_000  # between the broker's clock (C-09) and the traffic's
# D-34: a timestamp this long after its DPUB was sent is not the DPUB's time (the clocks' slack, and the broker's own
# latency before it stamps); judged for delays that would stamp a release later still
STAMPED_S, STAMPED_DELAY_MS = 1.5, 3000


class DeferredWaits(Monitor):
    """P-DPUB-04: a DPUB'd message is delivered no earlier than its delay after the DPUB; D-34: it carries the DPUB's
    time as its timestamp, not its release's (judged where the delay is long enough, ``STAMPED_DELAY_MS``, that the
    clocks' disagreement cannot blur the two). Judged per body where the body was published to the topic by DPUB
    alone, once."""

    ITEMS = ("P-DPUB-04", "D-34")
    KINDS = frozenset({COMMAND, MESSAGE})
    RUNS = frozenset({MESSAGES, FINS})

    def __init__(self):
        super().__init__()
        # topic -> body hash -> (ts, delay ms or 0) of its one publish; None: published more than once
        self._publishes: dict[str, dict[int, tuple | None]] = {}
        self._deferred: dict[str, set] = {}  # topic -> the bodies a deferred publish carried
        self._known_since = 0.0  # publishes before it were let go of (judge.MESSAGES_KEPT)

    def observe_run(self, judge, connection, run):
        """Only a message whose body a deferred publish carried is judged."""
        deferred = self._deferred.get(connection.topic) if run.key == MESSAGES else None
        if deferred and not deferred.isdisjoint(run.bodies):
            for event in run.events():
                self.observe(judge, connection, event, None)

    def observe(self, judge, connection, event, answered):
        if event.kind == COMMAND and event.name in ("PUB", "MPUB", "DPUB") and event.topic is not None:
            self._published(event.topic, event.ts, event.bodies, (event.number or 0) if event.name == "DPUB" else 0)
        elif event.kind == MESSAGE and event.attempts == 1 and connection.topic is not None and event.bodies:
            publish = self._publishes.get(connection.topic, {}).get(event.bodies[0])
            if publish is None or publish[1] == 0:
                return
            if not judge.timing:
                self.skip("P-DPUB-04", "the times are when the client read the frames")
                return
            sent, delay = publish
            if _published_before(event, self._known_since):
                self.skip("P-DPUB-04", LET_GO)  # a copy published before, its publish let go of
                return
            if event.ts < sent + delay / 1000 - EARLY_SLACK_S:
                self.report("P-DPUB-04", BROKER, event.ts, connection.name, f"delivered {delay} ms or more after "
                            "its DPUB", f"delivered {(event.ts - sent) * 1000:.0f} ms after it", event)
            stamped = event.msg_ts_ns / 1e9 - sent if event.msg_ts_ns is not None else None
            if delay >= STAMPED_DELAY_MS and stamped is not None and stamped > STAMPED_S:
                self.report("D-34", BROKER, event.ts, connection.name, "the DPUB's time as the message's timestamp",
                            f"a timestamp {stamped:.2f} s after the DPUB (its delay: {delay} ms)", event)

    def http(self, judge, action):
        if action.path in ("/pub", "/mpub") and action.status == 200:
            self._published(action.topic, action.ts, action.bodies or (), action.defer_ms)

    def _published(self, topic: str, ts: float, bodies, delay: int) -> None:
        publishes = self._publishes.setdefault(topic, {})
        if new_bodies(publishes, bodies):
            publishes.update(dict.fromkeys(bodies, (ts, delay)))
        else:
            for body in bodies:
                publishes[body] = None if body in publishes else (ts, delay)
        if delay:
            self._deferred.setdefault(topic, set()).update(bodies)

    def forget(self, judge, now):
        self._publishes, self._deferred, self._known_since = {}, {}, now


class DeliveredAsPublished(Monitor):
    """C-09: a message's body is the body published. A message the broker stamped (C-09) after the traffic began
    was published during it, so its body must be among those published to its topic by then; P-MPUB-03: among
    those of a publish not refused, where an MPUB was (one bad message refuses them all). Judged where every
    connection and the HTTP requests of this nsqd are in the traffic, decoded."""

    ITEMS = ("C-09", "P-MPUB-03")
    KINDS = frozenset({COMMAND, ERROR, MESSAGE})
    RUNS = frozenset({MESSAGES, FINS})

    def __init__(self):
        super().__init__()
        self._bodies: dict[str, dict] = {}  # topic -> {body hash: how many publishes to it carried it}
        self._refused: dict[tuple, int] = {}  # (topic, body hash) -> how many refused MPUBs carried it
        self._unknown: set[str] = set()  # topics with a publish whose bodies are not known
        self._known_since = 0.0  # publishes before it were let go of (judge.MESSAGES_KEPT)

    def observe(self, judge, connection, event, answered):
        if event.kind == COMMAND and event.name in ("PUB", "MPUB", "DPUB") and event.topic is not None:
            if event.bodies:
                self._carried(event.topic, event.bodies)
            else:
                self._unknown.add(event.topic)
            return
        if event.kind == ERROR:
            if answered is not None and answered.name == "MPUB" and answered.topic is not None:
                for body in answered.bodies:
                    self._refused[answered.topic, body] = self._refused.get((answered.topic, body), 0) + 1
            return
        if event.kind != MESSAGE or connection.topic is None or not event.bodies or event.msg_ts_ns is None:
            return
        if not self._judged(judge, connection.topic):
            self.skip("C-09", UNPUBLISHED)
            return
        if event.msg_ts_ns < judge.started_at * 1e9 + PUBLISHED_SLACK_NS:
            return  # published before the traffic began
        if _published_before(event, self._known_since):
            self.skip("C-09", LET_GO)
            return
        carried = self._bodies.get(connection.topic, {}).get(event.bodies[0], 0)
        if not carried:
            self.report("C-09", BROKER, event.ts, connection.name, "the body of a message published to "
                        f"{connection.topic}", "a body no publish to it carried", event)
        elif self._refused.get((connection.topic, event.bodies[0]), 0) >= carried:
            self.report("P-MPUB-03", BROKER, event.ts, connection.name, "nothing of a refused MPUB delivered",
                        "a body only refused MPUBs carried", event)

    def observe_run(self, judge, connection, run):
        """Where no message of the run is judged, or each has a body published to its topic and never refused by an
        MPUB (and no publish was let go of), the run breaks nothing."""
        topic = connection.topic
        if run.key == FINS or topic is None:
            return
        if not self._judged(judge, topic):
            stamped = len(run.msg_ts_ns) - run.msg_ts_ns.count(None)
            if stamped:
                self.skip("C-09", UNPUBLISHED, stamped)
            return
        if self._refused or self._known_since or not self._bodies.get(topic, {}).keys() >= set(run.bodies):
            for event in run.events():
                self.observe(judge, connection, event, None)

    def _judged(self, judge, topic: str) -> bool:
        return judge.timing and judge.all_started and judge.http_seen and topic not in self._unknown

    def http(self, judge, action):
        if action.path in ("/pub", "/mpub") and action.topic is not None and action.status == 200:
            if action.bodies is None:
                self._unknown.add(action.topic)
            else:
                self._carried(action.topic, action.bodies)

    def _carried(self, topic: str, bodies) -> None:
        counts = self._bodies.setdefault(topic, {})
        if new_bodies(counts, bodies):
            counts.update(dict.fromkeys(bodies, 1))
            return
        for body in bodies:
            counts[body] = counts.get(body, 0) + 1

    def forget(self, judge, now):
        self._bodies, self._refused, self._known_since = {}, {}, now


IDLE_S = 1.0  # a consumer with room that got nothing for this long has emptied its channel's queue
DUE_S = 2.0  # a message published to a channel with a consumer reaches it by then, unless nothing had room
# D-14: a deferred message is released by the queue scan (every SCAN_S) once its channel is on the scan's list,
# refreshed every REFRESH_S; with more than SELECTION channels a scan picks some at random
SCAN_S, REFRESH_S, SELECTION = 0.1, 5.0, 20
COPIED_S = 2.0  # the topic's pump copies a message to its channels this soon after its publish was answered


class PublishedIsDelivered(Monitor):
    """D-35, D-38, P-MPUB-06: a message the broker accepted (OK, or 200 over HTTP; every message of an MPUB) reaches
    every channel of its topic, so is delivered at least once; P-DPUB-03: so does a DPUB's with no delay, H-MPUB-06:
    an /mpub's whatever its defer; D-30: a deferred one's, once its delay and the scan that releases it are past
    (where the traffic made at most ``SELECTION`` channels: more are scanned at random). Judged per channel that had
    a consumer when it was published, once it is due: when a consumer of the channel has had room for a second and
    got nothing, the channel's queue is empty, so every message published to it must have been delivered. Where
    every connection and HTTP request of the nsqd is in the traffic."""

    ITEMS = ("D-35", "D-38", "P-MPUB-06", "P-DPUB-03", "H-MPUB-06", "D-30")
    KINDS = frozenset({MESSAGE, RESPONSE})
    RUNS = frozenset({MESSAGES})

    def __init__(self):
        super().__init__()
        self._published: list = []  # heap of (due, sequence, topic, bodies, item, channels expected, published at)
        self._sequence = 0
        self._delivered: dict[tuple, dict] = {}  # (topic, channel) -> {body: message IDs delivered}
        self._count: dict[tuple, dict] = {}  # (topic, channel) -> {body: messages published to it, due so far}
        self._last_delivery: dict[str, float] = {}
        self._made: set[tuple] = set()  # (topic, channel) subscribed to in the traffic and not deleted since
        self._paused_at: dict[str, float] = {}  # topic -> its latest /topic/pause

    def observe(self, judge, connection, event, answered):
        if event.kind == MESSAGE and connection.subscription and event.bodies and event.msg_id:
            self._delivery(connection, event.bodies, (event.msg_id,), event.ts)
        elif answered is not None and event.name == "OK" and judge.timing:
            if answered.name == "SUB" and answered.channel is not None:
                self._made.add((answered.topic, answered.channel))
            elif answered.name in ("PUB", "MPUB"):
                item = "D-35" if answered.name == "PUB" else "P-MPUB-06"
                self._publish(judge, event.ts, answered.topic, answered.bodies, item)
            elif answered.name == "DPUB":  # P-DPUB-03: a delay of 0 or none at all is no deferral
                self._publish(judge, event.ts, answered.topic, answered.bodies,
                              "D-30" if answered.number else "P-DPUB-03", answered.number or 0)

    def observe_run(self, judge, connection, run):
        if run.key == MESSAGES and connection.subscription:
            self._delivery(connection, run.bodies, run.msg_ids, run.ts[-1])

    def _delivery(self, connection, bodies, msg_ids, last: float) -> None:
        """Messages delivered on ``connection``, the last of them at ``last``."""
        delivered = self._delivered.setdefault(connection.subscription, {})
        for body, msg_id in zip(bodies, msg_ids, strict=True):
            ids = delivered.get(body)
            if ids is None:
                delivered[body] = {msg_id}
            else:
                ids.add(msg_id)
        self._last_delivery[connection.name] = last

    def http(self, judge, action):
        if action.status != 200:
            return
        if action.path == "/pub" and judge.timing:
            self._publish(judge, action.ts, action.topic, action.bodies or (), "D-30" if action.defer_ms else "D-35",
                          action.defer_ms)
        elif action.path == "/mpub" and judge.timing:  # H-MPUB-06: /mpub has no defer
            self._publish(judge, action.ts, action.topic, action.bodies or (),
                          "H-MPUB-06" if action.defer_ms else "D-35")
        elif action.path in ("/channel/empty", "/channel/delete", "/topic/delete"):
            self._published = [entry for entry in self._published if entry[2] != action.topic  # D-63
                               or action.channel is not None and action.channel not in entry[5]]
            heapify(self._published)
            if action.path != "/channel/empty":
                self._made = {made for made in self._made if made[0] != action.topic
                              or action.channel not in (None, made[1])}
        elif action.path == "/topic/empty":
            # D-64: only what waits in the topic goes: a message its pump copied to the channels (answered well
            # before the empty, and before any pause of the topic) stays there
            copied_by = min(action.ts, self._paused_at.get(action.topic, action.ts)) - COPIED_S
            self._published = [entry for entry in self._published if entry[2] != action.topic
                               or entry[6] <= copied_by]
            heapify(self._published)
        elif action.path == "/topic/pause":
            self._paused_at[action.topic] = action.ts

    def _publish(self, judge, ts, topic, bodies, item, defer_ms: int = 0):
        # an ephemeral channel drops what overflows its memory queue (D-53)
        channels = {c.channel for c in judge.connections.values() if c.topic == topic and c.open and c.channel
                    and not c.channel.endswith("#ephemeral")} if topic and not topic.endswith("#ephemeral") else set()
        if not channels:
            return
        # D-30: the scan releases it once its delay is past and its channel on the scan's list (a new one, within
        # REFRESH_S)
        due = ts + (defer_ms / 1000 + REFRESH_S + SCAN_S if defer_ms else 0.0) + DUE_S
        if bodies:
            self._sequence += 1
            heappush(self._published, (due, self._sequence, topic, tuple(bodies), item, frozenset(channels), ts))
        self.due = min(self.due, due)
        judge.want_tick(due)

    def tick(self, judge, now):
        while self._published and self._published[0][0] <= now:
            due, _, topic, bodies, item, channels, _ = heappop(self._published)
            counts = [self._count.setdefault((topic, channel), {}) for channel in channels]
            delivered = [self._delivered.get((topic, channel), {}) for channel in channels]
            # almost always: bodies due on each channel for the first time, each delivered there: all kept
            if all(new_bodies(counted, bodies) and got.keys() >= set(bodies)
                   for counted, got in zip(counts, delivered, strict=True)):
                for counted in counts:
                    counted.update(dict.fromkeys(bodies, 1))
                continue
            for body in bodies:
                for channel, counted, got in zip(channels, counts, delivered, strict=True):
                    counted[body] = counted.get(body, 0) + 1
                    if len(got.get(body, ())) < counted[body]:
                        self._judge(judge, now, topic, channel, item)
        self.due = self._published[0][0] if self._published else float("inf")
        judge.want_tick(self.due)

    def finish(self, judge, now):
        self.tick(judge, now)

    def forget(self, judge, now):
        for entry in self._published:
            self.skip(entry[4], LET_GO, len(entry[3]))  # their deliveries may be among those let go of
        self._published, self._delivered, self._count = [], {}, {}
        self.due = float("inf")

    def _judge(self, judge, now, topic, channel, item):
        if judge.crashed_at is not None:
            return  # P-RST-10: a crash loses what was in memory
        if not (judge.all_started and judge.http_seen):
            self.skip(item, "some connection, or the HTTP requests, of this nsqd are not in the traffic")
            return
        if judge.is_paused(topic, channel):
            return
        if item == "D-30" and len(self._made) > SELECTION:
            self.skip(item, f"more than {SELECTION} channels: the scan picks those it looks at by chance")
            return
        idle = [c for c in judge.consumers((topic, channel)) if c.has_room(now)
                and now - max(self._last_delivery.get(c.name, 0.0), c.subscribed_at or 0.0) >= IDLE_S]
        if idle:
            for broken in (item, "D-38") if item == "D-35" else (item,):  # D-38: at least once
                self.report(broken, BROKER, now, idle[0].name, f"every message accepted for {topic} delivered on "
                            f"channel {channel}", f"one never delivered, with {idle[0].name} idle and ready for "
                            f"{IDLE_S:g} s")


def _published_before(event, since: float) -> bool:
    """The message the broker stamped (C-09) before ``since``, give or take the clocks' slack."""
    return since > 0 and (event.msg_ts_ns is None or event.msg_ts_ns < since * 1e9 + PUBLISHED_SLACK_NS)
