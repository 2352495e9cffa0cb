"""Delivery: attempts (C-12), what FIN, REQ, TOUCH and a timeout do to a message (P-FIN-06,
P-REQ-07, P-TOUCH-04, D-11), and the client's FIN of a message it never got (P-FIN-04). The judge's ledger
(judge.py) follows each message across its channel's consumers."""

from __future__ import annotations

from nsq_protocol.monitors.events import BROKER, CLIENT, COMMAND, ERROR, FINS, LET_GO, MESSAGE, MESSAGES
from nsq_protocol.monitors.judge import buffered_margin
from nsq_protocol.monitors.ledger_runs import delivered, message_keys, run_keys, settled
from nsq_protocol.monitors.monitor import Monitor
from nsq_protocol.monitors.waits import Waits, before_a_tick

DEFAULT_MAX_MSG_TIMEOUT_MS = 900_000  # nsqd's --max-msg-timeout, where no IDENTIFY answer shows it
COMES_BACK_S = 6.0  # D-14: a channel younger than 5 s may see its timeouts and deferrals fire that much late
TIMED = "the times are when the client read the frames, not when they arrived"
CRASHED = "the broker crashed: a disk queue whose read position was not synced hands messages on again"


class AttemptsGrow(Monitor):
    """C-12: attempts is at least 1 and grows with each delivery of the same message, whose timestamp stays the same.
    Across connections only where the times are the wire's (a client reads its connections in its own order)."""

    ITEMS = ("C-12",)
    KINDS = frozenset({MESSAGE})
    RUNS = frozenset({MESSAGES})

    def __init__(self):
        super().__init__()
        self._last: dict[tuple, tuple] = {}  # message key (per connection without timing) -> (attempts, timestamp)

    def observe_run(self, judge, connection, run):
        keys = message_keys(connection, run)
        if judge.timing and judge.crashed_at is None and None not in run.attempts and min(run.attempts) >= 1 \
                and self._last.keys().isdisjoint(keys):
            self._last.update(zip(keys, zip(run.attempts, run.msg_ts_ns, strict=True), strict=True))  # first ones
            return
        for event in run.events():
            self.observe(judge, connection, event, None)

    def observe(self, judge, connection, event, answered):
        if event.kind != MESSAGE or event.attempts is None:
            return
        if judge.crashed_at is not None:
            self.skip("C-12", CRASHED)
            return
        key = judge.message_key(connection, event.msg_id)
        key = key if judge.timing else (connection.name, *key)
        before, stamp = self._last.get(key, (None, None))
        self._last[key] = (event.attempts, event.msg_ts_ns)
        if event.attempts < 1:
            self.report("C-12", BROKER, event.ts, connection.name, "attempts 1 or more",
                        f"attempts {event.attempts}", event)
        elif before is not None and event.attempts <= before:
            self.report("C-12", BROKER, event.ts, connection.name, f"attempts above {before} on a redelivery",
                        f"attempts {event.attempts}", event)
        elif before is not None and stamp != event.msg_ts_ns:
            self.report("C-12", BROKER, event.ts, connection.name, f"the timestamp {stamp} kept on a redelivery",
                        f"timestamp {event.msg_ts_ns}", event)

    def forget(self, judge, now):
        self._last = {key: last for key, last in self._last.items()
                      if (key if judge.timing else key[1:]) in judge.messages}


class FinishedStaysFinished(Monitor):
    """P-FIN-06: a message FIN'd while in flight (no E_FIN_FAILED) is gone for good: never delivered again."""

    ITEMS = ("P-FIN-06",)
    KINDS = frozenset({MESSAGE})
    RUNS = frozenset({MESSAGES})

    def observe_run(self, judge, connection, run):
        if "FIN" not in map(settled, delivered(judge, connection, run)):
            return
        for event in run.events():
            self.observe(judge, connection, event, None)

    def observe(self, judge, connection, event, answered):
        if event.kind != MESSAGE:
            return
        delivery = judge.messages.get(judge.message_key(connection, event.msg_id))
        if delivery is None or delivery.settled != "FIN" or delivery.settle_failed:
            return
        if judge.crashed_at is not None:
            self.skip("P-FIN-06", CRASHED)
            return
        if not judge.timing:  # a redelivery read after the FIN may have come before it (D-12 allows it then)
            self.skip("P-FIN-06", TIMED)
            return
        self.report("P-FIN-06", BROKER, event.ts, connection.name, "no delivery of a finished message",
                    f"delivered again {event.ts - delivery.settled_at:.2f} s after its FIN", event)


class NotTimedOutEarly(Monitor):
    """D-11, P-TOUCH-04, D-15: an unsettled message comes back no earlier than its msg_timeout after its delivery
    (after its last TOUCH, as far as --max-msg-timeout allows), even once its consumer closed. Where no IDENTIFY
    answer had shown --max-msg-timeout by the TOUCH, a redelivery before the TOUCH's deadline is judged at the end,
    against the maximum an answer showed by then, or nsqd's default."""

    ITEMS = ("D-11", "P-TOUCH-04", "D-15", "ID-40")
    KINDS = frozenset({MESSAGE})
    RUNS = frozenset({MESSAGES})

    def __init__(self):
        super().__init__()
        self._touched_early: list = []  # (event, connection, delivered at, TOUCH's deadline, margin)

    def observe_run(self, judge, connection, run):
        if all(map(settled, delivered(judge, connection, run))):
            return  # no message of the run comes back unsettled
        for event in run.events():
            self.observe(judge, connection, event, None)

    def observe(self, judge, connection, event, answered):
        if event.kind != MESSAGE:
            return
        delivery = judge.messages.get(judge.message_key(connection, event.msg_id))
        if delivery is None or delivery.settled is not None:
            return
        if not judge.timing:
            self.skip("D-11", TIMED)
            return
        if delivery.latest_timeout is None:
            self.skip("D-11", "the msg_timeout of the first delivery is the broker's flag, not in the traffic")
            return
        if event.ts < delivery.earliest_timeout:
            holder = judge.connections[delivery.connection]
            gone, later = holder.closed_at, holder.later("msg_timeout")
            # D-15: a consumer's close does not requeue its messages in flight; ID-40: the msg_timeout of a later
            # IDENTIFY, which nsqd's message pump does not take, would explain it
            item = "P-TOUCH-04" if delivery.touched else "D-15" if gone is not None and gone <= event.ts else \
                "ID-40" if later is not None and event.ts >= delivery.at + later / 1000 - buffered_margin(holder) \
                else "D-11"
            self.report(item, BROKER, event.ts, connection.name,
                        f"no redelivery before {delivery.earliest_timeout - delivery.at:.2f} s after the delivery",
                        f"redelivered after {event.ts - delivery.at:.2f} s", event)
            return
        margin = buffered_margin(judge.connections[delivery.connection])
        if delivery.touched and event.ts < delivery.latest_timeout - margin:  # the ceiling was not known
            self._touched_early.append((event, connection.name, delivery.at, delivery.latest_timeout, margin))

    def finish(self, judge, now):
        ceiling = (judge.max_msg_timeout_ms or DEFAULT_MAX_MSG_TIMEOUT_MS) / 1000
        for event, name, delivered_at, deadline, margin in self._touched_early:
            earliest = min(deadline, delivered_at + ceiling) - margin  # D-13: never past the ceiling
            if event.ts < earliest:
                self.report("P-TOUCH-04", BROKER, event.ts, name,
                            f"no redelivery before {earliest - delivered_at:.2f} s after the delivery (its TOUCH, "
                            f"--max-msg-timeout {ceiling:g} s)", f"redelivered after {event.ts - delivered_at:.2f} s",
                            event)


class FinOfUndelivered(Monitor):
    """P-FIN-04, the client's side: a FIN naming an ID this connection was never sent."""

    ITEMS = ("P-FIN-04",)
    KINDS = frozenset({MESSAGE, ERROR})
    RUNS = frozenset({MESSAGES})

    def __init__(self):
        super().__init__()
        self._delivered: dict[str, set] = {}
        self._partial: set[str] = set()  # connections whose IDs delivered before the judge let go are gone

    def observe(self, judge, connection, event, answered):
        if event.kind == MESSAGE and event.msg_id is not None:
            self._delivered.setdefault(connection.name, set()).add(event.msg_id)
        elif event.kind == ERROR and event.name == "E_FIN_FAILED" and connection.started and event.msg_id is not None \
                and event.msg_id not in self._delivered.get(connection.name, ()):
            if connection.name in self._partial:
                self.skip("P-FIN-04", LET_GO)
                return
            self.report("P-FIN-04", CLIENT, event.ts, connection.name, "FIN of a message delivered here",
                        f"FIN of {event.msg_id}, never delivered on this connection", event)

    def observe_run(self, judge, connection, run):
        self._delivered.setdefault(connection.name, set()).update(run.msg_ids)

    def forget(self, judge, now):
        self._partial.update(self._delivered)
        self._delivered = {name: {msg_id for msg_id in ids if msg_id in judge.connections[name].in_flight}
                           for name, ids in self._delivered.items() if judge.connections[name].open}


class SettledOrTimedOutComesBack(Monitor):
    """P-REQ-07 and D-11, the other way round: a message requeued with a delay, or timed out, is delivered again
    once the delay or the timeout has passed, to a consumer of its channel with room for it. Judged only where
    every consumer of the channel is in the traffic from its start, the channel was not paused, and one of them
    had room when the message was due."""

    ITEMS = ("P-REQ-07", "D-11")
    KINDS = frozenset({MESSAGE, COMMAND})
    RUNS = frozenset({MESSAGES, FINS})

    def __init__(self):
        super().__init__()
        self._waiting = Waits()  # message keys, each due when its delay or timeout has passed, plus COMES_BACK_S
        self._rest: tuple | None = None  # (connection, run, from) of a run whose rest follows this monitor's tick

    def observe_run(self, judge, connection, run):
        # a FIN settles for good; the rest as observe
        if run.key == MESSAGES and judge.timing and connection.subscription is not None and connection.msg_timeout_ms:
            self._deliveries(judge, connection, run, 0)

    def _deliveries(self, judge, connection, run, start):
        """The run's message frames from ``start`` on, up to the first one after a wait of theirs was due: one by
        one, this monitor's tick would come before it (``tick`` takes the rest)."""
        timeout_s = connection.msg_timeout_ms / 1000
        dues = [ts + timeout_s + COMES_BACK_S for ts in run.ts[start:]]
        stop = start + before_a_tick(run.ts[start:], dues, self.due)
        self._wait(judge, dues[:stop - start], run_keys(connection, run, start, stop), run.ts[start:stop])
        self._rest = (connection, run, stop) if stop < len(run.ts) else None

    def observe(self, judge, connection, event, answered):
        if not judge.timing or connection.subscription is None:
            return
        if event.kind == MESSAGE and event.msg_id is not None and connection.msg_timeout_ms:
            self._wait(judge, [event.ts + connection.msg_timeout_ms / 1000 + COMES_BACK_S],
                       [judge.message_key(connection, event.msg_id)], [event.ts])
        elif event.kind == COMMAND and event.name == "REQ" and event.msg_id in connection.in_flight \
                and event.number is not None:
            delivered_at = connection.in_flight[event.msg_id].at
            self._wait(judge, [event.ts + event.number / 1000 + COMES_BACK_S],
                       [judge.message_key(connection, event.msg_id)], [delivered_at])

    def _wait(self, judge, dues, keys, delivered):
        self._waiting.add(dues, keys, delivered)
        self.due = self._waiting.first
        judge.want_tick(self.due)

    def tick(self, judge, now):
        for due, key, delivered_at in self._waiting.due_by(now):
            self._judge(judge, due, key, delivered_at)
        self.due = self._waiting.first
        judge.want_tick(self.due)
        if self._rest is not None:
            self._deliveries(judge, *self._rest)

    def finish(self, judge, now):
        self.tick(judge, now)

    def _judge(self, judge, due, key, delivered_at):
        if judge.crashed_at is not None:
            return  # P-RST-11: a crash loses what was in flight
        delivery = judge.messages.get(key)
        if delivery is None and judge.let_go_at is not None and delivered_at <= judge.let_go_at:
            self.skip("D-11", LET_GO)
            return
        if delivery is None or delivery.at != delivered_at:
            return  # delivered again
        if delivery.settled == "FIN" and not delivery.settle_failed:
            return
        requeued = delivery.settled == "REQ" and not delivery.settle_failed
        if delivery.settled is not None and not requeued:
            return
        if not requeued and delivery.latest_timeout + COMES_BACK_S > due:  # a TOUCH moved its timeout since
            self._waiting.add([delivery.latest_timeout + COMES_BACK_S], [key], [delivered_at])
            return
        item = "P-REQ-07" if requeued else "D-11"
        topic, channel = key[0], key[1]
        consumers = judge.consumers((topic, channel))
        if not judge.all_started or not judge.http_seen:
            self.skip(item, "some connection, or the HTTP requests, of this nsqd are not in the traffic")
            return
        if judge.is_paused(topic, channel):
            return
        ready = [c for c in consumers if c.has_room(due)]
        if not ready:
            return  # no consumer had room: the broker could not deliver it
        what = (f"REQ with {delivery.requeue_delay_ms} ms" if requeued else "its msg_timeout passed unsettled")
        self.report(item, BROKER, due, delivery.connection, "the message delivered again on its channel",
                    f"not delivered again {COMES_BACK_S:g} s after it was due ({what}), with "
                    f"{', '.join(c.name for c in ready)} ready")
