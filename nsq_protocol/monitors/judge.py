"""One nsqd's traffic judged: its connections' events in time order, and the HTTP requests that change delivery,
through every monitor. Rules about one message follow it across the connections of its channel (a message
timed out on one consumer comes back on another), so the judge keeps one ledger of deliveries for all of them.

Feeding: ``open`` a connection, then ``observe`` its events, ``http`` for the broker's HTTP requests, ``close``
when it ends, and ``finish`` at the end of the traffic; events of all connections in time order. A client library's
traffic (the client suite's) may carry its queries of nsqlookupd too (``lookupd_query``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, fields
from operator import attrgetter

from nsq_protocol.http import HttpExchange, Request
from nsq_protocol.monitors.application import Application
from nsq_protocol.monitors.connection import MIN_MSG_TIMEOUT_MS, Connection
from nsq_protocol.monitors.events import COMMAND, ERROR, EVERY_KIND, FINS, MESSAGE, MESSAGES, Observed, Run, body_hash
from nsq_protocol.monitors.limits import Limits
from nsq_protocol.monitors.monitor import Judging, Monitor, Violation
from nsq_protocol.monitors.release import Release, parse
from nsq_protocol.monitors.tls_policy import TlsPolicy
from nsq_protocol.tls_records import Record
from nsq_protocol.wire import ProtocolViolation, parse_mpub_body

SCAN_S = 0.1  # D-14: the queue scan's period
# Messages the judge follows before it lets go of those no longer in flight (Monitor.forget): ~2 KB each with what the
# monitors keep of them, so a few hundred MB however long the traffic.
MESSAGES_KEPT = 200_000


@dataclass(slots=True)
class Delivery:
    """One delivery of a message to a connection, and what became of it there."""

    connection: str
    at: float
    attempts: int | None
    earliest_timeout: float | None  # before this the broker cannot have timed it out (capture clock); None: unknown
    latest_timeout: float | None  # by this it has timed out, unless settled
    settled: str | None = None  # "FIN", "REQ", or "emptied" by the HTTP API (D-63)
    settled_at: float | None = None
    requeue_delay_ms: int | None = None
    settle_failed: bool = False  # the FIN or REQ got its E_*_FAILED: it settled nothing
    touched: bool = False
    # D-12: the connection whose delivery before this one the ledger last saw unsettled: the message timed out there
    timed_out_on: str | None = None

    def __reduce__(self):
        # `watch` pickles every delivery a judge holds, each micro-batch: as the tuple of its fields, in two thirds
        # of the time of a slotted dataclass's own state and half the time to read back
        return Delivery, _DELIVERY_FIELDS(self)


_DELIVERY_FIELDS = attrgetter(*(field.name for field in fields(Delivery)))


@dataclass(frozen=True)
class HttpAction:
    """An HTTP request to the nsqd that the monitors must know of: emptying, pausing or deleting a channel or
    topic (D-63), or publishing (``bodies``: their body_hash, None when the request's bodies are not known)."""

    ts: float
    path: str  # /channel/empty, /topic/pause, /pub, ...
    topic: str | None
    channel: str | None
    status: int
    bodies: tuple[int, ...] | None = None
    defer_ms: int = 0  # /pub?defer= (H-PUB-05)


DELIVERY_PATHS = frozenset({"/pub", "/mpub", "/channel/create", "/channel/empty", "/channel/pause", "/channel/unpause",
                            "/channel/delete", "/topic/pause", "/topic/unpause", "/topic/delete", "/topic/empty"})


def http_action(ts: float, request: Request, status: int) -> HttpAction | None:
    """What an HTTP request to nsqd does to delivery, or None when it does nothing to it. /mpub's newline-separated
    bodies are not taken apart here (their bodies: None)."""
    if request.path not in DELIVERY_PATHS:
        return None
    bodies = None
    if request.path == "/pub":
        bodies = (body_hash(request.body),)
    elif request.path == "/mpub" and request.query("binary") in ("true", "1"):
        try:
            bodies = tuple(body_hash(body) for body in parse_mpub_body(request.body))
        except ProtocolViolation:
            bodies = None
    defer = request.query("defer") or ""
    return HttpAction(ts, request.path, request.query("topic"), request.query("channel"), status, bodies,
                      int(defer) if defer.isdigit() else 0)


class Judge(Judging):
    def __init__(self, monitors: list[Monitor], *, timing: bool, http_seen: bool, wording: bool = True,
                 application: Application | None = None, release: Release | None = None,
                 tls_policy: TlsPolicy | None = None, fresh: Callable[[str], bool] | None = None,
                 runs: bool = True):
        super().__init__(monitors)
        # False: every monitor takes every event one by one, runs too (what the monitors that take runs are held to)
        self.runs = runs
        self._watching: dict[str, list[Monitor]] = {}  # event kind -> the active monitors that read it
        self._taking_runs: dict[str, list[Monitor]] = {}  # run key -> the active monitors that take it whole
        self._one_by_one: dict[str, list[Monitor]] = {}  # run key -> the others that read its events
        self._ticking: list[Monitor] = []  # the active monitors with a tick of their own
        self._dispatch()
        # the events' times are when they crossed the wire (a capture), not when a client read them (the suite):
        # only then do the rules about time judge
        self.timing = timing
        self.http_seen = http_seen  # the nsqd's HTTP requests are in the traffic (publishes, empties, pauses)
        # which topics' whole life is in the traffic, on one run of the broker (a crash told, ``crash``): each starts
        # with no channels and no messages at its first mention, and every connection and HTTP request that touches
        # it is in the traffic (a suite case's own names); None: none is known to be
        self._fresh = fresh
        # nsqd's wording of an error's description is judged (C-08); the suite judges it itself, as a SHOULD and by
        # the version it targets (conformance.client.Verifier.wording)
        self.wording = wording
        # what the client's application asked of its library (application.py): None where the traffic is not one
        # application's, or it was not told
        self.application = application
        self.connections: dict[str, Connection] = {}
        self.messages: dict[tuple, Delivery] = {}  # message key -> its latest delivery
        self.started_at: float | None = None  # the traffic's first event
        self.all_started = True  # every connection was seen whole: nothing it did is missing
        self.paused: set[tuple] = set()  # (topic,) or (topic, channel)
        # the broker crashed (SIGKILL) during the traffic: it loses what was in memory or in flight (P-RST-10,
        # P-RST-11) and a disk queue whose read position was not synced hands messages on again
        self.crashed_at: float | None = None
        self.let_go_at: float | None = None  # the last time the judge let go of messages no longer in flight
        # D-13: --max-msg-timeout is the broker's, not the connection's: any IDENTIFY answer in the traffic shows it
        self.max_msg_timeout_ms: int | None = None
        self.limits = Limits()  # what the broker showed of its flags (LIM-01)
        # the release whose rules the broker follows: told (the suite's --nsq-version), else the one the traffic
        # shows (release.py); the monitors judge an item of an older release by it
        self.told_release = release
        self.shown_release: Release | None = None
        self.tls_policy = tls_policy  # the broker's TLS flags, told (the suite's profile); None: not told
        self._keep = MESSAGES_KEPT
        self._due = float("inf")

    # ---- feeding ---------------------------------------------------------------------------------------
    def open(self, name: str, ts: float, started: bool, whole: bool | None = None,
             server: str | None = None, client: str | None = None, seen_until: float | None = None) -> Connection:
        """``started``: the V2 connection's start is in the traffic; ``whole``: nothing it did can be missing from
        the traffic (by default, as started; a connection that never spoke V2 hides nothing); ``server``: the
        host:port the client dialed, ``client`` its own end's (Go's net.Addr form: [v6]:port), where known;
        ``seen_until``: a capture shows nothing of it after then, nor its end."""
        connection = self.connections[name] = Connection(name, started, opened_at=ts, server=server, client=client,
                                                         seen_until=seen_until)
        self.all_started &= started if whole is None else whole
        self._begin(ts)
        return connection

    def observe(self, name: str, event: Observed) -> None:
        ts = event.ts
        if self.started_at is None:
            self.started_at = ts
        if ts >= self._due:
            self._tick(ts)
        connection = self.connections[name]
        answered = connection.observe(event)
        if answered is not None and answered.name == "IDENTIFY" and connection.identify_answer is not None:
            if connection.max_msg_timeout_ms is not None:
                self.max_msg_timeout_ms = connection.max_msg_timeout_ms
            self.shown_release = parse(connection.identify_answer.get("version")) or self.shown_release
        if answered is not None or event.kind == ERROR:
            self.limits.frame(self, connection, event, answered)
        for monitor in self._watching[event.kind]:
            try:
                monitor.observe(self, connection, event, answered)
            except Exception as exc:  # noqa: BLE001 (a monitor's own bug on traffic it did not foresee)
                self._failed(monitor, exc)
        self._ledger(connection, event)

    def observe_run(self, name: str, run: Run) -> None:
        """``run``'s events on the connection ``name``, as ``observe`` takes them; the monitors that take such runs
        whole (Monitor.RUNS) get it at once, before the others and the ledger take its events one by one (the ledger
        at once too, where no other monitor reads them). Where a tick or the ledger's letting go falls within it,
        every monitor takes it event by event."""
        if self.started_at is None:
            self.started_at = run.ts[0]
        if run.ts[0] >= self._due:
            self._tick(run.ts[0])
        taking, one_by_one = self._taking_runs[run.key], self._one_by_one[run.key]
        if not self.runs or not taking and one_by_one or run.ts[-1] >= self._due \
                or len(self.messages) + len(run.ts) > self._keep:
            for event in run.events():
                self.observe(name, event)
            return
        connection = self.connections[name]
        for monitor in taking:
            try:
                monitor.observe_run(self, connection, run)
            except Exception as exc:  # noqa: BLE001
                self._failed(monitor, exc)
        if not one_by_one and run.ts[-1] < self._due:  # else a tick falls within the run: event by event
            connection.observe_run(run)
            self._ledger_run(connection, run)
            return
        for event in run.events():
            if event.ts >= self._due:
                self._tick(event.ts)
            connection.observe(event)
            for monitor in self._one_by_one[run.key]:
                try:
                    monitor.observe(self, connection, event, None)
                except Exception as exc:  # noqa: BLE001
                    self._failed(monitor, exc)
            self._ledger(connection, event)

    def http(self, action: HttpAction) -> None:
        self._begin(action.ts)
        self._tick(action.ts)
        for monitor in self._active:
            try:
                monitor.http(self, action)
            except Exception as exc:  # noqa: BLE001
                self._failed(monitor, exc)
        if action.status != 200:
            return
        where = (action.topic,) if action.channel is None else (action.topic, action.channel)
        if action.path.endswith("/pause"):
            self.paused.add(where)
        elif action.path.endswith("/unpause"):
            self.paused.discard(where)
        elif action.path in ("/channel/empty", "/channel/delete", "/topic/delete"):
            # D-63: the channel's in-flight and deferred messages are gone with its queue
            for connection in self.connections.values():
                if connection.topic == action.topic and action.channel in (None, connection.channel):
                    connection.in_flight.clear()
            for key, delivery in self.messages.items():
                if key[0] == action.topic and action.channel in (None, key[1]):
                    delivery.settled, delivery.settled_at = "emptied", action.ts

    def http_exchange(self, exchange: HttpExchange) -> None:
        """Any HTTP request to the broker with its answer (where ``http_seen``, every one); whoever feeds the judge
        gives one that changes delivery to ``http`` as well, where it feeds ``http``."""
        self._begin(exchange.ts)
        self._tick(exchange.ts)
        if exchange.request.path == "/info" and exchange.response.status == 200:
            self.shown_release = parse(_json_field(exchange.response.body, "version")) or self.shown_release
        self.limits.http(self, exchange)
        for monitor in self._active:
            try:
                monitor.http_exchange(self, exchange)
            except Exception as exc:  # noqa: BLE001
                self._failed(monitor, exc)

    def tls_record(self, name: str, ts: float, sender: str, record: Record) -> None:
        """A plaintext record of the TLS handshake after an IDENTIFY answer that agreed to TLS (ID-31), where the
        traffic holds the bytes (a capture: the suite's TLS is its ssl module's)."""
        self._begin(ts)
        self._tick(ts)
        connection = self.connections[name]
        for monitor in self._active:
            try:
                monitor.tls_record(self, connection, ts, sender, record)
            except Exception as exc:  # noqa: BLE001
                self._failed(monitor, exc)

    def lookupd_query(self, lookupd: str, ts: float, exchange: HttpExchange | None) -> None:
        """The client's query of the nsqlookupd named ``lookupd`` at ``ts``: its HTTP exchange, or None where the
        lookupd was down (the connection refused or reset before a request)."""
        self._begin(ts)
        self._tick(ts)
        for monitor in self._active:
            try:
                monitor.lookupd_query(self, lookupd, ts, exchange)
            except Exception as exc:  # noqa: BLE001
                self._failed(monitor, exc)

    def crash(self, ts: float) -> None:
        """The broker was killed and started again: its connections are gone; what the rules knew of its messages
        no longer holds."""
        for name, connection in self.connections.items():
            if connection.open:
                self.close(name, ts, None)
        self.crashed_at = ts

    def close(self, name: str, ts: float, by: str | None, client_done: float | None = None) -> None:
        """``client_done``: when the client's FIN came, where the traffic shows it (Connection.client_done_at)."""
        self._tick(ts)
        connection = self.connections[name]
        connection.close(ts, by, client_done)
        for monitor in self._active:
            try:
                monitor.closed(self, connection)
            except Exception as exc:  # noqa: BLE001
                self._failed(monitor, exc)

    def finish(self, ts: float) -> list[Violation]:
        self._tick(ts)
        for monitor in self._active:
            try:
                monitor.finish(self, ts)
            except Exception as exc:  # noqa: BLE001
                self._failed(monitor, exc)
        return self.violations

    # ---- what the monitors read ---------------------------------------------------------------------------
    @property
    def release(self) -> Release | None:
        """The release the broker follows, told or shown; None: neither."""
        return self.told_release or self.shown_release

    @staticmethod
    def message_key(connection: Connection, msg_id: str) -> tuple:
        """A message is its channel's copy (C-11: IDs are unique within a topic); where the subscription is not
        known, the connection's."""
        subscription = connection.subscription
        return (*subscription, msg_id) if subscription else ("", connection.name, msg_id)

    def is_fresh(self, topic: str) -> bool:
        """The traffic holds ``topic``'s whole life (``fresh``)."""
        return self._fresh is not None and self._fresh(topic)

    def knows(self, topic: str) -> bool:
        """Every connection and HTTP request of the nsqd that touched ``topic`` is in the traffic."""
        return self.all_started and self.http_seen or self.is_fresh(topic)

    def consumers(self, subscription: tuple[str, str]) -> list[Connection]:
        return [c for c in self.connections.values() if c.subscription == subscription]

    def is_paused(self, topic: str, channel: str) -> bool:
        return (topic,) in self.paused or (topic, channel) in self.paused

    def want_tick(self, at: float) -> None:
        self._due = min(self._due, at)

    def _let_go(self, now: float) -> None:
        """Past ``MESSAGES_KEPT`` messages: those no longer in flight are let go, by the judge and its monitors."""
        in_flight = {id(delivery) for connection in self.connections.values()
                     for delivery in connection.in_flight.values()}
        self.messages = {key: delivery for key, delivery in self.messages.items() if id(delivery) in in_flight}
        self.let_go_at = now
        self._keep = max(MESSAGES_KEPT, 2 * len(self.messages))  # messages in flight alone may be that many
        for monitor in self._active:
            try:
                monitor.forget(self, now)
            except Exception as exc:  # noqa: BLE001
                self._failed(monitor, exc)

    def _failed(self, monitor: Monitor, exc: Exception) -> None:
        super()._failed(monitor, exc)
        self._dispatch()

    def _dispatch(self) -> None:
        """Each event goes to the monitors that read its kind: those whose ``observe`` is their own and lists it."""
        observing = [monitor for monitor in self._active if type(monitor).observe is not Monitor.observe]
        self._watching = {kind: [monitor for monitor in observing if kind in monitor.KINDS] for kind in EVERY_KIND}
        for key, kind in ((MESSAGES, MESSAGE), (FINS, COMMAND)):
            self._taking_runs[key] = [monitor for monitor in self._watching[kind] if self.runs and key in monitor.RUNS]
            self._one_by_one[key] = [monitor for monitor in self._watching[kind]
                                     if monitor not in self._taking_runs[key]]
        self._ticking = [monitor for monitor in self._active if type(monitor).tick is not Monitor.tick]

    # ---- the ledger ---------------------------------------------------------------------------------------
    def _begin(self, ts: float) -> None:
        if self.started_at is None:
            self.started_at = ts

    def _tick(self, now: float) -> None:
        if now < self._due:
            return
        self._due = float("inf")
        for monitor in self._ticking:
            if monitor.due <= now:
                monitor.due = float("inf")
                try:
                    monitor.tick(self, now)
                except Exception as exc:  # noqa: BLE001
                    self._failed(monitor, exc)
            self._due = min(self._due, monitor.due)

    def _ledger_run(self, connection: Connection, run: Run) -> None:
        """``_ledger`` of each of ``run``'s events, in turn: a delivery is in flight to its connection alone."""
        in_flight, messages = connection.in_flight, self.messages
        if run.key == FINS:
            for ts, msg_id in zip(run.ts, run.msg_ids, strict=True):
                delivery = in_flight.pop(msg_id, None)
                if delivery is not None:
                    delivery.settled, delivery.settled_at, delivery.requeue_delay_ms = FINS, ts, None
            return
        timeout, margin, name = connection.msg_timeout_ms, buffered_margin(connection), connection.name
        seconds = (timeout or MIN_MSG_TIMEOUT_MS) / 1000
        topic, channel = connection.subscription or ("", name)
        for ts, msg_id, attempts in zip(run.ts, run.msg_ids, run.attempts, strict=True):
            delivery = Delivery(name, ts, attempts, ts + seconds - margin, ts + seconds if timeout else None)
            in_flight.pop(msg_id, None)
            in_flight[msg_id] = delivery
            key = (topic, channel, msg_id)
            before = messages.get(key)
            if before is not None and before.settled is None:
                delivery.timed_out_on = before.connection
                if before.connection != name:
                    # D-12: a channel's message is in flight to one consumer at a time; delivered again, the one
                    # before had timed out (a capture does not show it)
                    earlier = self.connections[before.connection].in_flight
                    if earlier.get(msg_id) is before:
                        del earlier[msg_id]
            messages[key] = delivery

    def _ledger(self, connection: Connection, event: Observed) -> None:
        kind = event.kind
        if kind == MESSAGE and event.msg_id is not None:
            self._ledger_run(connection, Run(MESSAGES, [event.ts], [event.msg_id], [event.attempts], [], []))
            if len(self.messages) > self._keep:
                self._let_go(event.ts)
        elif kind == COMMAND and event.name in ("FIN", "REQ", "TOUCH") and event.msg_id is not None:
            delivery = connection.in_flight.get(event.msg_id)
            if delivery is None:
                return
            if event.name == "TOUCH":
                delivery.touched = True
                timeout = connection.msg_timeout_ms
                ceiling = connection.max_msg_timeout_ms or self.max_msg_timeout_ms
                if timeout:  # D-13: now + msg_timeout, never past delivery + max_msg_timeout
                    latest = event.ts + timeout / 1000
                    delivery.latest_timeout = latest if ceiling is None else min(latest, delivery.at + ceiling / 1000)
                    if ceiling is not None:
                        delivery.earliest_timeout = min(latest, delivery.at + ceiling / 1000) \
                            - buffered_margin(connection)
                return
            del connection.in_flight[event.msg_id]
            delivery.settled, delivery.settled_at = event.name, event.ts
            delivery.requeue_delay_ms = event.number
        elif kind == ERROR and event.name in ("E_FIN_FAILED", "E_REQ_FAILED") and event.msg_id is not None:
            delivery = self.messages.get(self.message_key(connection, event.msg_id))
            if delivery is not None and delivery.settled and delivery.connection == connection.name:
                delivery.settle_failed = True


def _json_field(body: bytes, name: str):
    try:
        document = json.loads(body)
    except ValueError:
        return None
    return document.get(name) if isinstance(document, dict) else None


def buffered_margin(connection: Connection) -> float:
    """How much earlier than the capture saw a message the broker may have started its timeout (D-16: at buffering,
    up to output_buffer_timeout before the wire) plus a scan (D-14), in seconds."""
    answer = connection.identify_answer or {}
    buffered = answer.get("output_buffer_timeout")
    return (buffered if isinstance(buffered, int) and buffered >= 0 else 1000) / 1000 + SCAN_S

