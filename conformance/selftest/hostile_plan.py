"""What the hostile fake nsqd (hostile_broker.py) may lie about, and the seeded choices of one connection or
request."""

from __future__ import annotations

import random
from dataclasses import dataclass

# What the plan can turn on, each a family of lies (a connection or request draws among the enabled ones).
TCP_HOSTILITIES = (
    "garbage-frame",  # a frame of an unknown type, or bytes that are no frame at all
    "lying-frame-size",  # a size below 4, above any limit, or more than what follows
    "odd-error",  # error frames without a code, with an unknown or non-UTF-8 one, instead of the right answer
    "identify-types",  # IDENTIFY's JSON with values of the wrong types (deflate_level -5, "x", null, 1e309, ...)
    "bad-json",  # truncated, oversized or non-object JSON where an object is due
    "bad-upgrade",  # agreeing to TLS, snappy or deflate, then garbage in that layer
    "short-message",  # message frames with a bare header, odd IDs, attempts and timestamps
    "close",  # closing the connection at any point, in the middle of a frame too
)
HTTP_HOSTILITIES = (
    "http-status",  # a wrong status, or a status line that is no status line
    "http-garbage-body",  # bytes that are no JSON where JSON is due
    "http-truncated",  # a Content-Length larger than the body, then a close
    "http-lying-length",  # a Content-Length smaller than the body, or not a number
    "http-types",  # JSON of the wrong types in /stats, /info, /config and the rest
)
HOSTILITIES = TCP_HOSTILITIES + HTTP_HOSTILITIES


@dataclass(frozen=True)
class HostilePlan:
    """Which lies are on (``hostilities``), how often an answer lies (``rate``) and the seed of every choice."""

    hostilities: frozenset[str]
    seed: int
    rate: float = 0.25

    def __post_init__(self):
        unknown = set(self.hostilities) - set(HOSTILITIES)
        if unknown:
            raise ValueError(f"unknown hostilities: {sorted(unknown)}")

    def describe(self) -> str:
        return f"seed={self.seed} rate={self.rate} hostilities={','.join(sorted(self.hostilities)) or 'none'}"


class Liar:
    """One connection's or request's choices: ``lies(family)`` is True when that family is on and the draw says so."""

    def __init__(self, plan: HostilePlan, rng: random.Random):
        self.plan, self.rng = plan, rng

    def lies(self, family: str) -> bool:
        return family in self.plan.hostilities and self.rng.random() < self.plan.rate

    def pick(self, options):
        return self.rng.choice(options)
