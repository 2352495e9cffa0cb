"""nsqlookupd's registrations modelled from its traffic (nsqlookupd/registration_db.go, lookup_protocol_v1.go,
http.go), and its /lookup, /channels and /topics answers held against the model. Only topics whose every
registration the traffic holds are judged (``LookupdJudge.knows``): the traffic starts with lookupd, or the topic's
name is one nobody outside the traffic uses (a suite case's own).

lookupd's clock is not the traffic's: where an answer turns on a producer's last IDENTIFY or PING against
--inactive-producer-timeout, a tombstone against --tombstone-lifetime, or how soon lookupd noticed a client's
close, the producer counts either way within a margin of the boundary: ``MARGIN_S`` where the times are when a client
read the answers (a suite case's), ``CAPTURE_MARGIN_S`` where they are a capture's."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from nsq_protocol.http import HttpExchange
from nsq_protocol.monitors.events import BROKER, ERROR, RESPONSE, Observed
from nsq_protocol.monitors.expected import valid_name
from nsq_protocol.monitors.lookupd_judge import V1Connection
from nsq_protocol.monitors.monitor import Monitor

MARGIN_S = 1.0
CAPTURE_MARGIN_S = 0.2
EPHEMERAL = "#ephemeral"
TOPIC, CHANNEL = "topic", "channel"
UNKNOWN_NAMES = "a topic whose registrations are not all in the traffic (it may predate it, or be another's)"
WILDCARD = "a name '*' (lookupd reads it as every topic or channel), a producer it should have refused, or a V1 " \
    "connection not read whole: the model stops there"


@dataclass
class _Producer:
    """One identified V1 connection: who it says it is, and when lookupd last heard from it (L-TCP-19)."""

    peer: tuple  # (broadcast_address, tcp_port, http_port): how /lookup names it
    named: dict  # what else its entries must say: hostname and version (its IDENTIFY's), remote_address
    last_update: tuple[float, float]  # lookupd's update lies between the command and its answer
    left_at: float | None = None  # its connection ended (or lookupd's error ended it): its registrations go


@dataclass
class _Registration:
    producers: dict[str, float | None] = field(default_factory=dict)  # connection -> tombstoned at (None: not)
    why: str = ""  # the item whose rule made it what it is now


_EMPTY = _Registration()


class RegistrationsAnswered(Monitor):
    """/lookup, /channels and /topics answer what lookupd's registrations hold, each producer named by its IDENTIFY
    and its connection's address (L-TCP-04): REGISTER records the producer
    under the topic and channel (L-TCP-12), several producers each (L-TCP-18); a closed connection takes its
    producer's registrations, the names stay (L-TCP-13); UNREGISTER t c the channel's (an ephemeral channel left
    empty forgotten, L-TCP-14), UNREGISTER t the topic's and its channels' (L-TCP-15), an ephemeral topic left
    empty forgotten (L-TCP-16); a producer silent for --inactive-producer-timeout is left out (L-TCP-19); /lookup
    names the channels and active untombstoned producers, 404 for an unknown topic (L-HTTP-04); /topics every
    topic (L-HTTP-05); /channels a topic's channels (L-HTTP-06); /topic/create (L-HTTP-08), /channel/create
    (L-HTTP-09), /channel/delete (404 when none, L-HTTP-10), /topic/delete (L-HTTP-11) and /topic/tombstone
    (L-HTTP-12, for --tombstone-lifetime: L-HTTP-17) change them, with their 400 argument errors; /nodes lists each
    active producer with its topics and tombstone flags (L-HTTP-07), an inactive one not (L-HTTP-16); /debug the
    registrations with producers (L-HTTP-13); a lookupd that never had any answers all of them empty (L-HTTP-03)."""

    ITEMS = ("L-TCP-04", "L-TCP-12", "L-TCP-13", "L-TCP-14", "L-TCP-15", "L-TCP-16", "L-TCP-18", "L-TCP-19",
             "L-HTTP-04", "L-HTTP-05", "L-HTTP-06", "L-HTTP-07", "L-HTTP-08", "L-HTTP-09", "L-HTTP-10", "L-HTTP-11",
             "L-HTTP-12", "L-HTTP-16", "L-HTTP-17", "L-HTTP-03", "L-HTTP-13")
    KINDS = frozenset({RESPONSE, ERROR})

    def __init__(self) -> None:
        super().__init__()
        self._producers: dict[str, _Producer] = {}
        self._registrations: dict[tuple[str, str, str], _Registration] = {}
        self._gone: dict[tuple[str, str, str], str] = {}  # a registration removed -> the item that removed it
        self._dropped: dict[tuple, str] = {}  # (registration, peer) a producer left -> the item that made it leave
        self._wildcard = False
        self._margin = MARGIN_S

    # ---- the model --------------------------------------------------------------------------------------
    def observe(self, judge, connection: V1Connection, event: Observed, answered: Observed | None) -> None:
        if answered is None or connection.error is not None:
            return
        name = connection.name
        if event.kind == ERROR:
            self._leave(name, event.ts)  # every error ends the connection (L-TCP-21)
            return
        verb = answered.name
        if verb == "IDENTIFY" and not connection.identified:
            fields = _identified(answered.text)
            if fields is None:  # lookupd took a body it must refuse: AnswersAsLookupd's (L-TCP-07)
                self._wildcard = True
                return
            named = {"hostname": fields.get("hostname") or "", "version": fields["version"]}
            if connection.client_address is not None:
                named["remote_address"] = connection.client_address
            peer = (fields["broadcast_address"], fields["tcp_port"], fields["http_port"])
            self._producers[name] = _Producer(peer, named, (answered.ts, event.ts))
            return
        producer = self._producers.get(name)
        if producer is None or event.name != "OK":
            return
        if verb == "PING":
            producer.last_update = (answered.ts, event.ts)
        elif verb == "REGISTER":
            topic, channel = answered.topic, answered.channel
            if channel:
                self._add((CHANNEL, topic, channel), name, "L-TCP-12")
            self._add((TOPIC, topic, ""), name, "L-TCP-12")
        elif verb == "UNREGISTER":
            self._unregister(name, answered.topic, answered.channel)

    def closed(self, judge, connection: V1Connection) -> None:
        self._leave(connection.name, connection.closed_at)

    def http(self, judge, exchange: HttpExchange) -> None:
        request, response = exchange.request, exchange.response
        handler = _HANDLERS.get((request.method, request.path))
        if handler is None or not judge.http_seen:
            return
        self._margin = CAPTURE_MARGIN_S if judge.timing else MARGIN_S
        if request.method == "GET" and not response.whole:
            self.skip(_LISTING[request.path], "an answer the capture kept only the start of")
            return
        if request.params() is None:
            self.skip("L-HTTP-04", "a query Go's url.ParseQuery refuses (400 INVALID_REQUEST) but Python reads")
            return
        topic, channel = request.query("topic"), request.query("channel")
        if "*" in (topic, channel):
            self._wildcard = True
        arguments = _argument_error(request.path, topic, channel, request.query("node"))
        if arguments is not None:
            item, message = arguments
            self._check(exchange, item, response.status == 400 and response.message == message,
                        f"400 {message}")
            return
        getattr(self, handler)(judge, exchange, topic, channel)

    def _add(self, key: tuple[str, str, str], producer: str | None, why: str) -> None:
        registration = self._registrations.get(key)
        if registration is None:
            registration = self._registrations[key] = _Registration()
            self._gone.pop(key, None)
        if producer is not None:
            registration.producers.setdefault(producer, None)  # AddProducer keeps the one it has (its tombstone)
            self._dropped.pop((key, self._producers[producer].peer), None)
        registration.why = why

    def _remove(self, key: tuple[str, str, str], why: str) -> None:
        if self._registrations.pop(key, None) is not None:
            self._gone[key] = why

    def _unregister(self, producer: str, topic: str, channel: str | None) -> None:
        if channel:  # L-TCP-14
            registration = self._registrations.get((CHANNEL, topic, channel))
            if registration is not None:
                self._drop((CHANNEL, topic, channel), registration, producer, "L-TCP-14")
            if channel.endswith(EPHEMERAL) and (registration is None or not registration.producers):
                self._remove((CHANNEL, topic, channel), "L-TCP-14")
            return
        for key, registration in self._registrations.items():  # L-TCP-15
            if key[0] == CHANNEL and key[1] == topic:
                self._drop(key, registration, producer, "L-TCP-15")
        registration = self._registrations.get((TOPIC, topic, ""))
        if registration is not None:
            self._drop((TOPIC, topic, ""), registration, producer, "L-TCP-15")
        if topic.endswith(EPHEMERAL) and (registration is None or not registration.producers):
            self._remove((TOPIC, topic, ""), "L-TCP-16")

    def _leave(self, name: str, ts: float | None) -> None:
        producer = self._producers.get(name)
        if producer is not None and producer.left_at is None:
            producer.left_at = ts

    def _settle(self, now: float) -> None:
        """Producers whose connection ended more than MARGIN_S ago: lookupd has let go of their registrations."""
        for name, producer in list(self._producers.items()):
            if producer.left_at is not None and now - producer.left_at > self._margin:
                for key, registration in self._registrations.items():
                    self._drop(key, registration, name, "L-TCP-13")
                del self._producers[name]

    def _drop(self, key: tuple[str, str, str], registration: _Registration, producer: str, why: str) -> None:
        if producer in registration.producers:
            del registration.producers[producer]
            registration.why = why
            self._dropped[key, self._producers[producer].peer] = why

    # ---- the HTTP API --------------------------------------------------------------------------------------
    def _create_topic(self, judge, exchange: HttpExchange, topic: str, channel) -> None:
        if self._empty_200(exchange, "L-HTTP-08"):
            self._add((TOPIC, topic, ""), None, "L-HTTP-08")

    def _create_channel(self, judge, exchange: HttpExchange, topic: str, channel: str) -> None:
        if self._empty_200(exchange, "L-HTTP-09"):
            self._add((CHANNEL, topic, channel), None, "L-HTTP-09")
            self._add((TOPIC, topic, ""), None, "L-HTTP-09")

    def _delete_topic(self, judge, exchange: HttpExchange, topic: str, channel) -> None:
        if self._empty_200(exchange, "L-HTTP-11"):
            for key in [key for key in self._registrations if key[1] == topic]:
                self._remove(key, "L-HTTP-11")
                self._dropped = {dropped: why for dropped, why in self._dropped.items() if dropped[0] != key}

    def _delete_channel(self, judge, exchange: HttpExchange, topic: str, channel: str) -> None:
        key = (CHANNEL, topic, channel)
        if self._judged(judge, topic):
            if key in self._registrations:
                self._empty_200(exchange, "L-HTTP-10")
            else:
                self._check(exchange, "L-HTTP-10", exchange.response.status == 404 and
                            exchange.response.message == "CHANNEL_NOT_FOUND", "404 CHANNEL_NOT_FOUND")
        if exchange.response.status == 200:
            self._remove(key, "L-HTTP-10")

    def _tombstone(self, judge, exchange: HttpExchange, topic: str, channel) -> None:
        if not self._empty_200(exchange, "L-HTTP-12"):
            return
        registration = self._registrations.get((TOPIC, topic, ""))
        node = exchange.request.query("node")
        for name in (registration.producers if registration else ()):
            producer = self._producers.get(name)
            if producer is not None and f"{producer.peer[0]}:{producer.peer[2]}" == node:
                registration.producers[name] = exchange.answered

    def _lookup(self, judge, exchange: HttpExchange, topic: str, channel) -> None:
        if not self._judged(judge, topic):
            return
        self._settle(exchange.answered)
        key = (TOPIC, topic, "")
        registration = self._registrations.get(key)
        if registration is None:
            response = exchange.response
            self._check(exchange, self._gone.get(key, "L-HTTP-04"), response.status == 404 and
                        response.message == "TOPIC_NOT_FOUND", f"404 TOPIC_NOT_FOUND ({topic} unregistered)")
            return
        document = _document(exchange)
        if document is None or not isinstance(document.get("producers"), list):
            self._check(exchange, registration.why or "L-HTTP-04", False, f"200 with {topic}'s channels and producers")
            return
        self._channels(exchange, topic, document.get("channels"))
        self._listed_producers(judge, exchange, key, registration, document["producers"])

    def _channels_answer(self, judge, exchange: HttpExchange, topic: str, channel) -> None:
        if self._judged(judge, topic):
            document = _document(exchange)
            self._channels(exchange, topic, None if document is None else document.get("channels"))

    def _topics(self, judge, exchange: HttpExchange, topic, channel) -> None:
        if self._wildcard or not judge.all_readable:
            self.skip("L-HTTP-05", WILDCARD)
            return
        document = _document(exchange)
        listed = document.get("topics") if document is not None else None
        if not isinstance(listed, list):
            self._check(exchange, "L-HTTP-05", False, "200 {\"topics\": [...]}")
            return
        listed = set(map(str, listed))
        for key, registration in self._registrations.items():
            if key[0] == TOPIC and judge.knows(key[1]) and key[1] not in listed:
                self._check(exchange, registration.why or "L-HTTP-05", False, f"/topics naming {key[1]}")
        for key, why in self._gone.items():
            if key[0] == TOPIC and judge.knows(key[1]) and key[1] in listed:
                self._check(exchange, why, False, f"/topics without {key[1]}")
        if judge.whole:
            known = {key[1] for key in self._registrations if key[0] == TOPIC}
            for extra in sorted(listed - known):
                self._check(exchange, self._fresh_or("L-HTTP-05"), False, f"/topics without {extra} (never registered)")

    def _debug(self, judge, exchange: HttpExchange, topic, channel) -> None:
        """L-HTTP-13: /debug holds each registration that has producers, keyed 'category:key:subkey', with each
        producer's IDENTIFY fields and tombstone flag; the 'client::' one every identified producer. Only the
        registrations of known topics and the traffic's producers are judged, unless the traffic is whole."""
        if self._wildcard or not judge.all_readable:
            self.skip("L-HTTP-13", WILDCARD)
            return
        self._settle(exchange.answered)
        document = _document(exchange)
        if document is None or not all(isinstance(entries, list) for entries in document.values()):
            self._check(exchange, "L-HTTP-13", False, "200 with a JSON object of lists")
            return
        expected = {("client", "", ""): dict.fromkeys(self._producers)}
        expected.update((key, registration.producers) for key, registration in self._registrations.items()
                        if judge.knows(key[1]))
        for key, producers in expected.items():
            entries = [entry for entry in document.get(":".join(key), []) if isinstance(entry, dict)]
            by_peer = {_peer(entry): entry for entry in entries}
            for name, tombstoned_at in producers.items():
                producer = self._producers.get(name)
                if producer is None or producer.left_at is not None:
                    continue
                entry = by_peer.get(producer.peer)
                if entry is None or entry.get("tombstoned") is not (tombstoned_at is not None):
                    self._check(exchange, "L-HTTP-13", False, f"{':'.join(key)} naming {producer.peer}"
                                f"{' tombstoned' if tombstoned_at is not None else ''}")
            if key[0] != "client" and len(entries) > len(producers):
                self._check(exchange, "L-HTTP-13", False, f"{':'.join(key)} with {len(producers)} producer(s)")
        if judge.whole:
            leaving = any(producer.left_at is not None for producer in self._producers.values())
            for key in document:
                parts = tuple(key.split(":", 2))
                if parts != ("client", "", "") and not leaving and not self._registrations.get(parts, _EMPTY).producers:
                    self._check(exchange, self._fresh_or("L-HTTP-13"), False, f"no {key} (nothing registered there)")

    def _fresh_or(self, item: str) -> str:
        """L-HTTP-03 where lookupd has never had a registration, else ``item``."""
        return "L-HTTP-03" if not (self._registrations or self._gone or self._producers) else item

    def _nodes(self, judge, exchange: HttpExchange, topic, channel) -> None:
        """L-HTTP-07: each active producer of the traffic (all its registrations are in it: its connection is seen
        from its start) listed with its topics and their tombstone flags; others' entries are not judged."""
        if self._wildcard or not judge.all_readable:
            self.skip("L-HTTP-07", WILDCARD)
            return
        self._settle(exchange.answered)
        document = _document(exchange)
        listed = document.get("producers") if document is not None else None
        if not isinstance(listed, list) or not all(isinstance(entry, dict) for entry in listed):
            self._check(exchange, "L-HTTP-07", False, "200 {\"producers\": [...]}")
            return
        entries: dict[tuple, list[dict]] = {}
        for entry in listed:
            entries.setdefault(_peer(entry), []).append(entry)
        by_peer: dict[tuple, list[str]] = {}
        for name, producer in self._producers.items():
            by_peer.setdefault(producer.peer, []).append(name)
        for peer, names in by_peer.items():
            if len(names) > 1:
                self.skip("L-HTTP-07", "several producers of the traffic name themselves alike")
                continue
            self._node(judge, exchange, self._producers[names[0]], names[0], entries.get(peer, []))
        if judge.whole:
            for peer in sorted(entries.keys() - by_peer.keys(), key=str):
                self._check(exchange, self._fresh_or("L-HTTP-07"), False, f"no producer {peer} (none identified)")

    def _node(self, judge, exchange: HttpExchange, producer: _Producer, name: str, entries: list[dict]) -> None:
        shown, why = self._shown(judge, exchange.answered, producer, None, None)
        if shown is None or not shown and not entries:
            return
        if not shown:
            self._check(exchange, "L-HTTP-16" if why == "L-TCP-19" else why, False, f"{producer.peer} not listed")
            return
        if len(entries) != 1:
            self._check(exchange, "L-HTTP-07", False, f"{producer.peer} listed once, not {len(entries)} times")
            return
        entry = entries[0]
        self._named(exchange, producer.peer, entry)
        topics, tombstones = entry.get("topics"), entry.get("tombstones")
        if not isinstance(topics, list) or not isinstance(tombstones, list) or len(topics) != len(tombstones):
            self._check(exchange, "L-HTTP-07", False, f"{producer.peer}'s topics and as many tombstone flags")
            return
        flags = dict(zip(map(str, topics), tombstones, strict=True))
        for key, registration in self._registrations.items():
            if key[0] != TOPIC or name not in registration.producers:
                continue
            if key[1] not in flags:
                self._check(exchange, registration.why or "L-HTTP-07", False, f"{producer.peer} with topic {key[1]}")
                continue
            tombstoned = self._tombstoned(judge, exchange.answered, registration.producers[name])
            if tombstoned is not None and flags[key[1]] is not tombstoned:
                self._check(exchange, "L-HTTP-12" if tombstoned else "L-HTTP-17", False,
                            f"{producer.peer}'s topic {key[1]} flagged tombstoned {str(tombstoned).lower()}")
        for extra in flags.keys() - {key[1] for key, registration in self._registrations.items()
                                     if key[0] == TOPIC and name in registration.producers}:
            why = self._gone.get((TOPIC, extra, ""), "L-HTTP-07")
            self._check(exchange, why, False, f"{producer.peer} without topic {extra} (not registered)")

    # ---- checks ---------------------------------------------------------------------------------------------
    def _channels(self, exchange: HttpExchange, topic: str, listed) -> None:
        if not isinstance(listed, list):
            self._check(exchange, "L-HTTP-06", False, f"200 with {topic}'s channels")
            return
        expected = {key[2]: registration for key, registration in self._registrations.items()
                    if key[0] == CHANNEL and key[1] == topic}
        for channel in sorted(expected.keys() - set(map(str, listed))):
            self._check(exchange, expected[channel].why or "L-HTTP-06", False, f"{topic}'s channel {channel} listed")
        for channel in sorted(set(map(str, listed)) - expected.keys()):
            why = self._gone.get((CHANNEL, topic, channel), "L-HTTP-06")
            self._check(exchange, why, False, f"no channel {channel} of {topic} (not registered)")

    def _listed_producers(self, judge, exchange: HttpExchange, key: tuple[str, str, str], registration: _Registration,
                          listed: list) -> None:
        """Per producer identity, how many entries /lookup may list (a producer near a boundary either way)."""
        counted: dict[tuple, list] = {}  # peer -> [least, most, why]
        for name, tombstoned_at in registration.producers.items():
            producer = self._producers.get(name)
            if producer is None:
                continue
            shown, why = self._shown(judge, exchange.answered, producer, tombstoned_at, registration)
            bounds = counted.setdefault(producer.peer, [0, 0, why])
            bounds[0] += shown is True
            bounds[1] += shown is not False
            if shown is not True:
                bounds[2] = why
        seen: dict[tuple, int] = {}
        for entry in listed:
            peer = _peer(entry) if isinstance(entry, dict) else None
            seen[peer] = seen.get(peer, 0) + 1
            if peer is not None:
                self._named(exchange, peer, entry)
        for peer in seen.keys() | counted.keys():
            least, most, why = counted.get(peer, (0, 0, self._dropped.get((key, peer), "L-HTTP-04")))
            if not least <= seen.get(peer, 0) <= most:
                self._check(exchange, why, False, f"{least}..{most} producer(s) {peer} listed, not {seen.get(peer, 0)}")

    def _shown(self, judge, now: float, producer: _Producer, tombstoned_at: float | None,
               registration: _Registration | None) -> tuple[bool | None, str]:
        """Whether /lookup lists this producer of the topic now (None: either), and the item that says so; without
        a registration, whether /nodes lists it."""
        if producer.left_at is not None:
            return None, "L-TCP-13"
        timeout = judge.inactive_producer_timeout_s
        if now - producer.last_update[1] > timeout + self._margin:
            return False, "L-TCP-19"
        if now - producer.last_update[0] > timeout - self._margin:
            return None, "L-TCP-19"
        if registration is None:
            return True, "L-HTTP-07"
        tombstoned = self._tombstoned(judge, now, tombstoned_at)
        if tombstoned is not False:
            return (None if tombstoned is None else False), "L-HTTP-12"
        if tombstoned_at is not None:
            return True, "L-HTTP-17"
        return True, "L-TCP-18" if len(registration.producers) > 1 else registration.why or "L-TCP-12"

    def _tombstoned(self, judge, now: float, tombstoned_at: float | None) -> bool | None:
        """Whether lookupd holds the tombstone still (--tombstone-lifetime; None: too near its end to say)."""
        if tombstoned_at is None:
            return False
        age, lifetime = now - tombstoned_at, judge.tombstone_lifetime_s
        return True if age < lifetime - self._margin else None if age < lifetime + self._margin else False

    def _named(self, exchange: HttpExchange, peer: tuple, entry: dict) -> None:
        """L-TCP-04: an entry of a producer of the traffic says what its IDENTIFY said, and its connection's
        address where the traffic shows it (several producers alike: not judged)."""
        names = [producer.named for producer in self._producers.values() if producer.peer == peer]
        if len(names) != 1:
            return
        wrong = {key: entry.get(key) for key, value in names[0].items() if entry.get(key) != value}
        if wrong:
            self._check(exchange, "L-TCP-04", False, f"{peer}'s entry with {names[0]}, not {wrong}")

    def _judged(self, judge, topic: str) -> bool:
        if self._wildcard or not judge.all_readable:
            self.skip("L-HTTP-04", WILDCARD)
            return False
        if not judge.knows(topic):
            self.skip("L-HTTP-04", UNKNOWN_NAMES)
            return False
        return True

    def _empty_200(self, exchange: HttpExchange, item: str) -> bool:
        self._check(exchange, item, exchange.response.status == 200 and exchange.response.body == b"", "an empty 200")
        return exchange.response.status == 200

    def _check(self, exchange: HttpExchange, item: str, kept: bool, expected: str) -> None:
        if not kept:
            request, response = exchange.request, exchange.response
            self.report(item, BROKER, exchange.answered, "HTTP", expected,
                        f"{request.method} {request.target}: {response.status} {response.body[:200]!r}")


_HANDLERS = {("GET", "/lookup"): "_lookup", ("GET", "/channels"): "_channels_answer", ("GET", "/topics"): "_topics",
             ("GET", "/nodes"): "_nodes", ("GET", "/debug"): "_debug",
             ("POST", "/topic/create"): "_create_topic", ("POST", "/topic/delete"): "_delete_topic",
             ("POST", "/channel/create"): "_create_channel", ("POST", "/channel/delete"): "_delete_channel",
             ("POST", "/topic/tombstone"): "_tombstone"}
_LISTING = {"/lookup": "L-HTTP-04", "/channels": "L-HTTP-06", "/topics": "L-HTTP-05", "/nodes": "L-HTTP-07",
            "/debug": "L-HTTP-13"}  # the item that judges each GET handler's document


def _argument_error(path: str, topic: str | None, channel: str | None, node: str | None) -> tuple[str, str] | None:
    """(item, message) of the 400 a request's arguments get, in lookupd's order of checks; None: they pass."""
    item = {"/lookup": "L-HTTP-04", "/channels": "L-HTTP-06", "/topic/create": "L-HTTP-08",
            "/channel/create": "L-HTTP-09", "/channel/delete": "L-HTTP-10", "/topic/delete": "L-HTTP-11",
            "/topic/tombstone": "L-HTTP-12"}.get(path)
    if item is None:
        return None
    if topic is None:
        return item, "MISSING_ARG_TOPIC"
    if path == "/topic/tombstone" and node is None:
        return item, "MISSING_ARG_NODE"
    if path in ("/topic/create", "/channel/create", "/channel/delete") and not valid_name(topic):
        return item, "INVALID_ARG_TOPIC"
    if path in ("/channel/create", "/channel/delete"):
        if channel is None:
            return item, "MISSING_ARG_CHANNEL"
        if not valid_name(channel):
            return item, "INVALID_ARG_CHANNEL"
    return None


def _peer(entry: dict) -> tuple:
    """A listed producer's (broadcast_address, tcp_port, http_port); a list or an object in place of one (a broken
    lookupd's) as None, which no registered peer has."""
    return tuple(None if isinstance(value, (list, dict)) else value
                 for value in (entry.get("broadcast_address"), entry.get("tcp_port"), entry.get("http_port")))


def _document(exchange: HttpExchange) -> dict | None:
    if exchange.response.status != 200:
        return None
    try:
        document = json.loads(exchange.response.body)
    except ValueError:
        return None
    return document if isinstance(document, dict) else None



def _identified(body: str) -> dict | None:
    """An IDENTIFY body lookupd accepted (L-TCP-07): its fields, or None where it must not have."""
    try:
        fields = json.loads(body)
    except ValueError:
        return None
    if not isinstance(fields, dict) or not all(fields.get(key) for key in ("broadcast_address", "tcp_port",
                                                                            "http_port", "version")):
        return None
    return fields
