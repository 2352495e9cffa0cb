"""The topics and channels one nsqd's traffic shows it creating and deleting: what it must then tell each
nsqlookupd it registers with (registration.toml, R-03 to R-07; judged by lookupd_announces.NsqdAnnounces, over the
nsqlookupds' traffic). ``NamesChanged`` rides on nsqd's Judge, as a monitor that judges nothing itself, and hands
each change to whoever judges the lookupds (``tell``): a capture or a suite case of a cluster."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from nsq_protocol.http import HttpExchange
from nsq_protocol.monitors.events import RESPONSE, Observed
from nsq_protocol.monitors.monitor import Monitor

CREATED, DELETED, LEFT = "created", "deleted", "left"
# not a name's change: nsqd's list of lookupds replaced, nsqd restarted (it then has what it restored: R-09)
LOOKUPDS, RESTARTED = "lookupds", "restarted"
EPHEMERAL = "#ephemeral"
TOLD = ("R-03", "R-04", "R-05", "R-06", "R-07")  # the lookupds' items judged with what nsqd's traffic tells of
PUBLISHES = frozenset({"PUB", "MPUB", "DPUB"})
# nsqd's HTTP routes that make a topic (GetTopic) or a channel (GetChannel) exist, when answered 200
_HTTP_CREATES = frozenset({"/pub", "/mpub", "/topic/create", "/channel/create"})
_LOOKUPDS_PATH = "/config/nsqlookupd_tcp_addresses"


class NameChange(NamedTuple):
    """``CREATED``: the topic (and ``channel``) exists in nsqd after ``ts``; ``DELETED``: nsqd answered its deletion
    over HTTP; ``LEFT``: a consumer of the ephemeral channel left, ``last``: the last (nsqd deletes the channel);
    ``LOOKUPDS``: a PUT of its lookupds' list answered 200; ``RESTARTED`` (told by whoever knows it: the suite's
    note of a restart): what its traffic showed it having no longer holds (``topic`` empty for both). nsqd did it
    between ``since`` (the request, or the close) and ``ts`` (its answer)."""

    since: float
    ts: float
    change: str
    topic: str
    channel: str | None = None
    last: bool = False


class NamesChanged(Monitor):
    """Not a rule: reads nsqd's traffic for the changes of its topics and channels. ``knows(judge, topic)``: every
    connection and HTTP request that touches the topic is in the traffic ``judge`` reads (so a consumer's leaving is
    known to be the last, and no unseen deletion races a creation); only those topics' changes are told. Another
    topic's change, where ``unknown`` says why it is not known, leaves the ``TOLD`` items not judged.

    Neither callable may hold the judge: the judge holds this monitor, and a judge in a reference cycle is left to
    the cycle collector, whose passes over its millions of objects cost a fifth of the judging."""

    KINDS = frozenset({RESPONSE})

    def __init__(self, tell: Callable[[NameChange], None], knows: Callable[[object, str], bool],
                 unknown: str | None = None):
        super().__init__()
        self._tell = tell
        self._knows = knows
        self._unknown = unknown
        self._consumers: dict[tuple[str, str], set[str]] = {}  # ephemeral channel -> connections its SUB OK'd

    def observe(self, judge, connection, event: Observed, answered: Observed | None) -> None:
        if answered is None or event.name != "OK" or not answered.topic or not self._known(judge, answered.topic):
            return
        if answered.name in PUBLISHES:
            self._tell(NameChange(answered.ts, event.ts, CREATED, answered.topic))
        elif answered.name == "SUB" and answered.channel:
            self._tell(NameChange(answered.ts, event.ts, CREATED, answered.topic, answered.channel))
            if answered.channel.endswith(EPHEMERAL):
                self._consumers.setdefault((answered.topic, answered.channel), set()).add(connection.name)

    def _known(self, judge, topic: str) -> bool:
        if self._knows(judge, topic):
            return True
        if self._unknown is not None:
            for item in TOLD:
                self.skip(item, self._unknown)
        return False

    def closed(self, judge, connection) -> None:
        subscription = connection.subscription
        consumers = self._consumers.get(subscription) if subscription else None
        if consumers is None or connection.name not in consumers:
            return
        consumers.discard(connection.name)
        if not consumers:
            del self._consumers[subscription]
        # nsqd/channel.go RemoveClient: the channel goes with its last client
        self._tell(NameChange(connection.closed_at, connection.closed_at, LEFT, *subscription, last=not consumers))

    def http_exchange(self, judge, exchange: HttpExchange) -> None:
        request = exchange.request
        if request.path == _LOOKUPDS_PATH and request.method == "PUT" and exchange.response.status == 200:
            self._tell(NameChange(exchange.ts, exchange.answered, LOOKUPDS, ""))
            return
        topic, channel = request.query("topic"), request.query("channel")
        if exchange.response.status != 200 or request.method != "POST" or not topic or not self._known(judge, topic):
            return
        path = request.path
        named = channel if path.startswith("/channel/") else None
        if path in _HTTP_CREATES:
            self._tell(NameChange(exchange.ts, exchange.answered, CREATED, topic, named))
        elif path in ("/topic/delete", "/channel/delete"):
            self._tell(NameChange(exchange.ts, exchange.answered, DELETED, topic, named))
            self._consumers = {key: names for key, names in self._consumers.items()
                               if key[0] != topic or path == "/channel/delete" and key[1] != channel}
