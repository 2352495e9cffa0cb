"""A consumer's settle after its message timed out (D-12): the channel's in-flight table no longer holds the message,
so nsqd refuses the FIN, REQ or TOUCH with the non-fatal E_<verb>_FAILED '<verb> <id> failed ID not in flight' (or
'client does not own message' once it went to another consumer). Come back to the same consumer, the same ID is in
flight again and its settle works (settling.py judges that, with the settle of a message now another's)."""

from __future__ import annotations

from heapq import heappop, heappush

from nsq_protocol.monitors.events import BROKER, COMMAND, ERROR, FINS, MESSAGE, MESSAGES
from nsq_protocol.monitors.ledger_runs import earliest_timeout, settling
from nsq_protocol.monitors.monitor import Monitor
from nsq_protocol.monitors.scan import LATE_S, UNSEEN, ScanList, buffered_s
from nsq_protocol.monitors.settling import IN_FLIGHT_S, NOT_OWNER, SETTLED_S, SETTLES

NOT_IN_FLIGHT = "ID not in flight"
UNSURE = "the settle came while the message's timeout may or may not have fired (the scan's and the buffer's slack)"


class LateSettleRefused(Monitor):
    """D-12: a FIN, REQ or TOUCH of a message the sender holds (the last delivery of it on the channel was the
    sender's, unsettled) that comes after its timeout surely fired (its deadline, the queue scan's lateness for a
    channel made in the last 5 s, a scan and ``LATE_S``: scan.ScanList) is refused, worded 'ID not in flight' unless
    the message went to another consumer meanwhile. Not judged where it came back to the sender about then (its
    settle may then have found it in flight again), in the band where the timeout may not have fired yet, where the
    msg_timeout is the broker's flag, where the traffic may hide channels (a scan picks among more than 20 at
    random), and where the times are not the wire's."""

    ITEMS = ("D-12",)
    KINDS = frozenset({COMMAND, MESSAGE, ERROR})
    RUNS = frozenset({MESSAGES, FINS})

    def __init__(self):
        super().__init__()
        self._channels = ScanList()
        self._late: dict[tuple, dict] = {}  # message key -> the late settle awaiting its answer
        self._due: list = []  # heap of (due, sequence, message key)
        self._sequence = 0

    def observe_run(self, judge, connection, run):
        if run.key == MESSAGES and not self._late:
            return
        # FINs of messages surely in flight are settling.py's
        if run.key == FINS and (connection.subscription is None or run.ts[-1] + IN_FLIGHT_S < min(
                map(earliest_timeout, filter(None, settling(connection, run))), default=float("inf"))):
            return
        for event in run.events():
            self.observe(judge, connection, event, None)

    def observe(self, judge, connection, event, answered):
        kind = event.kind
        if kind == COMMAND:
            self._channels.observe(event)
            if event.name in SETTLES and event.msg_id is not None and connection.subscription is not None:
                self._settle(judge, connection, event)
            return
        if event.msg_id is None or not self._late:
            return
        late = self._late.get(judge.message_key(connection, event.msg_id))
        if late is None:
            return
        if kind == MESSAGE:
            # back on the sender, its settle may have found it in flight again; on another, 'does not own' is right
            late["back" if connection.name == late["connection"] else "elsewhere"] = True
        elif connection.name == late["connection"] and event.name == f"E_{late['verb']}_FAILED":
            late.setdefault("refusal", event)

    def http(self, judge, action):
        self._channels.http(action)

    def closed(self, judge, connection):
        self._channels.closed(judge, connection)

    def _settle(self, judge, connection, event):
        delivery = connection.in_flight.get(event.msg_id)
        if delivery is None or delivery.settled is not None or not judge.timing or judge.crashed_at is not None:
            return  # not the sender's to settle (settling.py), or not judged by time
        if event.ts + IN_FLIGHT_S < delivery.earliest_timeout:
            return  # surely in flight: settling.py's
        if delivery.latest_timeout is None:
            self.skip("D-12", "the msg_timeout of the delivery is the broker's flag, not in the traffic")
            return
        fired = self._channels.deadline(connection.subscription, delivery.latest_timeout)
        if fired is None or event.ts <= fired + LATE_S:
            self.skip("D-12", UNSURE)
            return
        if not (judge.all_started and judge.http_seen) or self._channels.crowded:
            self.skip("D-12", UNSEEN)
            return
        key = judge.message_key(connection, event.msg_id)
        # a redelivery to the sender already in its output buffer shows on the wire this much later
        due = event.ts + max(SETTLED_S, buffered_s(connection) + LATE_S)
        self._late[key] = {"connection": connection.name, "verb": event.name, "at": event.ts, "due": due,
                           "event": event, "delivered": delivery.at}
        self._sequence += 1
        heappush(self._due, (due, self._sequence, key))
        self.due = min(self.due, due)
        judge.want_tick(self.due)

    def tick(self, judge, now):
        while self._due and self._due[0][0] <= now:
            _, _, key = heappop(self._due)
            late = self._late.get(key)
            if late is not None and late["due"] <= now:
                del self._late[key]
                self._judge(judge, late)
        self.due = self._due[0][0] if self._due else float("inf")
        judge.want_tick(self.due)

    def finish(self, judge, now):
        self.tick(judge, now)

    def _judge(self, judge, late):
        if late.get("back"):
            self.skip("D-12", "the message came back to the sender about when it settled it")
            return
        connection = judge.connections[late["connection"]]
        verb, refusal, command = late["verb"], late.get("refusal"), late["event"]
        if refusal is None:
            if (connection.closed_at is None or connection.closed_at > late["due"]) and connection.fatal_error is None:
                self.report("D-12", BROKER, late["due"], connection.name,
                            f"E_{verb}_FAILED: the message timed out before the {verb}",
                            f"{verb} {command.msg_id} accepted {late['at'] - late['delivered']:.2f} s after "
                            f"the delivery: no E_{verb}_FAILED within {late['due'] - late['at']:.2f} s",
                            command)
            return
        worded = refusal.text.endswith(NOT_IN_FLIGHT) or late.get("elsewhere") and refusal.text.endswith(NOT_OWNER)
        if judge.wording and not worded:
            self.report("D-12", BROKER, refusal.ts, connection.name, f"E_{verb}_FAILED '... {NOT_IN_FLIGHT}': the "
                        "message timed out and went to no other consumer", refusal.text, command, refusal)
