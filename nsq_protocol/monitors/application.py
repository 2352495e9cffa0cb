"""What the application asked of its client library: the settings it gave the library and what its handler does with
each message. The traffic does not carry them, yet a client item is about them (NSQC-CONN-004: the heartbeat
interval the user configured; NSQC-MSG-002: the requeue the handler asked for), as a broker item may be about the
broker's flags: whoever ran the application tells the judge (``new_judge(application=...)``; the client suite: what
its driver was told). A setting left None was not told, and the rules about it say "not judged"."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

FIN, REQ, TOUCH, FAIL = "fin", "req", "touch", "fail"  # what a handler does with a message
LAYERS = ("tls_v1", "snappy", "deflate")  # IDENTIFY's fields that ask for a layer (ID-30)


class Order(NamedTuple):
    """What the handler does with one message: finish it, requeue it after ``delay_ms``, touch it ``touches``
    times then finish it, or fail (the library's own requeue)."""

    action: str
    delay_ms: int | None = None
    touches: int | None = None


class Publish(NamedTuple):
    """One publish the application asked for, as its command carries it: PUB, MPUB or DPUB, the topic, the bodies'
    body_hash, DPUB's defer in ms."""

    verb: str
    topic: str
    bodies: tuple[int, ...]
    defer_ms: int | None = None


@dataclass(frozen=True)
class Application:
    topic: str | None = None
    channel: str | None = None  # the channel its consumer subscribes
    heartbeat_interval_ms: int | None = None  # what every connection of it was configured with
    layers: frozenset[str] | None = None  # of LAYERS: what every connection of it was told to ask for
    max_in_flight: int | None = None
    # the attempts past which the library finishes a message unhandled, the application's or the library's documented
    # default; 0: no limit; None: not known (left to a library whose default the judge was not told)
    max_attempts: int | None = None
    # a failed handler's REQ delay in ms for a message of so many attempts, as the library documents it
    requeue_delay_ms: Callable[[int], int] | None = None
    publishes: frozenset[Publish] | None = None  # None: it was told to publish nothing known
    orders: Mapping[int, Order] = field(default_factory=dict)  # a message's body_hash -> its handler's order
    lookupds: int | None = None  # how many nsqlookupd addresses its consumer was given (None: not known)
    lookupd_poll_interval_ms: int | None = None  # how often it polls them: as configured, or the library's fixed one
    max_backoff_ms: int | None = None  # the longest backoff its consumer was configured with
    # the least time before its consumer connects to an nsqd address again, as its library documents it, counted from
    # the last connection's close ("close") or the last attempt to connect ("connect": a library trying on a ticker);
    # None: not known, or the consumer finds its nsqds on lookupds
    reconnect_min_ms: int | None = None
    reconnect_since: str = "close"

    def handled(self, attempts: int) -> bool | None:
        """Whether the handler gets a message of so many attempts (max_attempts, P-REQ-02); None: not known."""
        most = self.max_attempts
        if attempts <= 1 or most == 0:
            return True
        return None if most is None else attempts <= most
