"""A SUB refused because what it names is being torn down (nsqd/protocol_v2.go SUB). nsqd gets the topic and the
channel, adds the client, and if the channel or topic is ephemeral and exiting, takes the client off, sleeps 100 ms
and tries once more before it answers ``E_SUB_FAILED SUB failed to deleted topic/channel``; a channel exiting
already refuses the client itself (Channel.AddClient: ``SUB failed exiting``). Only a deletion makes a topic or
channel exit while the broker runs: /topic/delete, /channel/delete, the last client of an ephemeral channel leaving
(and an ephemeral topic's last channel going with it). The broker's own shutdown makes them exit too, and ends
every connection: a refusal the broker outlived (it sent something after it on a connection open before it) was no
shutdown's."""

from __future__ import annotations

from nsq_protocol.monitors.events import BROKER, ERROR, HEARTBEAT, MESSAGE, MESSAGES, RESPONSE
from nsq_protocol.monitors.monitor import Monitor
from nsq_protocol.monitors.stats_counters import EPHEMERAL

DELETED = "SUB failed to deleted topic/channel"
EXITING = "SUB failed exiting"
RETRY_S = 0.1  # the sleep before the one retry
CLOCK_SLACK_S = 0.005
# a deletion is memory work and goroutine hops (an ephemeral topic or channel has no disk queue): a SUB sent this
# long after one began no longer meets it exiting
RACE_S = 5.0
OUTLIVED_S = 1.0
UNSEEN = "a connection not seen whole, or an HTTP request not in the traffic, may have deleted it"


class SubFailsOnlyOnDeletion(Monitor):
    """P-SUB-07: ``E_SUB_FAILED SUB failed to deleted topic/channel`` answers a SUB of an ephemeral topic or channel
    only, at least ``RETRY_S`` after the SUB (its one retry), and, as ``SUB failed exiting``, only while a deletion
    of that topic or channel runs: one begun (a /topic/delete, a /channel/delete, a consumer of its ephemeral channel
    leaving, or of any of its channels for an ephemeral topic) at most ``RACE_S`` before the SUB and before the
    refusal (``OUTLIVED_S`` after it: a consumer's end reaches the judge with its connection's last packet, after
    the broker began the deletion). Judged on a refusal the broker outlived by ``OUTLIVED_S``; the deletion's
    timing where the times are the wire's."""

    ITEMS = ("P-SUB-07",)
    KINDS = frozenset({RESPONSE, ERROR, MESSAGE, HEARTBEAT})
    RUNS = frozenset({MESSAGES})

    def __init__(self):
        super().__init__()
        self._deletions: dict[tuple[str, str | None], list[float]] = {}  # (topic, channel or None) -> when
        self._refused: list = []  # (connection, SUB, refusal) until the broker answers something after them
        self._consumers: set[str] = set()  # connections whose SUB of an ephemeral topic or channel was answered OK

    def observe_run(self, judge, connection, run):
        if not self._refused:
            return  # a message frame answers no SUB: it only shows the broker outlived a refusal
        for event in run.events():
            self.observe(judge, connection, event, None)

    def observe(self, judge, connection, event, answered):
        if self._refused and event.ts >= self._refused[0][2].ts + OUTLIVED_S:
            self._outlived(judge, event.ts, connection.opened_at)
        if answered is None or answered.name != "SUB":
            return
        text, topic, channel = event.text, answered.topic or "", answered.channel or ""
        if event.name == "OK" and (topic.endswith(EPHEMERAL) or channel.endswith(EPHEMERAL)):
            self._consumers.add(connection.name)
        if event.name != "E_SUB_FAILED":
            return
        if text not in (DELETED, EXITING):
            return  # the other refusal: too many consumers (P-SUB-06)
        if text == DELETED and not (topic.endswith(EPHEMERAL) or channel.endswith(EPHEMERAL)):
            self.report("P-SUB-07", BROKER, event.ts, connection.name, f"'{DELETED}' only for an ephemeral topic "
                        "or channel", f"for {topic}/{channel}", answered, event)
        elif text == DELETED and judge.timing and event.ts - answered.ts < RETRY_S - CLOCK_SLACK_S:
            self.report("P-SUB-07", BROKER, event.ts, connection.name, f"'{DELETED}' after one retry "
                        f"{RETRY_S * 1000:.0f} ms later", f"{(event.ts - answered.ts) * 1000:.0f} ms after the SUB",
                        answered, event)
        else:
            self._refused.append((connection.name, answered, event))

    def closed(self, judge, connection):
        subscription = connection.subscription
        if connection.name in self._consumers:
            self._deleted(subscription[0], subscription[1], connection.closed_at)

    def http_exchange(self, judge, exchange):
        request = exchange.request
        topic = request.query("topic")
        if topic and request.path in ("/topic/delete", "/channel/delete") and exchange.response.status == 200:
            self._deleted(topic, request.query("channel") if request.path == "/channel/delete" else None,
                          exchange.ts)

    def _deleted(self, topic: str, channel: str | None, ts: float) -> None:
        self._deletions.setdefault((topic, channel), []).append(ts)
        if topic.endswith(EPHEMERAL) and channel is not None:
            self._deletions.setdefault((topic, ""), []).append(ts)  # with its last channel an ephemeral topic goes

    def _explained(self, judge, sub, refusal) -> bool:
        topic = sub.topic or ""
        keys = ((topic, None), (topic, sub.channel or ""), *(((topic, ""),) if topic.endswith(EPHEMERAL) else ()))
        earliest = sub.ts - RACE_S if judge.timing else float("-inf")
        return any(earliest <= at <= refusal.ts + OUTLIVED_S for key in keys for at in self._deletions.get(key, ()))

    def _outlived(self, judge, now: float, opened: float | None) -> None:
        """The broker sent something at ``now`` on a connection opened at ``opened``."""
        while self._refused and self._refused[0][2].ts + OUTLIVED_S <= now and opened is not None and \
                opened < self._refused[0][2].ts:
            name, sub, refusal = self._refused.pop(0)
            if self._explained(judge, sub, refusal):
                continue
            if not (judge.all_started and judge.http_seen):
                self.skip("P-SUB-07", UNSEEN)
                continue
            window = f" begun within {RACE_S:g} s before the SUB" if judge.timing else ""
            self.report("P-SUB-07", BROKER, refusal.ts, name, f"'{refusal.text}' only while a deletion of "
                        f"{sub.topic}/{sub.channel} runs", f"no /topic/delete, /channel/delete or ephemeral "
                        f"consumer leaving{window}", sub, refusal)

    def finish(self, judge, now):
        for _, sub, refusal in self._refused:
            if not self._explained(judge, sub, refusal):
                self.skip("P-SUB-07", "the traffic shows nothing of the broker after the refusal: it may have been "
                          "shutting down")
