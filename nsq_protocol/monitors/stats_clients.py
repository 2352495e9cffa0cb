"""/stats client entries held against the TCP connections they describe, matched by remote_address (the client's
end of the connection, as the feeder tells the judge: ``Connection.client``). nsqd v1.3.0 fills an entry from its
clientV2 (nsqd/client_v2.go Stats): the IDENTIFY strings (Identify), the state SUB and CLS set, the layers IDENTIFY
negotiated, the publishes (PublishedMessage) and deliveries (SendingMessage) counted. Every one of them is set before
the answer that shows it is sent, so a value the traffic answered before the /stats request was sent is certain in
the snapshot, and one whose command was still unanswered then, or sent before the /stats answer came, is not: those
are "not judged". Only entries whose connection was open from before the request until after its answer are judged:
their address names no other connection.

Not judged here: ready_count, in_flight_count, finish_count and requeue_count (no answer marks a RDY, FIN or REQ taken
in; a later answered command would), connect_ts (the broker's clock), and the TLS version and cipher suite the
ServerHello chose (the judge's events do not carry the handshake)."""

from __future__ import annotations

from collections import deque
from itertools import groupby

from nsq_protocol.http import HttpExchange
from nsq_protocol.monitors.events import BROKER, COMMAND, ERROR, FINS, JSON, MESSAGE, MESSAGES, RESPONSE
from nsq_protocol.monitors.monitor import Monitor
from nsq_protocol.monitors.stats_counters import stats_document
from nsq_protocol.tls_records import TLS10, TLS11, TLS12, TLS13

HTTP = "HTTP"
PUBLISHES = ("PUB", "MPUB", "DPUB")
CHANGES = ("IDENTIFY", "SUB", "CLS")  # the commands whose answers change what an entry shows
STATE_INIT, STATE_SUBSCRIBED, STATE_CLOSING = 0, 3, 4  # nsqd/client_v2.go: stateInit, stateSubscribed, stateClosing
CLIENT_KEYS = frozenset({"client_id", "hostname", "version", "remote_address", "state", "ready_count",
                         "in_flight_count", "message_count", "finish_count", "requeue_count", "connect_ts",
                         "sample_rate", "deflate", "snappy", "user_agent", "tls", "tls_cipher_suite", "tls_version",
                         "tls_negotiated_protocol", "tls_negotiated_protocol_is_mutual"})
CLIENT_OMITTED = frozenset({"authed", "auth_identity", "auth_identity_url", "pub_counts"})  # omitempty
# what master adds after v1.3.0 (PR #1301's topology experiment): the client's zone and region, its deliveries by
# locality (each left out while zero)
CLIENT_LATER = frozenset({"topology_zone", "topology_region", "zone_local_msg_count", "region_local_msg_count",
                          "global_msg_count"})
TLS_VERSIONS = ("TLS1.0", "TLS1.1", "TLS1.2", "TLS1.3", "Unknown ")  # prettyConnectionState.GetVersion
_VERSION_NAMES = {TLS10: "TLS1.0", TLS11: "TLS1.1", TLS12: "TLS1.2", TLS13: "TLS1.3"}  # as GetVersion names them
_BOOL = {"true": True, "1": True, "false": False, "0": False}  # nsqd/http.go: boolParams; anything else is true
BUCKET_S = 0.25  # the tallies' resolution: a bucket that straddles the request counts as after it
KEPT_S = 60.0  # how far back the tallies tell what was counted before a request

IN_FLUX = "a command that changes it was unanswered when the /stats request was sent"
NOT_STARTED = "the connection's start is not in the traffic: what it sent before is not known"
NO_ADDRESS = "the judge does not know the connections' client addresses (their /stats remote_address)"
NOT_DIRECT = "no /stats entry matched a connection to this server: it may reach nsqd through a proxy"
HANDSHAKE = "the ServerHello that chose the TLS version is not in the traffic (the suite's TLS is its ssl module's)"
LONG_ASKED = f"the /stats request was answered more than {KEPT_S:.0f} s after it was sent"


class _Tally:
    """Counts over time, in buckets: how many were counted before a time (at most; a bucket that straddles it counts
    as after), over the last ``KEPT_S`` seconds."""

    __slots__ = ("total", "_buckets", "_base_until")

    def __init__(self) -> None:
        self.total = 0
        self._buckets: deque[list] = deque()  # [bucket index, count]
        self._base_until = float("-inf")  # what went out of the buckets was counted before this

    def add(self, ts: float, count: int) -> None:
        self._add(int(ts // BUCKET_S), count)

    def add_each(self, times: list[float]) -> None:
        """One counted at each of ``times``, in turn."""
        for index, group in groupby(map(int, map(BUCKET_S.__rfloordiv__, times))):
            self._add(index, len(list(group)))

    def _add(self, index: int, count: int) -> None:
        self.total += count
        buckets = self._buckets
        if buckets and buckets[-1][0] == index:
            buckets[-1][1] += count
        else:
            buckets.append([index, count])
        while buckets[0][0] < index - KEPT_S / BUCKET_S:
            self._base_until = (buckets.popleft()[0] + 1) * BUCKET_S

    def before(self, ts: float) -> int | None:
        """Counted surely before ``ts``; None where the buckets no longer reach back to it."""
        if ts < self._base_until:
            return None
        return self.total - sum(count for index, count in self._buckets if (index + 1) * BUCKET_S > ts)


class _Seen:
    """What one connection's traffic set in its /stats entry."""

    __slots__ = ("changes", "layers", "published", "publish_sent", "delivered", "tls_version")

    def __init__(self) -> None:
        self.changes: list[list] = []  # [command, answered at or None, the answer] of IDENTIFY, SUB, CLS
        self.layers: dict[str, float | None] = {}  # tls_v1, snappy, deflate the JSON answer agreed -> its OK's time
        self.published: dict[str, _Tally] = {}  # topic -> the messages of publishes answered OK
        self.publish_sent: dict[str, float] = {}  # topic -> when the first publish to it was sent
        self.delivered = _Tally()  # message frames
        self.tls_version: int | None = None  # the version the broker's ServerHello chose

    def settled(self, ts: float, answered: float) -> list | None:
        """The changes answered before ``ts``; None where one sent before ``answered`` was not."""
        done = []
        for change in self.changes:
            command, at, _ = change
            if command.ts >= answered:
                break
            if at is None or at >= ts:
                return None
            done.append(change)
        return done


class ClientsAsConnected(Monitor):
    """Each /stats JSON answer's client entries (its channels' and its producers'), matched by remote_address to a
    connection open throughout the request: ID-01 client_id, hostname and user_agent those of the last IDENTIFY
    (absent ones empty), the remote IP before any; ST-01 state 0, 3 once subscribed, 4 after CLS; T-04 tls as
    negotiated, its strings empty without; H-STATS-09 the entry's keys, version V2, sample_rate, deflate and snappy
    as negotiated, message_count at least the messages delivered; H-STATS-10 a producer published over TCP, one
    topic at most in its pub_counts; P-PUB-05 a connection whose publish was answered OK is among the producers,
    its pub_counts at least the messages it published to the topic shown."""

    ITEMS = ("ID-01", "ST-01", "T-04", "H-STATS-09", "H-STATS-10", "P-PUB-05")
    KINDS = frozenset({COMMAND, RESPONSE, ERROR, MESSAGE})
    RUNS = frozenset({MESSAGES, FINS})

    def __init__(self) -> None:
        super().__init__()
        self._seen: dict[str, _Seen] = {}  # connection name -> what its traffic set
        self._pending: list[tuple[HttpExchange, dict]] = []  # /stats answers, judged once the traffic passed them
        self._direct: set[str | None] = set()  # servers a /stats entry's address matched a connection of

    def observe_run(self, judge, connection, run):
        """Only the deliveries are counted; a FIN sets nothing an entry shows that this monitor judges."""
        if connection.client is None:
            return
        seen = self._seen_on(connection)
        if run.key == MESSAGES:
            seen.delivered.add_each(run.ts)

    def _seen_on(self, connection) -> _Seen:
        seen = self._seen.get(connection.name)
        if seen is None:
            seen = self._seen[connection.name] = _Seen()
        return seen

    def tls_record(self, judge, connection, ts, sender, record):
        if sender == BROKER and record.name == "server_hello" and record.versions:
            self._seen.setdefault(connection.name, _Seen()).tls_version = record.versions[0]

    def observe(self, judge, connection, event, answered):
        if connection.client is None:
            return
        seen = self._seen_on(connection)
        kind = event.kind
        if kind == MESSAGE:
            seen.delivered.add(event.ts, 1)
        elif kind == COMMAND:
            if event.name in CHANGES:
                seen.changes.append([event, None, None])
            elif event.name in PUBLISHES and event.topic:
                seen.publish_sent.setdefault(event.topic, event.ts)
        elif answered is not None:
            if answered.name in PUBLISHES:
                if kind == RESPONSE and event.name == "OK" and answered.topic:
                    tally = seen.published.get(answered.topic)
                    if tally is None:
                        tally = seen.published[answered.topic] = _Tally()
                    tally.add(event.ts, answered.number if answered.name == "MPUB" else 1)
            elif answered.name in CHANGES:
                for change in seen.changes:
                    if change[0] is answered:
                        change[1], change[2] = event.ts, event
                if answered.name == "IDENTIFY" and event.name == JSON and event.fields is not None:
                    seen.layers = {layer: None for layer in ("tls_v1", "snappy", "deflate")
                                   if event.fields.get(layer) is True}
        elif kind == RESPONSE and connection.upgrade_ok_taken(event):
            layer = next((name for name, at in seen.layers.items() if at is None), None)
            if layer is not None:
                seen.layers[layer] = event.ts  # ID-30: the layers' OKs come in this order

    # ---- the answers --------------------------------------------------------------------------------------
    def http_exchange(self, judge, exchange: HttpExchange):
        request, response = exchange.request, exchange.response
        if request.path != "/stats" or request.method != "GET" or response.status != 200 or not response.whole:
            return
        document = stats_document(exchange)
        if document is None:
            return
        self._pending.append((exchange, document))
        self.due = min(self.due, exchange.answered)
        judge.want_tick(exchange.answered)

    def tick(self, judge, now):
        waiting = []
        for exchange, document in self._pending:
            if exchange.answered <= now:
                self._stats(judge, exchange, document)
            else:
                waiting.append((exchange, document))
        self._pending = waiting
        self.due = min((exchange.answered for exchange, _ in waiting), default=float("inf"))

    def finish(self, judge, now):
        for exchange, document in self._pending:
            self._stats(judge, exchange, document)
        self._pending = []

    def _stats(self, judge, exchange: HttpExchange, document: dict) -> None:
        params = exchange.request.params() or {}
        if not _BOOL.get(params.get("include_clients", ""), True):
            return
        entries = [(entry, False) for topic in document["topics"] if isinstance(topic, dict)
                   for channel in _listed(topic, "channels") if isinstance(channel, dict)
                   for entry in _listed(channel, "clients")]
        producers = document.get("producers")
        entries += [(entry, True) for entry in producers] if isinstance(producers, list) else []
        living = {connection.client: connection for connection in judge.connections.values()
                  if connection.client is not None and connection.opened_at is not None
                  and connection.opened_at < exchange.ts
                  and (connection.closed_at is None or connection.closed_at > exchange.answered)}
        if not living and not any(connection.client for connection in judge.connections.values()):
            for item in self.ITEMS:
                self.skip(item, NO_ADDRESS)
            return
        listed_producers: set[str] = set()
        for entry, producer in entries:
            if not isinstance(entry, dict):
                continue
            self._keys(exchange, entry)
            address = entry.get("remote_address")
            connection = living.get(address) if isinstance(address, str) else None
            if connection is None:
                continue
            self._direct.add(connection.server)
            if producer:
                listed_producers.add(connection.name)
            self._entry(judge, exchange, entry, connection, producer, params.get("topic", ""))
        if isinstance(producers, list):
            for connection in living.values():
                if connection.name not in listed_producers:
                    self._unlisted(exchange, connection, params.get("topic", ""))

    def _keys(self, exchange: HttpExchange, entry: dict) -> None:
        """H-STATS-09: every entry's keys, whatever connection it describes."""
        keys = set(entry)
        if not CLIENT_KEYS <= keys <= CLIENT_KEYS | CLIENT_OMITTED | CLIENT_LATER:
            self.report("H-STATS-09", BROKER, exchange.ts, HTTP, f"a client entry's keys {sorted(CLIENT_KEYS)} and "
                        f"at most {sorted(CLIENT_OMITTED)}", f"{sorted(keys)}", exchange)
        elif entry.get("version") != "V2":
            self.report("H-STATS-09", BROKER, exchange.ts, HTTP, "a client entry's version V2",
                        f"{entry.get('version')!r}", exchange)

    def _entry(self, judge, exchange: HttpExchange, entry: dict, connection, producer: bool, topic: str) -> None:
        seen = self._seen.get(connection.name) or _Seen()
        where = f"{connection.name} ({connection.client})"
        if not connection.started:
            for item in self.ITEMS:
                self.skip(item, NOT_STARTED)
            return
        changes = seen.settled(exchange.ts, exchange.answered)
        if changes is None:
            for item in ("ID-01", "ST-01", "T-04", "H-STATS-09"):
                self.skip(item, IN_FLUX)
        else:
            self._identity(exchange, entry, connection, changes, where)
            self._state(exchange, entry, changes, where)
            self._layers(exchange, entry, seen, changes, where)
        delivered = seen.delivered.before(exchange.ts)
        if delivered is None:
            self.skip("H-STATS-09", LONG_ASKED)
        elif _number(entry.get("message_count")) < delivered:
            self.report("H-STATS-09", BROKER, exchange.ts, where, f"message_count at least {delivered}, the messages "
                        "delivered to it before the request", f"{entry.get('message_count')}", exchange)
        if producer:
            self._producer(exchange, entry, seen, where, topic)

    def _identity(self, exchange: HttpExchange, entry: dict, connection, changes: list, where: str) -> None:
        """ID-01: the last IDENTIFY's strings, every one of them (nsqd/client_v2.go Identify), or the remote IP."""
        identifies = [change for change in changes if change[0].name == "IDENTIFY"]
        if identifies:
            command, _, answer = identifies[-1]
            expected = identity_strings(command.fields) if answer.kind == RESPONSE else None
            if expected is None:
                self.skip("ID-01", "the IDENTIFY failed or its body is not all in the traffic")
                return
        else:
            ip = connection.client.rsplit(":", 1)[0].strip("[]")
            expected = (ip, ip, "")
        shown = tuple(entry.get(key) for key in ("client_id", "hostname", "user_agent"))
        if shown != expected:
            self.report("ID-01", BROKER, exchange.ts, where, "client_id, hostname, user_agent "
                        f"{expected!r}{' (its IDENTIFY)' if identifies else ' (no IDENTIFY: the remote IP)'}",
                        f"{shown!r}", exchange)

    def _state(self, exchange: HttpExchange, entry: dict, changes: list, where: str) -> None:
        """ST-01: 0 until SUB, 3 once subscribed, 4 after CLS (SUB and CLS set it before they answer)."""
        state = STATE_INIT
        for command, _, answer in changes:
            if answer.kind != RESPONSE:
                continue
            if command.name == "SUB":
                state = STATE_SUBSCRIBED
            elif command.name == "CLS":
                state = STATE_CLOSING
        if entry.get("state") != state:
            self.report("ST-01", BROKER, exchange.ts, where, f"state {state}", f"{entry.get('state')!r}", exchange)

    def _layers(self, exchange: HttpExchange, entry: dict, seen: _Seen, changes: list, where: str) -> None:
        """T-04, H-STATS-09: tls, snappy and deflate as negotiated (each set before its OK), sample_rate as the
        last IDENTIFY set it."""
        identifies = [change for change in changes if change[0].name == "IDENTIFY"]
        if identifies and identifies[-1][2].kind != RESPONSE:
            return
        layers = seen.layers if identifies and identifies[-1][2].name == JSON else {}
        if any(at is None or at >= exchange.ts for at in layers.values()):
            for item in ("T-04", "H-STATS-09"):
                self.skip(item, IN_FLUX)
            return
        for key, layer in (("tls", "tls_v1"), ("snappy", "snappy"), ("deflate", "deflate")):
            if entry.get(key) is not (layer in layers):
                self.report("T-04" if key == "tls" else "H-STATS-09", BROKER, exchange.ts, where,
                            f"{key} {layer in layers} (as IDENTIFY negotiated)", f"{entry.get(key)!r}", exchange)
        as_negotiated = entry.get("tls") is ("tls_v1" in layers)  # if not, reported above: its strings follow from it
        if as_negotiated and "tls_v1" in layers:
            version = entry.get("tls_version")
            chosen = _VERSION_NAMES.get(seen.tls_version, "Unknown ") if seen.tls_version else None
            if chosen is None:
                self.skip("T-04", HANDSHAKE)
            elif isinstance(version, str) and not version.startswith(chosen):
                self.report("T-04", BROKER, exchange.ts, where, f"tls_version {chosen.strip()} (the ServerHello's)",
                            f"{version!r}", exchange)
            if not (isinstance(version, str) and version.startswith(TLS_VERSIONS)) or \
                    not entry.get("tls_cipher_suite") or entry.get("tls_negotiated_protocol") != "":
                self.report("T-04", BROKER, exchange.ts, where, "tls_version TLS1.x, a cipher suite, no negotiated "
                            "protocol", f"{version!r}, {entry.get('tls_cipher_suite')!r}, "
                            f"{entry.get('tls_negotiated_protocol')!r}", exchange)
        elif as_negotiated and (entry.get("tls_version"), entry.get("tls_cipher_suite"),
                                entry.get("tls_negotiated_protocol"),
                                entry.get("tls_negotiated_protocol_is_mutual")) != ("", "", "", False):
            self.report("T-04", BROKER, exchange.ts, where, "empty TLS strings and no mutual protocol (plain)",
                        f"{entry.get('tls_version')!r}, {entry.get('tls_cipher_suite')!r}, "
                        f"{entry.get('tls_negotiated_protocol')!r}", exchange)
        rate = _sample_rate(identifies[-1]) if identifies else 0
        if rate is not None and entry.get("sample_rate") != rate:
            self.report("H-STATS-09", BROKER, exchange.ts, where, f"sample_rate {rate} (as IDENTIFY set it)",
                        f"{entry.get('sample_rate')!r}", exchange)

    def _producer(self, exchange: HttpExchange, entry: dict, seen: _Seen, where: str, topic: str) -> None:
        """H-STATS-10: a producer published over TCP (PublishedMessage: a publish it sent), one topic at most in its
        pub_counts (Stats keeps one), that topic one it published to, the filter's where there is one."""
        sent = {name for name, at in seen.publish_sent.items() if at < exchange.answered}
        counts = entry.get("pub_counts") or []
        if not sent:
            self.report("H-STATS-10", BROKER, exchange.ts, where, "a producer: a TCP connection that published",
                        "it sent no PUB, MPUB or DPUB before the answer", exchange)
        elif not isinstance(counts, list) or len(counts) > 1 or any(
                not isinstance(count, dict) or count.get("topic") not in sent or topic not in ("", count["topic"])
                for count in counts):
            self.report("H-STATS-10", BROKER, exchange.ts, where, f"pub_counts of one topic it published to "
                        f"({sorted(sent)[:5]}{', the filter ' + topic if topic else ''})", f"{counts}"[:200],
                        exchange)
        else:
            self._counted(exchange, counts, seen, where, topic)

    def _unlisted(self, exchange: HttpExchange, connection, topic: str) -> None:
        """P-PUB-05: a connection whose publish was answered before the request is a producer, its count of the topic
        shown at least those answered (PublishedMessage comes before the OK)."""
        seen = self._seen.get(connection.name)
        if seen is None or not seen.published:
            return
        floors = {name: tally.before(exchange.ts) for name, tally in seen.published.items()}
        if not any(floors.values()):
            return
        if connection.server not in self._direct:
            self.skip("P-PUB-05", NOT_DIRECT)
            return
        self.report("P-PUB-05", BROKER, exchange.ts, f"{connection.name} ({connection.client})",
                    "among the producers: its publishes were answered OK before the request",
                    f"not listed (topics {sorted(name for name, floor in floors.items() if floor)[:5]})", exchange)

    def _counted(self, exchange: HttpExchange, counts: list, seen: _Seen, where: str, topic: str) -> None:
        """P-PUB-05: the count of the topic shown, at least the messages answered OK before the request."""
        for count in counts:
            tally = seen.published.get(count["topic"])
            floor = tally.before(exchange.ts) if tally is not None else 0
            if floor and _number(count.get("count")) < floor:
                self.report("P-PUB-05", BROKER, exchange.ts, where, f"pub_counts {count['topic']} at least {floor}, "
                            "the messages answered OK before the request", f"{count.get('count')}", exchange)
        if not counts:
            floors = {name: tally.before(exchange.ts) for name, tally in seen.published.items()
                      if topic in ("", name)}
            if any(floors.values()):
                self.report("P-PUB-05", BROKER, exchange.ts, where, "pub_counts naming a topic it published to "
                            f"({sorted(name for name, floor in floors.items() if floor)[:5]})", "none", exchange)


def identity_strings(fields: dict | None) -> tuple[str, str, str] | None:
    """client_id, hostname, user_agent as Go's json.Unmarshal fills identifyDataV2 from ``fields`` (keys in any
    case, absent or null ones empty); None where that is not certain (a name given twice, non-ASCII names, text
    Go would have replaced)."""
    if fields is None or any(not key.isascii() for key in fields):
        return None
    values = {}
    for key, value in fields.items():
        name = key.lower()
        if name in ("client_id", "hostname", "user_agent"):
            if name in values or not (value is None or isinstance(value, str)) or \
                    value is not None and any("\ud800" <= char <= "\udfff" for char in value):
                return None
            values[name] = value or ""
    return values.get("client_id", ""), values.get("hostname", ""), values.get("user_agent", "")


def _sample_rate(identify: list) -> int | None:
    """The sample_rate the last IDENTIFY set: its JSON answer's, else its body's (SetSampleRate applies it either
    way)."""
    command, _, answer = identify
    if answer.name == JSON:
        rate = (answer.fields or {}).get("sample_rate")
        return rate if isinstance(rate, int) else None
    fields = {key.lower(): value for key, value in (command.fields or {}).items()}
    if command.fields is None:
        return None
    rate = fields.get("sample_rate")
    return 0 if rate is None else rate if isinstance(rate, int) and not isinstance(rate, bool) else None


def _number(value) -> float:
    return value if isinstance(value, int) and not isinstance(value, bool) else float("inf")


def _listed(entry: dict, name: str) -> list:
    """A list a /stats entry holds under ``name``; a broken broker's value of another type lists nothing."""
    value = entry.get(name)
    return value if isinstance(value, list) else []
