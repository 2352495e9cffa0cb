"""One nsqlookupd's traffic judged: its TCP protocol V1 connections (what producers, nsqd among them, send it and
what it replies) and its HTTP exchanges, through ``LOOKUPD_MONITORS``. The V1 bytes are read here with the codec
(nsq_protocol.wire_v1) into the events nsqd's monitors know (events.Observed): a command, a reply (a ``RESPONSE``,
or an ``ERROR`` when its text starts with ``E_``: L-TCP-02), the client's ``UNREADABLE`` bytes, and ``UNFRAMED``
where lookupd's bytes are no reply. lookupd answers each command once, in order, so a reply answers the oldest
command not yet answered.

Feeding: ``open`` a connection, then ``client_bytes`` and ``server_bytes`` as they crossed the wire, ``close``
when it ends, ``http`` for each HTTP exchange (nsq_protocol.http's, as nsqd's monitors take them) at its answer's
time, ``nsqd_changed`` for what a registering nsqd's own traffic showed (a cluster's), and ``finish`` at the end
of the traffic; all in time order."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from nsq_protocol.http import HttpExchange
from nsq_protocol.monitors.events import COMMAND, ERROR, MAGIC, RESPONSE, STREAM, UNFRAMED, UNREADABLE, Observed
from nsq_protocol.monitors.monitor import Judging, Monitor, Violation
from nsq_protocol.monitors.nsqd_names import NameChange
from nsq_protocol.wire import ProtocolViolation
from nsq_protocol.wire_v1 import V1Command, V1CommandDecoder, V1ReplyDecoder, is_error


class V1Connection:
    """What the judge knows of one V1 connection. ``readable``: its client's bytes are read as lookupd reads them
    (its start is in the traffic, and nothing unreadable came before), so its replies pair with its commands."""

    def __init__(self, name: str, started: bool, opened_at: float, client_address: str | None = None):
        self.name = name
        self.client_address = client_address  # "host:port" of the client's end, where the traffic shows it
        self.started = started
        self.opened_at = opened_at
        self.readable = started
        self.magic_ok: bool | None = None  # the client's magic was '  V1' (None: not yet seen)
        self.identified = False  # an IDENTIFY was answered with lookupd's JSON: the connection is a producer's
        self.pending: deque[Observed] = deque()  # commands not yet answered
        self.replies = 0
        self.error: Observed | None = None  # lookupd's first error reply (every one is fatal: L-TCP-21)
        self.open = True
        self.closed_at: float | None = None
        self.closed_by: str | None = None  # BROKER, CLIENT or None (not known)
        self._commands = V1CommandDecoder()
        self._replies = V1ReplyDecoder()

    def commands(self, ts: float, data: bytes) -> list[Observed]:
        if not self.readable:
            return []
        try:
            decoded = self._commands.feed(data)
        except ProtocolViolation as exc:
            self.readable = False
            where = MAGIC if self._commands.magic != V1CommandDecoder.MAGIC else STREAM
            self.magic_ok = self._commands.magic == V1CommandDecoder.MAGIC
            return [*(_command(ts, command) for command in exc.commands), Observed(ts, UNREADABLE, where, exc.reason)]
        if self._commands.magic is not None:
            self.magic_ok = True
        return [_command(ts, command) for command in decoded]

    def replies_of(self, ts: float, data: bytes) -> list[Observed]:
        if not self.started:
            return []
        try:
            return [_reply(ts, reply) for reply in self._replies.feed(data)]
        except ProtocolViolation as exc:
            self.started = False  # what follows cannot be read
            return [Observed(ts, UNFRAMED, text=exc.reason)]


class LookupdJudge(Judging):
    """The same surface as nsqd's Judge (violations, not_judged, failures, finish) over one nsqlookupd's traffic.
    ``http_seen``: lookupd's HTTP exchanges are in the traffic; ``wording``: an error's description is judged, not
    only its code (the suite judges the wording itself, as a SHOULD). ``whole``: the traffic starts with lookupd and
    holds all of it, so every registration is in it; else ``fresh(topic)`` says which topics' registrations all are
    (a suite case's own names). ``inactive_producer_timeout_s`` and ``tombstone_lifetime_s``: lookupd's flags
    (their defaults unless told). ``nsqd_clients``: the V1 clients are nsqds registering (a cluster's capture), whose
    own rules (registration.toml) then judge too."""

    def __init__(self, monitors: list[Monitor], *, http_seen: bool, timing: bool = False, wording: bool = True,
                 whole: bool = False, fresh: Callable[[str], bool] | None = None,
                 inactive_producer_timeout_s: float = 300.0, tombstone_lifetime_s: float = 45.0,
                 nsqd_clients: bool = False):
        super().__init__(monitors)
        self.http_seen = http_seen
        self.timing = timing
        self.wording = wording
        self.whole = whole
        self._fresh = fresh
        self.inactive_producer_timeout_s = inactive_producer_timeout_s
        self.tombstone_lifetime_s = tombstone_lifetime_s
        self.nsqd_clients = nsqd_clients
        self.connections: dict[str, V1Connection] = {}
        # every V1 connection is read whole: none caught mid-way, none with bytes lookupd reads otherwise than the
        # codec, so every registration is seen
        self.all_readable = True

    def knows(self, topic: str) -> bool:
        """Every registration of ``topic`` is in the traffic."""
        return self.whole or self._fresh is not None and self._fresh(topic)

    # ---- feeding ---------------------------------------------------------------------------------------
    def open(self, name: str, ts: float, started: bool, client_address: str | None = None) -> V1Connection:
        """``client_address``: "host:port" of the client's end (lookupd's producer ID and remote_address, L-TCP-04)."""
        connection = self.connections[name] = V1Connection(name, started, ts, client_address)
        self.all_readable &= started
        return connection

    def client_bytes(self, name: str, ts: float, data: bytes) -> None:
        connection = self.connections[name]
        for event in connection.commands(ts, data):
            if event.kind == COMMAND:
                connection.pending.append(event)
            elif event.name != MAGIC:  # after a bad magic nothing registers
                self.all_readable = False
            self._dispatch(connection, event, None)

    def server_bytes(self, name: str, ts: float, data: bytes) -> None:
        connection = self.connections[name]
        for event in connection.replies_of(ts, data):
            answered = connection.pending.popleft() if event.kind != UNFRAMED and connection.pending else None
            self._dispatch(connection, event, answered)
            if event.kind == UNFRAMED:
                self.all_readable = False
                continue
            connection.replies += 1
            if event.kind == ERROR and connection.error is None:
                connection.error = event
            elif answered is not None and answered.name == "IDENTIFY" and event.kind == RESPONSE:
                connection.identified = True

    def close(self, name: str, ts: float, by: str | None) -> None:
        connection = self.connections[name]
        connection.open, connection.closed_at, connection.closed_by = False, ts, by
        for monitor in self._active:
            self._call(monitor, monitor.closed, connection)

    def http(self, exchange: HttpExchange) -> None:
        for monitor in self._active:
            self._call(monitor, monitor.http, exchange)

    def nsqd_changed(self, nsqd: str, change: NameChange) -> None:
        """A change of a topic or channel that the traffic of the nsqd at ``nsqd`` ("host:port" of its TCP side),
        one of this lookupd's V1 clients, showed (nsqd_names.NamesChanged), in time order with the rest."""
        for monitor in self._active:
            self._call(monitor, monitor.nsqd_changed, nsqd, change)

    def finish(self, ts: float) -> list[Violation]:
        for monitor in self._active:
            self._call(monitor, monitor.finish, ts)
        return self.violations

    # ---- dispatch --------------------------------------------------------------------------------------
    def _dispatch(self, connection: V1Connection, event: Observed, answered: Observed | None) -> None:
        for monitor in self._active:
            if event.kind in monitor.KINDS:
                self._call(monitor, monitor.observe, connection, event, answered)

    def _call(self, monitor: Monitor, hook, *args) -> None:
        try:
            hook(self, *args)
        except Exception as exc:  # noqa: BLE001 (a monitor's own bug on traffic it did not foresee)
            self._failed(monitor, exc)


def _text(value: bytes) -> str:
    return value.decode("utf-8", "surrogateescape")


def _command(ts: float, command: V1Command) -> Observed:
    """A V1 command as lookupd reads it (L-TCP-20): ``name`` its first word, ``number`` how many words follow,
    ``text`` IDENTIFY's body as sent."""
    params = command.params
    return Observed(ts, COMMAND, _text(command.name), _text(command.body) if command.body is not None else "",
                    topic=_text(params[0]) if params else None, channel=_text(params[1]) if len(params) > 1 else None,
                    number=len(params))


def _reply(ts: float, data: bytes) -> Observed:
    text = _text(data)
    if is_error(data):  # L-TCP-02: told apart by its text alone
        code, _, description = text.partition(" ")
        return Observed(ts, ERROR, code, description)
    return Observed(ts, RESPONSE, text)
