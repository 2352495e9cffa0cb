"""nsqd's queue scan (D-14): every 100 ms it looks at the channels of a list it refreshes every 5 s, so a message's
timeout fires within a scan of its deadline once its channel is on the list, and at most about 5 s late before.
A message that timed out goes back to its channel's queue and on to a consumer with room, through that consumer's
output buffer (D-40)."""

from __future__ import annotations

from nsq_protocol.monitors.events import BROKER, COMMAND, FINS, MESSAGE, MESSAGES
from nsq_protocol.monitors.ledger_runs import run_keys
from nsq_protocol.monitors.monitor import Monitor
from nsq_protocol.monitors.waits import Waits, before_a_tick

REFRESH_S = 5.0  # the channel list's refresh: a channel made since is scanned from the next one on
SCAN_S = 0.1
LATE_S = 0.5  # the broker's own latency, between the scan and the wire, beyond the output buffer's timeout
SELECTION = 20  # --queue-scan-selection-count: with more channels a scan picks some at random
DEFAULT_OUTPUT_BUFFER_TIMEOUT_MS = 250  # nsqd's --output-buffer-timeout, where no IDENTIFY answer shows it
UNSEEN = "some connection, or the HTTP requests, of this nsqd are not in the traffic"


class TimedOutInTime(Monitor):
    """D-14: an unsettled message is delivered again by its deadline (delivery plus msg_timeout, or its TOUCH's,
    never past delivery plus --max-msg-timeout: D-13 where that ceiling set it), or 5 s after its channel was made
    if later, plus a scan, the output buffer's timeout and ``LATE_S``. Judged where a consumer of the channel, open
    since before the delivery, had room from then on with nothing delivered on the channel meanwhile (its queue was
    empty: the timed-out message had nothing ahead of it), the channel was made in the traffic (its first SUB or
    /channel/create) and is one of at most ``SELECTION`` channels, not paused and without sampling; every
    connection and HTTP request of the nsqd in the traffic. ID-40: named where a later IDENTIFY's msg_timeout
    would explain the wait."""

    ITEMS = ("D-14", "D-13", "ID-40")
    KINDS = frozenset({COMMAND, MESSAGE})
    RUNS = frozenset({MESSAGES, FINS})

    def __init__(self):
        super().__init__()
        self._channels = ScanList()
        self._last_delivery: dict[tuple, float] = {}  # (topic, channel) -> its latest delivery
        self._window_set: dict[str, float] = {}  # connection -> its latest RDY or CLS
        self._paused_at: dict[tuple, float] = {}  # (topic,) or (topic, channel) -> its latest pause or unpause
        self._waiting = Waits()  # message keys, each due by when its timeout surely fired
        self._rest: tuple | None = None  # (connection, run, from) of a run whose rest follows this monitor's tick

    def observe_run(self, judge, connection, run):
        if run.key == MESSAGES and connection.subscription is not None:  # a FIN sets no window, makes no channel
            self._deliveries(judge, connection, run, 0)

    def _deliveries(self, judge, connection, run, start):
        """The run's message frames from ``start`` on, up to the first one after a wait of theirs was due: one by
        one, this monitor's tick would come before it (``tick`` takes the rest)."""
        subscription, timeout = connection.subscription, connection.msg_timeout_ms
        made = self._channels.made.get(subscription)
        stop = len(run.ts)
        if judge.timing and timeout and made is not None:
            dues = _dues(made, run.ts[start:], timeout / 1000, connection)
            stop = start + before_a_tick(run.ts[start:], dues, self.due)
            self._wait(judge, dues[:stop - start], run_keys(connection, run, start, stop),
                       run.ts[start:stop])
        self._last_delivery[subscription] = run.ts[stop - 1]
        self._rest = (connection, run, stop) if stop < len(run.ts) else None

    def observe(self, judge, connection, event, answered):
        if event.kind == COMMAND:
            self._channels.observe(event)
            if event.name in ("RDY", "CLS"):
                self._window_set[connection.name] = event.ts
            return
        subscription = connection.subscription
        if subscription is None or event.msg_id is None:
            return
        self._last_delivery[subscription] = event.ts
        timeout = connection.msg_timeout_ms
        made = self._channels.made.get(subscription)
        if judge.timing and timeout and made is not None:
            self._wait(judge, _dues(made, [event.ts], timeout / 1000, connection),
                       [judge.message_key(connection, event.msg_id)], [event.ts])

    def http(self, judge, action):
        self._channels.http(action)
        if action.status == 200 and action.path.endswith("pause"):
            self._paused_at[(action.topic,) if action.channel is None else (action.topic, action.channel)] = action.ts

    def closed(self, judge, connection):
        self._channels.closed(judge, connection)

    def _idle_since(self, connection, since: float, delivered_at: float, now: float) -> bool:
        """Open since before the delivery (no restart between), with room from ``since`` to ``now`` (no RDY or CLS
        between), its output buffer flushed by ``now``, and no sampling (D-45 drops what it takes)."""
        return connection.opened_at is not None and connection.opened_at < delivered_at \
            and self._window_set.get(connection.name, 0.0) <= since and connection.has_room(since) \
            and connection.has_room(now) and since + buffered_s(connection) + LATE_S <= now \
            and not (connection.identify or {}).get("sample_rate")

    def _wait(self, judge, dues, keys, delivered):
        self._waiting.add(dues, keys, delivered)
        self.due = self._waiting.first
        judge.want_tick(self.due)

    def tick(self, judge, now):
        for _, key, delivered_at in self._waiting.due_by(now):
            self._judge(judge, now, key, delivered_at)
        self.due = self._waiting.first
        judge.want_tick(self.due)
        if self._rest is not None:
            self._deliveries(judge, *self._rest)

    def finish(self, judge, now):
        self.tick(judge, now)

    def forget(self, judge, now):
        self._waiting.keep(judge.messages.__contains__)

    def _judge(self, judge, now, key, delivered_at):
        delivery = judge.messages.get(key)
        if delivery is None or delivery.at != delivered_at or delivery.settled is not None \
                or judge.crashed_at is not None:
            return  # delivered again, settled, emptied, or let go of
        subscription = key[:2]
        deadline = self._channels.deadline(subscription, delivery.latest_timeout)
        if deadline is None:
            return  # the channel is gone, and its messages with it
        if deadline + LATE_S > now:  # a TOUCH moved its deadline since
            self._wait(judge, [deadline + LATE_S], [key], [delivered_at])
            return
        ready = [c for c in judge.consumers(subscription) if self._idle_since(c, deadline, delivered_at, now)]
        if not ready:
            return
        if not (judge.all_started and judge.http_seen):
            self.skip("D-14", UNSEEN)
            return
        if self._last_delivery.get(subscription, 0.0) >= deadline or self._channels.crowded \
                or max(self._paused_at.get(subscription[:1], 0.0), self._paused_at.get(subscription, 0.0)) \
                >= delivered_at or judge.is_paused(*subscription):
            return  # something ahead of it in the queue, a random pick of channels, or a pause
        holder = judge.connections[delivery.connection]
        ceiling = holder.max_msg_timeout_ms or judge.max_msg_timeout_ms
        capped = delivery.touched and ceiling is not None \
            and abs(delivery.latest_timeout - (delivery.at + ceiling / 1000)) < 1e-6
        later = holder.later("msg_timeout")
        # ID-40: a later IDENTIFY's longer msg_timeout, which nsqd's message pump does not take, would explain it
        item = "D-13" if capped else "ID-40" if not delivery.touched and later is not None and \
            now < delivery.at + later / 1000 + SCAN_S + buffered_s(holder) + LATE_S else "D-14"
        self.report(item, BROKER, now, delivery.connection,
                    f"the message timed out and delivered again by {deadline - delivered_at:.2f} s after its "
                    f"delivery", f"not delivered again {now - delivered_at:.2f} s after it, with "
                    f"{ready[0].name} ready and nothing delivered on the channel since")


class ScanList:
    """The channels on the queue scan's list (D-14) as the traffic shows them: each one's first SUB or
    /channel/create since it was made (it is on the list within ``REFRESH_S`` of being made, which was no later),
    gone with its deletion or, ephemeral, its last consumer (D-50)."""

    def __init__(self):
        self.made: dict[tuple, float] = {}  # (topic, channel) -> its first SUB or /channel/create since it was made

    def observe(self, event) -> None:
        if event.name == "SUB" and event.channel is not None:
            self.made.setdefault((event.topic, event.channel), event.ts)

    def http(self, action) -> None:
        if action.status != 200:
            return
        if action.path == "/channel/create":
            self.made.setdefault((action.topic, action.channel), action.ts)
        elif action.path == "/channel/delete":
            self.made.pop((action.topic, action.channel), None)
        elif action.path == "/topic/delete":
            self.made = {key: made for key, made in self.made.items() if key[0] != action.topic}

    def closed(self, judge, connection) -> None:
        subscription = connection.subscription
        if subscription and (subscription[1] or "").endswith("#ephemeral") and not any(
                other.open for other in judge.consumers(subscription)):
            self.made.pop(subscription, None)  # D-50: gone with its last consumer

    @property
    def crowded(self) -> bool:
        """More channels than a scan looks at: which it picks is random."""
        return len(self.made) > SELECTION

    def deadline(self, subscription: tuple, timeout_at: float) -> float | None:
        """By when a scan has timed out a message of ``subscription`` due at ``timeout_at`` (unless ``crowded``);
        None: the channel is not known to exist."""
        made = self.made.get(subscription)
        return None if made is None else max(timeout_at, made + REFRESH_S) + SCAN_S


def _dues(made: float, delivered: list[float], timeout_s: float, connection) -> list[float]:
    """By when each message delivered at ``delivered`` is surely back on the wire, had it timed out."""
    listed, buffered = made + REFRESH_S, buffered_s(connection)
    return [max(at + timeout_s, listed) + SCAN_S + buffered + LATE_S for at in delivered]


def buffered_s(connection) -> float:
    answer = connection.identify_answer or {}
    buffered = answer.get("output_buffer_timeout")
    if isinstance(buffered, int) and buffered < 0:
        return float("inf")  # D-42: no timed flush
    return (buffered if isinstance(buffered, int) else DEFAULT_OUTPUT_BUFFER_TIMEOUT_MS) / 1000

