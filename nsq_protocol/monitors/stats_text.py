"""The text /stats report's client lines held against the connections they describe. nsqd v1.3.0 prints each
channel's clients beneath it and the producers under "Producers:" (nsqd/http.go printStats), each as
ClientV2Stats.String (nsqd/client_v2.go): '[V2 <hostname>:<port> <user_agent>] state: ...' for a consumer,
'[V2 <hostname>:<port> <user_agent>] msgs: N topics: t=N connected: ...' for a producer. A line names its connection
by the port of the client's end alone, so it is matched to the one connection open throughout the request with that
port; the hostname and user_agent are those of the last IDENTIFY (the remote IP and none without one), as in the
JSON report (stats_clients.py)."""

from __future__ import annotations

import re

from nsq_protocol.http import HttpExchange
from nsq_protocol.monitors.events import BROKER, COMMAND, ERROR, FINS, RESPONSE
from nsq_protocol.monitors.monitor import Monitor
from nsq_protocol.monitors.stats_clients import identity_strings

HTTP = "HTTP"
PUBLISHES = ("PUB", "MPUB", "DPUB")
_TOPIC = re.compile(r"(?:\*P |   )\[(\S+)\s*\] depth: ")
_CHANNEL = re.compile(r"(?:   \*P |      )\[(\S+)\s*\] depth: ")
_CLIENT = re.compile(r"(?:        |   )\[V2 (.*?):(\d+) (.*?)\] (?:state|msgs): ")
_FALSE = frozenset({"false", "0"})  # nsqd/http.go boolParams
NOT_DIRECT = "no line matched a connection to this server: it may reach nsqd through a proxy"
IN_FLUX = "an IDENTIFY or SUB of the connection was answered after the request was sent, or not yet when it came"


class _Seen:
    __slots__ = ("identified", "identify", "identify_pending", "identify_at", "subscribed", "sub_pending",
                 "published")

    def __init__(self) -> None:
        self.identified = False  # an IDENTIFY was answered without an error
        self.identify: tuple[str, str, str] | None = None  # its strings; None: not known
        self.identify_pending = 0
        self.identify_at = float("-inf")  # when the last IDENTIFY was answered
        self.subscribed: float | None = None  # when its SUB was answered OK
        self.sub_pending = False
        self.published: set[str] = set()  # topics it sent a publish to


class TextStatsClients(Monitor):
    """H-STATS-13: each client line of a text /stats answer, matched by port to a connection open throughout the
    request, shows its hostname and user_agent; one beneath a channel is a consumer subscribed to it, one under
    Producers a connection that published, to the topics it lists; and every connection subscribed before the
    request is listed beneath its channel (where clients are included and a line matched this server before)."""

    ITEMS = ("H-STATS-13",)
    KINDS = frozenset({COMMAND, RESPONSE, ERROR})
    RUNS = frozenset({FINS})

    def __init__(self) -> None:
        super().__init__()
        self._seen: dict[str, _Seen] = {}
        self._direct: set[str | None] = set()
        self._pending: list[HttpExchange] = []  # text answers, judged once the traffic passed them

    def observe_run(self, judge, connection, run):
        """A FIN changes nothing a client line shows: a connection not seen yet reads as a fresh ``_Seen``."""

    def observe(self, judge, connection, event, answered):
        seen = self._seen.get(connection.name)
        if seen is None:
            seen = self._seen[connection.name] = _Seen()
        if event.kind == COMMAND:
            if event.name == "IDENTIFY":
                seen.identify_pending += 1
            elif event.name == "SUB":
                seen.sub_pending = True
            elif event.name in PUBLISHES and event.topic:
                seen.published.add(event.topic)
            return
        if answered is None:
            return
        if answered.name == "IDENTIFY":
            seen.identify_pending -= 1
            seen.identify_at = event.ts
            if event.kind == RESPONSE:
                seen.identified, seen.identify = True, identity_strings(answered.fields)
        elif answered.name == "SUB":
            seen.sub_pending = False
            if event.kind == RESPONSE and event.name == "OK":
                seen.subscribed = event.ts

    def http_exchange(self, judge, exchange: HttpExchange):
        request, response = exchange.request, exchange.response
        if request.path != "/stats" or request.method != "GET" or response.status != 200 or not response.whole:
            return
        params = request.params()
        if params is None or params.get("format") == "json" or params.get("include_clients", "") in _FALSE:
            return
        self._pending.append(exchange)
        self.due = min(self.due, exchange.answered)
        judge.want_tick(exchange.answered)

    def tick(self, judge, now):
        waiting = [exchange for exchange in self._pending if exchange.answered > now]
        for exchange in self._pending:
            if exchange.answered <= now:
                self._answer(judge, exchange)
        self._pending = waiting
        self.due = min((exchange.answered for exchange in waiting), default=float("inf"))

    def finish(self, judge, now):
        for exchange in self._pending:
            self._answer(judge, exchange)
        self._pending = []

    def _answer(self, judge, exchange: HttpExchange) -> None:
        """The text answer, with the traffic up to its arrival: what was sent before it is known."""
        response, params = exchange.response, exchange.request.params()
        living = {}
        for connection in judge.connections.values():
            if connection.client and connection.started and connection.opened_at < exchange.ts and \
                    (connection.closed_at is None or connection.closed_at > exchange.answered):
                living.setdefault(connection.client.rsplit(":", 1)[1], []).append(connection)
        listed: set[str] = set()
        topic = channel = None
        for line in response.body.decode("utf-8", "replace").split("\n"):
            if line.startswith("Producers:"):
                topic = channel = None
            elif (match := _TOPIC.match(line)) is not None:
                topic, channel = match.group(1), None
            elif (match := _CHANNEL.match(line)) is not None:
                channel = match.group(1)
            elif (match := _CLIENT.match(line)) is not None:
                matched = living.get(match.group(2), [])
                if len(matched) == 1:
                    listed.add(matched[0].name)
                    self._direct.add(matched[0].server)
                    self._line(exchange, line, match, matched[0], (topic, channel) if channel else None)
        for connections in living.values():
            for connection in connections:
                self._unlisted(exchange, connection, listed, params)

    def _line(self, exchange: HttpExchange, line: str, match, connection, subscription) -> None:
        seen = self._seen.get(connection.name) or _Seen()
        where = f"{connection.name} ({connection.client})"
        if seen.identify_pending or seen.sub_pending or seen.identify_at >= exchange.ts:
            self.skip("H-STATS-13", IN_FLUX)
            return
        ip = connection.client.rsplit(":", 1)[0].strip("[]")
        expected = seen.identify if seen.identified else (ip, ip, "")
        if expected is None:
            self.skip("H-STATS-13", "the IDENTIFY's body is not all in the traffic")
        elif (match.group(1), match.group(3).rstrip()) != expected[1:]:
            self.report("H-STATS-13", BROKER, exchange.ts, where, f"'[V2 {expected[1]}:{match.group(2)} "
                        f"{expected[2]}]' (its IDENTIFY's hostname and user_agent)", line.strip()[:120], exchange)
            return
        if subscription is not None and (connection.subscription != subscription or seen.subscribed is None):
            self.report("H-STATS-13", BROKER, exchange.ts, where, f"a consumer of {subscription[0]}/"
                        f"{subscription[1]} beneath it", f"subscribed to {connection.subscription}", exchange)
        elif subscription is None and not (seen.published and _topics(line) <= seen.published):
            self.report("H-STATS-13", BROKER, exchange.ts, where, "a producer that published to the topics listed "
                        f"({sorted(seen.published)[:5]})", line.strip()[:120], exchange)

    def _unlisted(self, exchange: HttpExchange, connection, listed: set[str], params: dict) -> None:
        seen = self._seen.get(connection.name)
        if seen is None or seen.subscribed is None or seen.subscribed >= exchange.ts or connection.name in listed:
            return
        topic, channel = connection.subscription
        if params.get("topic", "") not in ("", topic) or params.get("channel", "") not in ("", channel):
            return
        if connection.server not in self._direct:
            self.skip("H-STATS-13", NOT_DIRECT)
            return
        self.report("H-STATS-13", BROKER, exchange.ts, f"{connection.name} ({connection.client})",
                    f"a '[V2 ...:{connection.client.rsplit(':', 1)[1]} ...]' line beneath {topic}/{channel}: it "
                    "subscribed before the request", "not listed", exchange)


def _topics(line: str) -> set[str]:
    """The topics a producer line lists: 'topics: t=1,u=2 connected: ...'."""
    _, _, rest = line.partition(" topics: ")
    listed = rest.split(" connected: ")[0]
    return {entry.rsplit("=", 1)[0] for entry in listed.split(",") if "=" in entry}
