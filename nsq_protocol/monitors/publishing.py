"""What was published is what is delivered: a deferred publish waits its delay (P-DPUB-04), and a delivered body
is a body published to its topic (C-09). Both join a publish with its deliveries by the body's hash."""

from __future__ import annotations

from nsq_protocol.monitors.events import BROKER, COMMAND, MESSAGE
from nsq_protocol.monitors.monitor import Monitor

EARLY_SLACK_S = 0.02  # the broker starts a DPUB's delay after it read the command, later than the wire showed it
PUBLISHED_SLACK_NS = 1_000_000_000  # between the broker's clock (C-09) and the traffic's


class DeferredWaits(Monitor):
    """P-DPUB-04: a DPUB'd message is delivered no earlier than its delay after the DPUB. Judged per body where the
    body was published to the topic by DPUB alone, once."""

    ITEMS = ("P-DPUB-04",)

    def __init__(self):
        super().__init__()
        self._publishes: dict[tuple, list] = {}  # (topic, body hash) -> [(ts, delay ms or 0)]

    def observe(self, judge, connection, event, answered):
        if event.kind == COMMAND and event.name in ("PUB", "MPUB", "DPUB") and event.topic is not None:
            delay = (event.number or 0) if event.name == "DPUB" else 0
            for body in event.bodies:
                self._publishes.setdefault((event.topic, body), []).append((event.ts, delay))
        elif event.kind == MESSAGE and event.attempts == 1 and connection.topic is not None and event.bodies:
            publishes = self._publishes.get((connection.topic, event.bodies[0]))
            if not publishes or len(publishes) != 1 or publishes[0][1] == 0:
                return
            if not judge.timing:
                self.skip("P-DPUB-04", "the times are when the client read the frames")
                return
            sent, delay = publishes[0]
            if event.ts < sent + delay / 1000 - EARLY_SLACK_S:
                self.report("P-DPUB-04", BROKER, event.ts, connection.name, f"delivered {delay} ms or more after "
                            "its DPUB", f"delivered {(event.ts - sent) * 1000:.0f} ms after it", event)

    def http(self, judge, action):
        if action.path in ("/pub", "/mpub") and action.status == 200:
            for body in action.bodies or ():
                self._publishes.setdefault((action.topic, body), []).append((action.ts, action.defer_ms))


class DeliveredAsPublished(Monitor):
    """C-09: a message's body is the body published. A message the broker stamped (C-09) after the traffic began
    was published during it, so its body must be among those published to its topic by then. Judged where every
    connection and the HTTP requests of this nsqd are in the traffic, decoded."""

    ITEMS = ("C-09",)

    def __init__(self):
        super().__init__()
        self._bodies: dict[str, set] = {}  # topic -> body hashes published to it
        self._unknown: set[str] = set()  # topics with a publish whose bodies are not known

    def observe(self, judge, connection, event, answered):
        if event.kind == COMMAND and event.name in ("PUB", "MPUB", "DPUB") and event.topic is not None:
            if event.bodies:
                self._bodies.setdefault(event.topic, set()).update(event.bodies)
            else:
                self._unknown.add(event.topic)
            return
        if event.kind != MESSAGE or connection.topic is None or not event.bodies or event.msg_ts_ns is None:
            return
        if not (judge.timing and judge.all_started and judge.http_seen) or connection.topic in self._unknown:
            self.skip("C-09", "some publishes to this nsqd may not be in the traffic")
            return
        if event.msg_ts_ns < judge.started_at * 1e9 + PUBLISHED_SLACK_NS:
            return  # published before the traffic began
        if event.bodies[0] not in self._bodies.get(connection.topic, ()):
            self.report("C-09", BROKER, event.ts, connection.name, "the body of a message published to "
                        f"{connection.topic}", "a body no publish to it carried", event)

    def http(self, judge, action):
        if action.path in ("/pub", "/mpub") and action.topic is not None and action.status == 200:
            if action.bodies is None:
                self._unknown.add(action.topic)
            else:
                self._bodies.setdefault(action.topic, set()).update(action.bodies)
