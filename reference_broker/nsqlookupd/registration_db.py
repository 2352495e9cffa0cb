"""nsqlookupd's registration database (nsqlookupd/registration_db.go): registrations keyed by
(category, key, subkey), `client::` for every IDENTIFYed connection, `topic:T:` and `channel:T:C`, each holding
the producers (nsqd connections) that registered it, by producer id (the connection's remote address).

A registration may have no producer at all: created over HTTP, or left by the last producer's UNREGISTER or
disconnection; it stays listed until deleted (L-TCP-13, L-TCP-14, L-TCP-15, L-TCP-16). Listing order is insertion order
here, Go's map order there: unspecified (L-HTTP-05)."""
from __future__ import annotations

import dataclasses
import threading
import time
from typing import NamedTuple

GO_ZERO_TIME_UNIX_NANO = -6795364578871345152  # time.Time{}.UnixNano(): "tombstoned_at" never tombstoned


class Registration(NamedTuple):
    category: str
    key: str
    subkey: str

    def matches(self, category: str, key: str, subkey: str) -> bool:
        """`*` as key or subkey matches any (IsMatch)."""
        return (category == self.category and key in ("*", self.key) and subkey in ("*", self.subkey))


@dataclasses.dataclass
class PeerInfo:
    """What an nsqd's IDENTIFY said (L-TCP-04), its connection's remote address and its last IDENTIFY or PING."""
    id: str
    remote_address: str
    hostname: str
    broadcast_address: str
    tcp_port: int
    http_port: int
    version: str
    topology_zone: str
    topology_region: str
    last_update: int = dataclasses.field(default_factory=time.time_ns)

    def public(self) -> dict:
        """The PEER object of `/lookup` (L-HTTP-04), in PeerInfo's field order."""
        return {"remote_address": self.remote_address, "hostname": self.hostname,
                "broadcast_address": self.broadcast_address, "tcp_port": self.tcp_port,
                "http_port": self.http_port, "version": self.version, "topology_zone": self.topology_zone,
                "topology_region": self.topology_region}


@dataclasses.dataclass(eq=False)
class Producer:
    """One nsqd in one registration; the same PeerInfo is shared by all of a connection's registrations."""
    peer_info: PeerInfo
    tombstoned: bool = False
    tombstoned_at: int = GO_ZERO_TIME_UNIX_NANO

    def tombstone(self) -> None:
        self.tombstoned = True
        self.tombstoned_at = time.time_ns()

    def is_tombstoned(self, lifetime: int) -> bool:
        """L-HTTP-12, L-HTTP-17: a tombstone hides the producer for `lifetime` nanoseconds."""
        return self.tombstoned and time.time_ns() - self.tombstoned_at < lifetime

    def is_active(self, inactive_timeout: int, tombstone_lifetime: int) -> bool:
        """FilterByActive: IDENTIFYed or PINGed within `inactive_timeout` (L-TCP-19), not tombstoned."""
        return (time.time_ns() - self.peer_info.last_update <= inactive_timeout
                and not self.is_tombstoned(tombstone_lifetime))


class RegistrationDB:
    def __init__(self):
        self._lock = threading.Lock()
        self._registrations: dict[Registration, dict[str, Producer]] = {}

    def add_registration(self, registration: Registration) -> None:
        with self._lock:
            self._registrations.setdefault(registration, {})

    def add_producer(self, registration: Registration, producer: Producer) -> bool:
        """False when this producer (by id) was there already: registering twice is harmless (L-TCP-12)."""
        with self._lock:
            producers = self._registrations.setdefault(registration, {})
            if producer.peer_info.id in producers:
                return False
            producers[producer.peer_info.id] = producer
            return True

    def remove_producer(self, registration: Registration, producer_id: str) -> tuple[bool, int]:
        """Whether it was there, and how many producers are left; the registration itself stays."""
        with self._lock:
            producers = self._registrations.get(registration)
            if producers is None:
                return False, 0
            removed = producers.pop(producer_id, None) is not None
            return removed, len(producers)

    def remove_registration(self, registration: Registration) -> None:
        with self._lock:
            self._registrations.pop(registration, None)

    def find_registrations(self, category: str, key: str, subkey: str) -> list[Registration]:
        with self._lock:
            if "*" not in (key, subkey):
                registration = Registration(category, key, subkey)
                return [registration] if registration in self._registrations else []
            return [r for r in self._registrations if r.matches(category, key, subkey)]

    def find_producers(self, category: str, key: str, subkey: str) -> list[Producer]:
        """The producers of the matching registrations, each producer id once."""
        with self._lock:
            found: dict[str, Producer] = {}
            for registration, producers in self._registrations.items():
                if registration.matches(category, key, subkey):
                    for producer_id, producer in producers.items():
                        found.setdefault(producer_id, producer)
            return list(found.values())

    def lookup_registrations(self, producer_id: str) -> list[Registration]:
        """Every registration this producer is in."""
        with self._lock:
            return [r for r, producers in self._registrations.items() if producer_id in producers]

    def snapshot(self) -> list[tuple[Registration, list[Producer]]]:
        """Every registration with its producers, for `/debug`."""
        with self._lock:
            return [(r, list(producers.values())) for r, producers in self._registrations.items()]
