"""Who may settle a message (D-10): its channel tracks each message in flight with the consumer it went to; only that
consumer's FIN, REQ or TOUCH works, another consumer of the channel is told it does not own the message."""

from __future__ import annotations

from collections import OrderedDict
from heapq import heappop, heappush
from itertools import repeat

from nsq_protocol.monitors.events import BROKER, COMMAND, ERROR, FINS, NON_FATAL_ERRORS
from nsq_protocol.monitors.ledger_runs import earliest_timeout, settled, settling, timed_out_on
from nsq_protocol.monitors.monitor import Monitor

SETTLED_S = 0.5  # an E_*_FAILED follows its command at once: this much later, its absence says it settled
IN_FLIGHT_S = 0.5  # a command this long before the message's timeout could fire surely found it in flight
NOT_OWNER = "client does not own message"
SETTLES = frozenset({"FIN", "REQ", "TOUCH"})
EMPTIES = frozenset({"/channel/empty", "/channel/delete", "/topic/delete"})


class SettledByOwner(Monitor):
    """D-10: a FIN, REQ or TOUCH of a message surely in flight to the sender (long before its timeout could fire)
    is not refused; one of a message surely in flight to another consumer of the channel is refused with
    E_<verb>_FAILED '... client does not own message' (a FIN: P-FIN-05). D-12 where the message timed out on the
    sender before: come back to it, its settle works; gone on to another consumer, the sender's late settle is
    refused as not its own. Judged where the broker's HTTP requests are in the traffic (a /channel/empty at the same
    time would explain a refusal) and the times are the wire's."""

    ITEMS = ("D-10", "P-FIN-05", "D-12")
    KINDS = frozenset({COMMAND, ERROR})
    RUNS = frozenset({FINS})

    def __init__(self):
        super().__init__()
        # (connection, ID) -> its owner's settle (when, the item its refusal breaks), in time order: an OrderedDict,
        # whose oldest entry is found at once however many went before it (a dict's first live entry is found past
        # every deleted one)
        self._owned: OrderedDict[tuple, tuple[float, str]] = OrderedDict()
        self._foreign: list = []  # heap of (due, sequence, connection, ID, verb, the item it breaks, sent at)
        self._waiting: set[tuple] = set()  # (connection, ID) of the foreign settles not yet judged
        self._refused: dict[tuple, object] = {}  # (connection, ID) -> the E_*_FAILED a foreign settle got
        self._emptied: dict[str, float] = {}  # topic -> its latest channel empty or deletion
        self._sequence = 0

    def observe_run(self, judge, connection, run):
        if connection.subscription is None or not judge.timing or judge.crashed_at is not None:
            return
        mine = settling(connection, run)
        owned = list(zip(repeat(connection.name), run.msg_ids))
        # the common case: each FIN its owner's, of a message surely in flight, none settled twice in SETTLED_S
        if not all(mine) or any(map(settled, mine)) or run.ts[-1] + IN_FLIGHT_S >= min(map(earliest_timeout, mine)) \
                or connection.name in map(timed_out_on, mine) or not self._owned.keys().isdisjoint(owned):
            for event in run.events():
                self.observe(judge, connection, event, None)
            return
        self._owned.update(zip(owned, zip(run.ts, repeat("D-10")), strict=True))
        self._expire(run.ts[-1])  # as at each FIN: those before it that got no refusal in SETTLED_S succeeded

    def observe(self, judge, connection, event, answered):
        if event.kind == ERROR:
            if event.name in NON_FATAL_ERRORS and event.msg_id is not None:
                self._failed(judge, connection, event)
            return
        if event.name not in SETTLES or event.msg_id is None or connection.subscription is None \
                or not judge.timing or judge.crashed_at is not None:
            return
        mine = connection.in_flight.get(event.msg_id)
        if mine is not None:
            if mine.settled is None and event.ts + IN_FLIGHT_S < mine.earliest_timeout:
                self._expire(event.ts)
                # D-12: timed out here and come back here, the same ID: still this consumer's to settle
                self._owned[connection.name, event.msg_id] = (
                    event.ts, "D-12" if mine.timed_out_on == connection.name else "D-10")
            return
        latest = judge.messages.get(judge.message_key(connection, event.msg_id))
        if latest is not None and latest.connection != connection.name and latest.settled is None \
                and event.ts + IN_FLIGHT_S < latest.earliest_timeout:
            self._sequence += 1
            # D-12: the late settle of the consumer the message timed out on, now another's
            item = "D-12" if latest.timed_out_on == connection.name else "P-FIN-05" if event.name == "FIN" else "D-10"
            heappush(self._foreign, (event.ts + SETTLED_S, self._sequence, connection.name, event.msg_id,
                                     event.name, item, event.ts))
            self._waiting.add((connection.name, event.msg_id))
            self.due = min(self.due, event.ts + SETTLED_S)
            judge.want_tick(self.due)

    def http(self, judge, action):
        if action.path in EMPTIES and action.topic is not None:
            self._emptied[action.topic] = action.ts

    def _failed(self, judge, connection, event):
        key = (connection.name, event.msg_id)
        if key in self._waiting:
            self._refused.setdefault(key, event)
            return
        owned = self._owned.pop(key, None)
        if owned is None or self._explained(judge, connection, owned[0]):
            return
        sent, item = owned
        self.report(item, BROKER, event.ts, connection.name, "the owner's settle of a message in flight to it "
                    "accepted", f"refused {(event.ts - sent) * 1000:.0f} ms after it", event)

    def tick(self, judge, now):
        while self._foreign and self._foreign[0][0] <= now:
            due, _, name, msg_id, verb, item, sent = heappop(self._foreign)
            self._waiting.discard((name, msg_id))
            refusal = self._refused.pop((name, msg_id), None)
            connection = judge.connections[name]
            if self._explained(judge, connection, sent):
                continue
            if refusal is None and (connection.closed_at is None or connection.closed_at > due) \
                    and connection.fatal_error is None:
                self.report(item, BROKER, due, name, f"{verb} of a message in flight to another consumer refused",
                            f"{verb} {msg_id} accepted: no E_{verb}_FAILED within {SETTLED_S:g} s")
            elif refusal is not None and judge.wording and not refusal.text.endswith(NOT_OWNER):
                self.report(item, BROKER, refusal.ts, name, f"{verb} refused with '{NOT_OWNER}': the message "
                            "is in flight to another consumer", refusal.text, refusal)
        self.due = self._foreign[0][0] if self._foreign else float("inf")
        judge.want_tick(self.due)

    def finish(self, judge, now):
        self.tick(judge, now)

    def _explained(self, judge, connection, sent: float) -> bool:
        """A refusal or an acceptance the traffic cannot judge: the HTTP requests unseen, or the channel emptied or
        deleted about then."""
        if not judge.http_seen:
            self.skip("D-10", "the broker's HTTP requests are not in the traffic (a /channel/empty would explain it)")
            return True
        return self._emptied.get(connection.topic, float("-inf")) >= sent - SETTLED_S

    def _expire(self, now: float) -> None:
        """The owners' settles past ``SETTLED_S`` succeeded: no refusal came."""
        while self._owned:
            _, (sent, _item) = next(iter(self._owned.items()))
            if sent >= now - SETTLED_S:
                return
            self._owned.popitem(last=False)
