"""What nsqd must tell the nsqlookupds it registers with when its topics and channels come and go
(registration.toml, R-03 to R-07), and on each new connection to one (R-10, R-11), judged on its V1 connections
to an nsqlookupd against the changes its own traffic shows (nsqd_names.NameChange, told through
``LookupdJudge.nsqd_changed``).

nsqd/lookup.go lookupLoop sends each notification (nsqd.go Notify: a goroutine each, so in no fixed order) to every
lookupd peer: REGISTER for a topic or channel that is not exiting, UNREGISTER for one that is. A creation's
REGISTER may cross the wire before the client reads its OK, and a deletion's UNREGISTER before the HTTP answer:
a REGISTER already holding, or an UNREGISTER seen since the request, counts. A creation raced by its deletion
sends UNREGISTER twice and no REGISTER: a deletion lifts the creation's due. A connection that ends loses what
was due on it (R-10's reconnection registers anew).

nsqd/lookup_peer.go Command connects whenever its peer is not connected (at nsqd's start, at the first command
after a lost connection, after a PUT of the lookupds' list) and runs lookup.go connectCallback before the command:
IDENTIFY, then a REGISTER of each channel nsqd has and of each topic without channels, from one snapshot taken after
the IDENTIFY's answer. A topic or channel the model knows at the IDENTIFY is in that snapshot unless a deletion
came in between, which lifts its due. The commands that follow (a PING at the next tick at the latest) come after
the snapshot's REGISTERs: those still due ``ANNOUNCE_S`` after the connection's first PING are missing.

Both sides' times are one clock (a capture's; the suite's, where the client read nsqd's answers later than nsqd
acted and the fake lookupd logged on arrival): a change told at ``ts`` is due by ``ts + ANNOUNCE_S``."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from nsq_protocol.monitors.events import BROKER, COMMAND, Observed
from nsq_protocol.monitors.lookupd_judge import V1Connection
from nsq_protocol.monitors.lookupd_nsqd import PING_S, PING_SLACK_S
from nsq_protocol.monitors.monitor import Monitor
from nsq_protocol.monitors.nsqd_names import CREATED, EPHEMERAL, LEFT, LOOKUPDS, RESTARTED, NameChange

# nsqd's lookupLoop sends a notification within milliseconds; a lookupd peer that does not answer holds it up to
# its 1 s read timeout (lookup_peer.go), and a loaded machine more
ANNOUNCE_S = 5.0
DIAL_S = 1.0  # lookup_peer.go Connect's dial timeout: a dead lookupd ahead of this one in the loop delays its tick
ENDED = "the traffic ended before it was due"
_CONNECTED = frozenset({"R-10", "R-11"})  # the dues of a new connection's connectCallback


@dataclass
class _Due:
    verb: str  # REGISTER or UNREGISTER
    key: tuple[str, str | None]  # (topic, channel or None)
    item: str
    cause: NameChange
    by: float


@dataclass
class _Peer:
    """One nsqd's V1 connection to this lookupd, read from its start."""

    nsqd_port: int  # its IDENTIFY's tcp_port
    host: str | None  # its client end's host, where the traffic shows it
    identified_at: float
    registered: set = field(default_factory=set)  # (topic, None) and (topic, channel) REGISTERed, not UNREGISTERed
    unregistered_at: dict = field(default_factory=dict)  # key -> its last UNREGISTER
    due: list[_Due] = field(default_factory=list)
    pinged: bool = False  # its connectCallback is over: a PING came after it
    last_ping: float | None = None  # its latest PING: the phase of nsqd's 15 s ticker
    dropped: _Dropped | None = None  # the connection before it, which lookupd ended


@dataclass
class _Dropped:
    """An nsqd's connection that lookupd ended (its restart, or its fatal error): nsqd finds the dead link at its
    next PING and connects again at the tick after (R-14)."""

    closed_at: float
    last_ping: float | None  # the phase of nsqd's ticker, where the connection PINGed
    up_at: float | None = None  # the first sign since that lookupd serves again (a new connection's command, HTTP)


class NsqdAnnounces(Monitor):
    """R-03: a topic or channel nsqd creates (PUB, SUB, /pub, /topic/create, /channel/create) is REGISTERed on each
    of its lookupd connections (a channel's REGISTER names its topic too); R-04: a /channel/delete answered 200 is
    followed by 'UNREGISTER t c'; R-05: a /topic/delete by 'UNREGISTER t' and one for each channel it had; R-06:
    an ephemeral channel's last consumer leaving by its UNREGISTER; R-07: an ephemeral topic whose last channel went
    so by 'UNREGISTER t' too; R-10: a new connection (after a lost one, or at nsqd's start) REGISTERs every
    channel and topic nsqd has before its first PING; R-11: so does one opened for a PUT of nsqd's lookupds' list;
    R-14: after lookupd ended nsqd's connection (its restart), nsqd connects again by the tick after the one that
    found the dead link, or the first after lookupd serves again (the old connection's PINGs show nsqd's ticker;
    capture times)."""

    ITEMS = ("R-03", "R-04", "R-05", "R-06", "R-07", "R-10", "R-11", "R-14")
    KINDS = frozenset({COMMAND})

    def __init__(self) -> None:
        super().__init__()
        self._peers: dict[str, _Peer] = {}  # connection -> what it told
        self._has: dict[str, dict[str, set]] = {}  # nsqd "host:port" -> its topics -> their channels, as told
        self._earliest = float("inf")  # the earliest due of any peer
        self._replaced: dict[str, NameChange] = {}  # nsqd -> its latest PUT of its lookupds' list
        self._dropped: dict[tuple, _Dropped] = {}  # (host, tcp_port) of an nsqd -> its connection lookupd ended

    # ---- the lookupd side -----------------------------------------------------------------------------
    def observe(self, judge, connection: V1Connection, event: Observed, answered: Observed | None) -> None:
        self._overdue(judge, event.ts)
        self._serving(event.ts, connection.opened_at)
        peer = self._peers.get(connection.name)
        if peer is None:
            if event.name == "IDENTIFY" and connection.started and judge.nsqd_clients:
                port = _tcp_port(event.text)
                if port is not None:
                    host = connection.client_address.rsplit(":", 1)[0] if connection.client_address else None
                    peer = self._peers[connection.name] = _Peer(port, host, event.ts)
                    self._connected(judge, peer, connection, event)
            return
        if event.name == "PING":
            if peer.dropped is not None and not peer.pinged:
                self._reconnected(judge, peer.dropped, connection, event)
            peer.last_ping = event.ts
        if event.name == "PING" and not peer.pinged:
            peer.pinged = True
            for due in peer.due:
                if due.item in _CONNECTED:
                    due.by = min(due.by, event.ts + ANNOUNCE_S)
            self._earliest = min([self._earliest, *(due.by for due in peer.due)])
        key = (event.topic, event.channel) if event.topic else None
        if key is None:
            return
        if event.name == "REGISTER":
            peer.registered.add(key)
            peer.registered.add((event.topic, None))
            if event.channel:  # nsqd has the channel (perhaps one lookupd's /channels named: nsqd.go GetTopic)
                for nsqd, topics in self._has.items():
                    if self._of(peer, nsqd) and event.topic in topics:
                        topics[event.topic].add(event.channel)
        elif event.name == "UNREGISTER":
            peer.registered.discard(key)
            peer.unregistered_at[key] = event.ts
        else:
            return
        peer.due = [due for due in peer.due if not _met(due, event)]

    def closed(self, judge, connection: V1Connection) -> None:
        self._overdue(judge, connection.closed_at)
        peer = self._peers.pop(connection.name, None)  # what it had due is lost with it
        if peer is not None and connection.closed_by == BROKER and connection.closed_at is not None:
            self._dropped[peer.host, peer.nsqd_port] = _Dropped(connection.closed_at, peer.last_ping)

    def http(self, judge, exchange) -> None:
        self._serving(exchange.ts, exchange.ts)

    def _serving(self, ts: float, since: float) -> None:
        """lookupd served at ``ts`` something that began at ``since`` (a connection's open, a request): it is up
        again after the connections it ended before then."""
        for dropped in self._dropped.values():
            if dropped.up_at is None and since > dropped.closed_at:
                dropped.up_at = ts

    def _connected(self, judge, peer: _Peer, connection: V1Connection, identify: Observed) -> None:
        """R-10, R-11: connectCallback's REGISTERs of what nsqd has (a channel's names its topic too); R-14: after
        lookupd ended the connection before, the reconnection by the tick after the one that found the dead link."""
        peer.dropped = self._dropped.pop((peer.host, peer.nsqd_port), None)
        for nsqd, topics in self._has.items():
            if not self._of(peer, nsqd):
                continue
            replaced = self._replaced.get(nsqd)
            item = "R-11" if replaced is not None and replaced.since <= connection.opened_at <= \
                replaced.ts + ANNOUNCE_S else "R-10"
            cause = NameChange(connection.opened_at, identify.ts, "connected", "")
            by = identify.ts + PING_S + PING_SLACK_S  # the first PING's tick at the latest
            peer.due.extend(_Due("REGISTER", (topic, channel), item, cause, by)
                            for topic, channels in topics.items() for channel in channels or (None,))
            self._earliest = min(self._earliest, by)

    def _reconnected(self, judge, dropped: _Dropped, connection: V1Connection, ping: Observed) -> None:
        """R-14: nsqd's ticker (the old connection's PINGs) finds the dead link at its first tick after the close
        and connects at the next, or at the first tick after lookupd is back: the tick's PING connects, and follows
        the connectCallback at once. A connection made otherwise (for a notification, whose PING waits for the next
        tick, or at a restarted nsqd's start, on a ticker of its own) is not judged."""
        if not judge.timing:
            self.skip("R-14", "the times are not the capture's")
            return
        if dropped.last_ping is None:
            self.skip("R-14", "the connection lookupd ended never PINGed: nsqd's ticker is not shown")
            return
        if dropped.up_at is None or dropped.up_at >= connection.opened_at:
            self.skip("R-14", "nothing shows lookupd serving again before nsqd's new connection")
            return
        opened = connection.opened_at
        phase = dropped.last_ping
        off_tick = min(opened - _tick_before(phase, opened), _tick_after(phase, opened) - opened)
        if ping.ts - opened > ANNOUNCE_S or off_tick > PING_SLACK_S + DIAL_S:
            self.skip("R-14", "nsqd's new connection was not made by a tick of the ticker the old one PINGed on")
            return
        found = _tick_after(dropped.last_ping, dropped.closed_at)
        due = max(found + PING_S, _tick_after(dropped.last_ping, dropped.up_at)) + PING_SLACK_S + DIAL_S
        if connection.opened_at > due:
            self.report("R-14", BROKER, connection.opened_at, connection.name,
                        f"nsqd connected again by {due - dropped.closed_at:.1f} s after lookupd ended its connection "
                        f"(the tick after the one at {found - dropped.closed_at:.1f} s that found the dead link)",
                        f"connected {connection.opened_at - dropped.closed_at:.1f} s after it")

    # ---- the nsqd side --------------------------------------------------------------------------------
    def nsqd_changed(self, judge, nsqd: str, change: NameChange) -> None:
        """``nsqd``: "host:port" of its TCP side; ``change``: what its traffic showed."""
        self._overdue(judge, change.ts)
        if change.change == LOOKUPDS:
            self._replaced[nsqd] = change
            return
        if change.change == RESTARTED:  # what it restored is not known: none of it is due on a connection
            self._has.pop(nsqd, None)
            return
        topics = self._has.setdefault(nsqd, {})
        topic, channel = change.topic, change.channel
        peers = [peer for peer in self._peers.values() if self._of(peer, nsqd) and peer.identified_at < change.since]
        if change.change == CREATED:
            new = [(topic, None)] if topic not in topics else []
            if channel is not None and channel not in topics.get(topic, ()):
                new.append((topic, channel))
            topics.setdefault(topic, set()).update(() if channel is None else (channel,))
            for peer in peers:
                for key in new:
                    self._expect(peer, "REGISTER", key, "R-03", change)
            return
        # a deletion: the creation's REGISTER may never come (an exiting one is UNREGISTERed), nor a connection's
        # since the deletion's request (its snapshot may be later)
        for peer in (peer for peer in self._peers.values() if self._of(peer, nsqd)):
            peer.due = [due for due in peer.due if not (due.verb == "REGISTER" and due.key[0] == topic and
                                                        (channel is None or due.key[1] in (None, channel)))]
        if change.change == LEFT and not change.last:
            return
        item = "R-06" if change.change == LEFT else "R-04" if channel is not None else "R-05"
        channels = topics.get(topic, set())
        if channel is None:
            for peer in peers:
                for gone in channels | {key[1] for key in peer.registered if key[0] == topic and key[1]}:
                    self._expect(peer, "UNREGISTER", (topic, gone), item, change)
                self._expect(peer, "UNREGISTER", (topic, None), item, change)
            topics.pop(topic, None)
            return
        channels.discard(channel)
        for peer in peers:
            self._expect(peer, "UNREGISTER", (topic, channel), item, change)
        left = channels | {key[1] for peer in peers for key in peer.registered if key[0] == topic and key[1]}
        left.discard(channel)  # its UNREGISTER may not have come yet
        if topic.endswith(EPHEMERAL) and not left:  # nsqd/topic.go DeleteExistingChannel: its last channel gone
            for peer in peers:
                self._expect(peer, "UNREGISTER", (topic, None), "R-07", change)
            topics.pop(topic, None)

    def finish(self, judge, now: float) -> None:
        self._overdue(judge, now)
        for name, peer in self._peers.items():
            for due in peer.due:
                if due.item in _CONNECTED and peer.pinged:  # the whole traffic is told: no deletion lifts it now
                    self._missing(name, due)
                else:
                    self.skip(due.item, ENDED)

    # ---- dues ---------------------------------------------------------------------------------------------
    def _expect(self, peer: _Peer, verb: str, key: tuple, item: str, cause: NameChange) -> None:
        if verb == "REGISTER" and key in peer.registered:
            return
        if verb == "UNREGISTER" and key not in peer.registered and \
                peer.unregistered_at.get(key, float("-inf")) >= cause.since:
            return
        peer.due.append(_Due(verb, key, item, cause, cause.ts + ANNOUNCE_S))
        self._earliest = min(self._earliest, cause.ts + ANNOUNCE_S)

    def _overdue(self, judge, now: float | None) -> None:
        if now is None or now < self._earliest:
            return
        self._earliest = float("inf")
        for name, peer in self._peers.items():
            for due in peer.due:
                if due.by <= now:
                    self._missing(name, due)
            peer.due = [due for due in peer.due if due.by > now]
            self._earliest = min([self._earliest, *(due.by for due in peer.due)])

    def _missing(self, name: str, due: _Due) -> None:
        line = " ".join((due.verb, due.key[0], *(() if due.key[1] is None else (due.key[1],))))
        if due.item in _CONNECTED:
            expected = f"'{line}' (nsqd has it) after the IDENTIFY at {due.cause.ts:.3f}, before the first PING"
        else:
            expected = f"'{line}' within {ANNOUNCE_S:g} s of nsqd's {due.cause.change} " \
                f"{'/'.join(filter(None, due.key))} at {due.cause.ts:.3f}"
        self.report(due.item, BROKER, due.by, name, expected, "none")

    @staticmethod
    def _of(peer: _Peer, nsqd: str) -> bool:
        host, _, port = nsqd.rpartition(":")
        return str(peer.nsqd_port) == port and peer.host in (None, host)


def _tick_after(phase: float, ts: float) -> float:
    """The first tick of nsqd's 15 s ticker (one at ``phase``) at or after ``ts``."""
    return phase + max(0, math.ceil((ts - phase) / PING_S)) * PING_S


def _tick_before(phase: float, ts: float) -> float:
    """The last tick of nsqd's 15 s ticker (one at ``phase``) at or before ``ts``."""
    return phase + math.floor((ts - phase) / PING_S) * PING_S


def _met(due: _Due, event: Observed) -> bool:
    if event.name != due.verb or event.topic != due.key[0]:
        return False
    # a channel's REGISTER registers its topic too (nsqlookupd/lookup_protocol_v1.go REGISTER)
    return event.channel == due.key[1] or due.verb == "REGISTER" and due.key[1] is None


def _tcp_port(body: str) -> int | None:
    try:
        fields = json.loads(body)
    except ValueError:
        return None
    port = fields.get("tcp_port") if isinstance(fields, dict) else None
    return port if isinstance(port, int) and not isinstance(port, bool) else None
