"""nsqd's side of nsqlookupd (nsqd/lookup.go): the lookup loop, one thread that owns a LookupPeer per
`--lookupd-tcp-address`, and the query for a new topic's channels (nsqd.go GetTopic).

Nothing else waits for the loop: creating or deleting a topic or channel only queues it (`notify`, nsqd's
Notify), and the loop decides REGISTER or UNREGISTER when it takes it from the queue, by whether the topic or
channel is exiting by then, as nsqd's loop does. A slow or unreachable lookupd delays only the loop.

Every notification is numbered, and the first number of a topic or channel is its creation's.
A connection's REGISTERs of everything list only what was created before its IDENTIFY began; what came later
is registered by its own notification. nsqd's loop is back in its select within microseconds of the IDENTIFY
reply, where a Python loop may still be reading it, or listing the topics, when the next topic or channel is
created; listed as well, it would be registered twice (rec-0331), or a new topic would be registered by its
channels alone (rec-0333). What was queued before the connection began is sent after its REGISTERs, twice
then, as nsqd does with the notifications of its metadata load (rec-0335).
"""
from __future__ import annotations

import http.client
import json
import logging
import queue
import socket
import threading
import time
import urllib.parse
import weakref

from .channel import Channel
from .lookup_peer import PING, Command, LookupPeer, LookupPeerError, register, unregister
from .topic import Topic
from .wire import is_valid_name

log = logging.getLogger("nsqd")

PING_INTERVAL = 15.0  # seconds, from a ticker started with the loop
_OPTIONS_CHANGED = object()  # nsqd's optsNotificationChan
_WAKE = object()


class LookupLoop:
    def __init__(self, nsqd, version: str):
        self._nsqd = nsqd
        self._version = version
        self._options = nsqd.options
        self._events: queue.SimpleQueue = queue.SimpleQueue()
        self._sequence_lock = threading.Lock()
        self._last_sequence = 0
        self._created_at: weakref.WeakKeyDictionary[Topic | Channel, int] = weakref.WeakKeyDictionary()
        self._exit = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lookup", daemon=True)
        self.peers: list[LookupPeer] = []  # replaced, never changed in place: other threads read it

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """nsqd's exitChan: what is still queued is dropped, as nsqd's pending Notify goroutines give up."""
        self._exit.set()
        self._events.put(_WAKE)
        if self._thread.is_alive():
            self._thread.join()

    def notify(self, thing: Topic | Channel) -> None:
        """nsqd's Notify: a topic or channel was created (also while the metadata loads, R-09) or deleted.
        Called after the change is in the topic map, so a snapshot that saw the sequence number sees it."""
        with self._sequence_lock:
            self._last_sequence += 1
            self._created_at.setdefault(thing, self._last_sequence)
            self._events.put(thing)

    def options_changed(self) -> None:
        """`PUT /config/...`: peers no longer listed go, new ones come (R-11)."""
        self._events.put(_OPTIONS_CHANGED)

    # -- the loop -------------------------------------------------------------------------------------------

    def _run(self) -> None:
        peers: list[LookupPeer] = []
        connect = True
        next_tick = time.monotonic() + PING_INTERVAL  # the ticker starts before the first connection
        while not self._exit.is_set():
            if connect:
                peers = self._add_peers(peers)
                connect = False
            now = time.monotonic()
            if now >= next_tick:  # a due tick goes before queued notifications, so they cannot starve it
                while next_tick <= now:
                    next_tick += PING_INTERVAL  # a Go ticker drops the ticks a slow receiver missed
                event = None
            else:
                try:
                    event = self._events.get(timeout=next_tick - now)
                except queue.Empty:
                    continue  # the ticker's turn: the loop sends the PING that is due
            if self._exit.is_set():
                break
            if event is None:
                self._ping(peers)
            elif event is _OPTIONS_CHANGED:
                peers = self._remove_peers(peers)
                connect = True
            elif event is not _WAKE:
                self._send_notification(peers, event)
        log.info("LOOKUP: closing")
        for peer in peers:
            peer.close()  # nsqd's connections end with its process; no UNREGISTER at exit

    def _add_peers(self, peers: list[LookupPeer]) -> list[LookupPeer]:
        """R-01, R-11: a peer for each listed address that has none yet, connected at once."""
        peers = list(peers)
        addresses = [peer.address for peer in peers]
        for address in self._options.nsqlookupd_tcp_addresses or []:
            if address in addresses:
                continue
            log.info("LOOKUP(%s): adding peer", address)
            peer = LookupPeer(address, self._options.max_body_size, self._identify_and_register)
            try:
                peer.command(None)
            except LookupPeerError:
                pass  # nsqd ignores this one: the next command (PING or notification) connects again
            peers.append(peer)
            addresses.append(address)
        self.peers = peers
        return peers

    def _remove_peers(self, peers: list[LookupPeer]) -> list[LookupPeer]:
        """R-11: a peer no longer listed is closed at once."""
        addresses = self._options.nsqlookupd_tcp_addresses or []
        kept = []
        for peer in peers:
            if peer.address in addresses:
                kept.append(peer)
                continue
            log.info("LOOKUP(%s): removing peer", peer)
            peer.close()
        self.peers = kept
        return kept

    def _ping(self, peers: list[LookupPeer]) -> None:
        """R-08: the reply's read is what finds a dead connection (R-10, R-14: a restarted lookupd); the next command
        reconnects."""
        for peer in peers:
            log.debug("LOOKUPD(%s): sending heartbeat", peer)
            self._command(peer, PING)

    def _send_notification(self, peers: list[LookupPeer], thing: Topic | Channel) -> None:
        """R-03, R-04, R-05, R-06, R-07: REGISTER, or UNREGISTER once the topic or channel is exiting. A failed command
        is not retried (R-10); the reconnection's REGISTERs recover it."""
        if isinstance(thing, Channel):
            branch, names = "channel", (thing.topic_name, thing.name)
        else:
            branch, names = "topic", (thing.name,)
        command = unregister(*names) if thing.exiting else register(*names)  # at a real lookupd
        for peer in peers:
            log.info("LOOKUPD(%s): %s %s", peer, branch, command)
            self._command(peer, command)

    @staticmethod
    def _command(peer: LookupPeer, command: Command) -> bytes | None:
        try:
            return peer.command(command)
        except LookupPeerError as error:
            log.error("LOOKUPD(%s): %s - %s", peer, command, error)  # one line per failed attempt
            return None

    # -- on every (re)connection: nsqd's connectCallback ---------------------------------------------------

    def _identify_and_register(self, peer: LookupPeer) -> None:
        """R-02: IDENTIFY (an E_INVALID or non-JSON reply: hang up, nothing registered); R-09, R-10: one REGISTER per
        channel of every topic, or of the topic alone."""
        options = self._options
        with self._sequence_lock:
            identify_began = self._last_sequence
        identify = Command("IDENTIFY", body=go_json({
            "version": self._version,
            "tcp_port": options.broadcast_tcp_port,
            "http_port": options.broadcast_http_port,
            "hostname": socket.gethostname(),
            "broadcast_address": options.broadcast_address,
            "topology_zone": options.topology_zone,
            "topology_region": options.topology_region,
        }))
        try:
            response = peer.command(identify)
        except LookupPeerError as error:
            log.error("LOOKUPD(%s): %s - %s", peer, identify, error)
            return
        if response == b"E_INVALID":
            log.info("LOOKUPD(%s): lookupd returned %s", peer, response.decode())
            peer.close()
            return
        try:
            _update_peer_info(peer.info, response)
        except ValueError:
            log.error("LOOKUPD(%s): parsing response - %s", peer, response.decode("utf-8", "replace"))
            peer.close()
            return
        info = peer.info
        log.info("LOOKUPD(%s): peer info {TCPPort:%s HTTPPort:%s Version:%s BroadcastAddress:%s}", peer,
                 info["tcp_port"], info["http_port"], info["version"], info["broadcast_address"])
        if not info["broadcast_address"]:
            log.error("LOOKUPD(%s): no broadcast address", peer)
        for command in self._registrations_created_by(identify_began):
            log.info("LOOKUPD(%s): %s", peer, command)
            try:
                peer.command(command)
            except LookupPeerError as error:
                log.error("LOOKUPD(%s): %s - %s", peer, command, error)
                return

    def _registrations_created_by(self, sequence: int) -> list[Command]:
        """R-09: one REGISTER per channel of every topic, or of the topic alone, of what was created by then;
        all of them listed first, so no topic's lock is held across a round trip."""
        listed = []
        for topic in self._nsqd.sorted_topics():
            with topic.lock:
                listed.append((topic, list(topic.channels.values())))
        never = sequence + 1
        commands = []
        with self._sequence_lock:  # not held with a topic's lock: creations notify after releasing it
            for topic, channels in listed:
                if self._created_at.get(topic, never) > sequence:
                    continue
                channels = [channel for channel in channels if self._created_at.get(channel, never) <= sequence]
                commands += [register(topic.name, channel.name) for channel in channels] or [register(topic.name)]
        return commands

    # -- a new topic's channels (nsqd.go GetTopic) ---------------------------------------------------------

    def lookupd_http_addresses(self) -> list[str]:
        """Every peer whose IDENTIFY reply named a broadcast address, with the HTTP port it named."""
        return [_join_host_port(peer.info["broadcast_address"], peer.info["http_port"])
                for peer in self.peers if peer.info["broadcast_address"]]

    def channels_to_precreate(self, topic_name: str) -> list[str]:
        """A new topic first gets the channels nsqlookupd knows for it, so none misses the first messages;
        nsqd asks every lookupd's `/channels` and waits for the answers before the topic starts."""
        addresses = self.lookupd_http_addresses()
        if not addresses:
            if self._options.nsqlookupd_tcp_addresses:
                log.error("no available nsqlookupd to query for channels to pre-create for topic %s", topic_name)
            return []
        channels, errors = [], []

        def query(address: str) -> None:
            try:
                channels.extend(_lookupd_channels(address, topic_name, self._options))
            except LookupPeerError as error:
                errors.append(str(error))

        threads = [threading.Thread(target=query, args=(address,), name="lookupd-query") for address in addresses]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            prefix = "failed to query any nsqlookupd: " if len(errors) == len(addresses) else ""
            log.warning("failed to query nsqlookupd for channels to pre-create for topic %s - %s%s", topic_name,
                        prefix, "\n".join(errors))
        names = []
        for name in sorted(set(channels)):
            if name.endswith("#ephemeral"):
                continue  # no ephemeral channel without a consumer
            if not is_valid_name(name.encode("utf-8", "surrogateescape")):
                # nsqd takes any name here, and a channel's name is part of its disk queue's file names
                log.warning("skipping creation of invalid channel %s", name)
                continue
            names.append(name)
        return names


def _lookupd_channels(address: str, topic_name: str, options) -> list[str]:
    """nsqd's ClusterInfo.GetLookupdTopicChannels for one lookupd: `GET /channels?topic=`, with nsqd's
    --http-client-connect-timeout and --http-client-request-timeout; the reply is read up to --max-body-size."""
    endpoint = f"http://{address}/channels?topic={urllib.parse.quote_plus(topic_name)}"
    log.info("CI: querying nsqlookupd %s", endpoint)
    host, _, port = address.rpartition(":")
    connection = None
    try:
        connection = http.client.HTTPConnection(host.strip("[]"), int(port),
                                                timeout=options.http_client_connect_timeout / 1e9)
        connection.connect()
        connection.sock.settimeout(options.http_client_request_timeout / 1e9)
        connection.request("GET", endpoint[len(f"http://{address}"):],
                           headers={"Accept": "application/vnd.nsq; version=1.0"})
        response = connection.getresponse()
        body = response.read(options.max_body_size + 1)
    except (OSError, http.client.HTTPException) as error:
        raise LookupPeerError(f'Get "{endpoint}": {error}') from None
    finally:
        if connection is not None:
            connection.close()
    if len(body) > options.max_body_size:
        raise LookupPeerError(f'Get "{endpoint}": response body larger than {options.max_body_size} bytes')
    if response.status != 200:
        raise LookupPeerError(f"got response {response.status} {response.reason} {body!r}")
    try:
        document = json.loads(body.decode("utf-8", "replace"))
    except (ValueError, RecursionError) as error:
        raise LookupPeerError(f"invalid JSON: {error}") from None
    channels = document.get("channels") if isinstance(document, dict) else []
    if not isinstance(document, dict) or not isinstance(channels, list | None) or \
            not all(isinstance(name, str) for name in channels or []):
        raise LookupPeerError("json: cannot unmarshal the reply into {channels: []string}")
    return channels or []


_PEER_INFO_TYPES = {"tcp_port": int, "http_port": int, "version": str, "broadcast_address": str}


def _update_peer_info(info: dict, response: bytes) -> None:
    """json.Unmarshal of the IDENTIFY reply into nsqd's peerInfo: keys match the fields case-insensitively;
    a field the reply leaves out (or sets to null) keeps its value; a reply that is not a JSON object is an
    error, and so is a field of the wrong type, after the other fields were set."""
    try:
        document = json.loads(response.decode("utf-8", "replace"))  # Go takes invalid UTF-8 as U+FFFD
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if document is None:
        return
    if not isinstance(document, dict):
        raise ValueError("not a JSON object")
    wrong = []
    for key, value in document.items():
        field = key.lower()
        kind = _PEER_INFO_TYPES.get(field)
        if kind is None or value is None:
            continue
        if type(value) is not kind or (kind is int and not -1 << 63 <= value < 1 << 63):
            wrong.append(field)
            continue
        info[field] = value
    if wrong:
        raise ValueError(f"wrong type for {', '.join(wrong)}")


def go_json(value) -> bytes:
    """Go's json.Marshal: compact, a map's keys sorted, HTML characters escaped, invalid UTF-8 replaced."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for character in "<>&\u2028\u2029":
        text = text.replace(character, f"\\u{ord(character):04x}")
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace").encode()


def _join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
