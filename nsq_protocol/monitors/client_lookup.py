"""A consumer on nsqlookupd (NSQC-LOOKUP): it asks GET /lookup?topic=<its topic> (NSQC-LOOKUP-001) again and again
at the poll interval, never faster than half of it (NSQC-LOOKUP-002), asks every lookupd it was given
(NSQC-LOOKUP-005) and goes on after one was found down (NSQC-LOOKUP-006); it joins each producer an answer lists
(NSQC-LOOKUP-001, NSQC-LOOKUP-003, NSQC-LOOKUP-005, NSQC-LOOKUP-006) and does not connect again to one the answers
left out once its connection closed (NSQC-LOOKUP-004).

The client's queries reach the judge as ``judge.lookupd_query`` (an HttpExchange, or None where the lookupd was
down), its nsqd connections with the host:port it dialed (``Connection.server``), which is what /lookup lists. The
traffic is one client's (the client suite's): another client's connections would look like this one's."""

from __future__ import annotations

import json

from nsq_protocol.monitors.events import CLIENT, COMMAND
from nsq_protocol.monitors.monitor import Monitor

FASTEST = 0.5  # of the poll interval: NSQC-LOOKUP-002's "never faster than half of it"
# of the poll interval: a longer silence is a poll missed. Libraries add up to 30 % jitter and the time of the
# query and its connects to a poll, and a loaded machine stalls one more: ansq's 1 s poll was seen 2.5 s late
# with six libraries judged at once on 2 cores. NSQC-LOOKUP-002's "3 to 10 queries in 5 intervals" is its case's
# count, which judges the interval itself
MISSED = 4.0
JOIN_WITHIN_S = 6.0  # NSQC-LOOKUP-003, NSQC-LOOKUP-005, NSQC-LOOKUP-006
FIRST_JOIN_WITHIN_S = 10.0  # NSQC-LOOKUP-001 says no time: its case's wait for each connection
NO_CLOCK = "the times are when the client read the frames, not when they arrived"
NO_INTERVAL = "the application's lookupd poll interval is not known to the judge"


def listed(exchange) -> frozenset[str] | None:
    """The producers a 200 answer to GET /lookup lists, as host:tcp_port (L-HTTP-04; the pre-1.0 answer wraps them
    in "data"); None for any other exchange."""
    if exchange.request.path != "/lookup" or exchange.response.status != 200:
        return None
    try:
        document = json.loads(exchange.response.body)
        document = document.get("data", document) if isinstance(document.get("data"), dict) else document
        return frozenset(f"{producer['broadcast_address']}:{producer['tcp_port']}"
                         for producer in document["producers"])
    except (ValueError, AttributeError, KeyError, TypeError):
        return None


def _stopped(judge) -> bool:
    """The client shows it stopped: it had nsqd connections, and every one is closed or closing (CLS)."""
    return bool(judge.connections) and all(not connection.open or connection.closing
                                           for connection in judge.connections.values())


class PollsLookupd(Monitor):
    """NSQC-LOOKUP-001: a query of /lookup names the application's topic, with GET. NSQC-LOOKUP-002 (SHOULD): two
    answered queries of one lookupd are at least half the poll interval apart (one reset is retried at once by some
    HTTP clients; a query right after an nsqd connection closed is go-nsq's recheck, consumer.go lookupdRecheckChan),
    and the client's queries never pause for
    ``MISSED`` intervals while it runs; NSQC-LOOKUP-006 (SHOULD) where that pause follows a query that found its
    lookupd down. NSQC-LOOKUP-005: given several lookupds, it asks each one within ``MISSED`` intervals per lookupd
    of its first query (a client that asks one lookupd, down, never finds the producers another lists). Other paths
    (/ping) are no polls. The poll interval is the application's (a library's own where it polls at a fixed one)."""

    ITEMS = ("NSQC-LOOKUP-001", "NSQC-LOOKUP-002", "NSQC-LOOKUP-005", "NSQC-LOOKUP-006")

    def __init__(self):
        super().__init__()
        self._last: dict[str, float] = {}  # lookupd -> when the client last had an answer from it
        self._asked: set[str] = set()  # the lookupds the client asked, answered or not
        self._latest: tuple[float, str, bool] | None = None  # the client's last query: when, where, found down
        self._every_due = float("inf")  # NSQC-LOOKUP-005: by then every lookupd given was asked
        self._reported: set[str] = set()  # the timing items reported once: one slow library is one finding
        self._last_close = float("-inf")  # when an nsqd connection of the client last closed

    def lookupd_query(self, judge, lookupd, ts, exchange):
        application = judge.application
        if exchange is not None:
            if exchange.request.path != "/lookup":
                return
            self._form(application, lookupd, exchange)
        interval_ms = application.lookupd_poll_interval_ms if application else None
        if interval_ms is None or not judge.timing:
            for item in ("NSQC-LOOKUP-002", "NSQC-LOOKUP-005", "NSQC-LOOKUP-006"):
                self.skip(item, NO_CLOCK if interval_ms is not None else NO_INTERVAL)
            return
        interval = interval_ms / 1000
        asked = exchange.ts if exchange is not None else ts
        if self._latest is None and (application.lookupds or 0) > 1:
            self._every_due = asked + application.lookupds * MISSED * interval
        self._latest = (asked, lookupd, exchange is None)
        self._asked.add(lookupd)
        if exchange is not None:  # a query reset is retried at once by some HTTP clients (urllib3): no poll of its own
            previous = self._last.get(lookupd)
            if previous is not None and asked - previous < FASTEST * interval and self._last_close <= previous:
                self._once("NSQC-LOOKUP-002", asked, lookupd, f"queries of nsqlookupd {lookupd} at least "
                           f"{FASTEST * interval:g} s apart (half the poll interval {interval:g} s)",
                           f"one {asked - previous:.3f} s after the one before", exchange)
            self._last[lookupd] = asked
        self.due = min(self._every_due, asked + MISSED * interval)
        judge.want_tick(self.due)

    def closed(self, judge, connection):
        self._last_close = max(self._last_close, connection.closed_at)

    def _form(self, application, lookupd, exchange):
        topic = application.topic if application else None
        if topic is None:
            self.skip("NSQC-LOOKUP-001", "the application's topic is not known to the judge")
            return
        params = exchange.request.params() or {}
        if exchange.request.method != "GET" or params.get("topic") != topic:  # L-HTTP-04
            self.report("NSQC-LOOKUP-001", CLIENT, exchange.ts, lookupd, f"GET /lookup?topic={topic}",
                        f"{exchange.request.method} {exchange.request.target}", exchange)

    def tick(self, judge, now):
        application = judge.application
        interval = application.lookupd_poll_interval_ms / 1000
        if now >= self._every_due:
            self._every_due = float("inf")
            if len(self._asked) < application.lookupds:
                self.report("NSQC-LOOKUP-005", CLIENT, now, ", ".join(sorted(self._asked)),
                            f"each of the {application.lookupds} lookupds given asked within "
                            f"{application.lookupds * MISSED * interval:g} s of the first query",
                            f"{len(self._asked)} asked ({', '.join(sorted(self._asked))})")
        asked, lookupd, found_down = self._latest
        if now >= asked + MISSED * interval:
            if _stopped(judge):
                self.skip("NSQC-LOOKUP-002", "the client stopped: its connections closed")
            else:
                self._once("NSQC-LOOKUP-006" if found_down else "NSQC-LOOKUP-002", now, lookupd,
                           f"the next /lookup within {MISSED * interval:g} s ({MISSED:g} poll intervals of "
                           f"{interval:g} s)" + (", the lookupd having been found down" if found_down else ""),
                           f"none since {now - asked:.2f} s")
            self._latest = (float("inf"), lookupd, found_down)  # one silence, one finding
        self.due = min(self._every_due, self._latest[0] + MISSED * interval)
        judge.want_tick(self.due)

    def _once(self, item, ts, lookupd, expected, observed, *evidence):
        if item not in self._reported:
            self._reported.add(item)
            self.report(item, CLIENT, ts, lookupd, expected, observed, *(e for e in evidence if e is not None))

    def finish(self, judge, now):
        if self._every_due < float("inf"):
            self.skip("NSQC-LOOKUP-005", "the traffic ends before every lookupd given had its turn")


class JoinsListedProducers(Monitor):
    """A producer a /lookup answer lists gets a connection with SUB: within 10 s of the client's first answer
    (NSQC-LOOKUP-001), within 6 s of a later one (NSQC-LOOKUP-003), within 6 s of the first answer of a lookupd
    found down before (NSQC-LOOKUP-006; NSQC-LOOKUP-005 while another lookupd's last query found it down too). A
    producer a later answer of the same lookupd leaves out is no longer awaited."""

    ITEMS = ("NSQC-LOOKUP-001", "NSQC-LOOKUP-003", "NSQC-LOOKUP-005", "NSQC-LOOKUP-006")
    KINDS = frozenset({COMMAND})

    def __init__(self):
        super().__init__()
        self._joined: set[str] = set()  # producers with a SUB on a connection to them
        self._awaited: dict[str, tuple] = {}  # producer -> (due, item, lookupd, the answer listing it)
        self._down: dict[str, bool] = {}  # lookupd -> its last query found it down
        self._answered = False  # the client had an answer listing producers

    def observe(self, judge, connection, event, answered):
        if event.kind == COMMAND and event.name == "SUB" and connection.server is not None:
            self._joined.add(connection.server)
            self._awaited.pop(connection.server, None)

    def lookupd_query(self, judge, lookupd, ts, exchange):
        if exchange is None:
            self._down[lookupd] = True
            return
        producers = listed(exchange)
        if producers is None:
            return
        came_back, self._down[lookupd] = self._down.get(lookupd, False), False
        if came_back:
            item = "NSQC-LOOKUP-005" if any(self._down.values()) else "NSQC-LOOKUP-006"
        else:
            item = "NSQC-LOOKUP-003" if self._answered else "NSQC-LOOKUP-001"
        self._answered = True
        for producer, (_, _, where, _) in list(self._awaited.items()):
            if where == lookupd and producer not in producers:
                del self._awaited[producer]
        if not judge.timing:
            self.skip(item, NO_CLOCK)
            return
        within = FIRST_JOIN_WITHIN_S if item == "NSQC-LOOKUP-001" else JOIN_WITHIN_S
        for producer in producers - self._joined - self._awaited.keys():
            self._awaited[producer] = (exchange.answered + within, item, lookupd, exchange)
            self.due = min(self.due, exchange.answered + within)
        judge.want_tick(self.due)

    def tick(self, judge, now):
        for producer, (due, item, lookupd, exchange) in list(self._awaited.items()):
            if due > now:
                continue
            del self._awaited[producer]
            if any(connection.server is None for connection in judge.connections.values()):
                self.skip(item, "an nsqd connection whose address the judge was not told")
            else:
                self.report(item, CLIENT, due, lookupd, f"a connection with SUB to {producer}, which /lookup "
                            f"lists, within {due - exchange.answered:g} s of the answer", "none", exchange)
        self.due = min((due for due, *_ in self._awaited.values()), default=float("inf"))
        judge.want_tick(self.due)

    def finish(self, judge, now):
        for _, item, _, _ in self._awaited.values():
            self.skip(item, "the traffic ends before the connection to a producer /lookup lists was due")


class LeavesDroppedProducers(Monitor):
    """NSQC-LOOKUP-004 (SHOULD): a producer the latest answers of every lookupd leave out (tombstoned, gone) whose
    connection then closed gets no new connection while they leave it out (L-HTTP-12). A connection is new at its
    first command."""

    ITEMS = ("NSQC-LOOKUP-004",)
    KINDS = frozenset({COMMAND})

    def __init__(self):
        super().__init__()
        self._lists: dict[str, frozenset[str]] = {}  # lookupd -> the producers its latest answer listed
        self._left_out: dict[str, float] = {}  # a producer once listed -> since when every latest answer omits it
        self._closed: dict[str, float] = {}  # producer -> when a connection to it last closed
        self._seen: set[str] = set()  # connections whose first command was seen

    def lookupd_query(self, judge, lookupd, ts, exchange):
        producers = listed(exchange) if exchange is not None else None
        if producers is None:
            return
        once = set().union(*self._lists.values(), producers)
        self._lists[lookupd] = producers
        now_listed = set().union(*self._lists.values())
        for producer in once - now_listed:
            self._left_out.setdefault(producer, exchange.answered)
        for producer in now_listed:
            self._left_out.pop(producer, None)

    def closed(self, judge, connection):
        if connection.server is not None:
            self._closed[connection.server] = connection.closed_at

    def observe(self, judge, connection, event, answered):
        if connection.name in self._seen:
            return
        self._seen.add(connection.name)
        producer = connection.server
        left_out, closed = self._left_out.get(producer), self._closed.get(producer)
        if left_out is not None and closed is not None and max(left_out, closed) <= connection.opened_at:
            self.report("NSQC-LOOKUP-004", CLIENT, event.ts, connection.name,
                        f"no new connection to {producer}, which /lookup leaves out and whose connection closed",
                        f"a connection opened {connection.opened_at - left_out:.2f} s after /lookup left it out",
                        event)
