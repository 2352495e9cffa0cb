"""A run (events.Run) against the judge's ledger as it stands before the run: its messages' keys, and what the
ledger holds of them, gathered at C speed (a run is a capture's bulk; its message IDs are distinct, so what the
ledger holds of each is what ``observe`` would find at that event)."""

from __future__ import annotations

from itertools import repeat
from operator import attrgetter

settled = attrgetter("settled")
earliest_timeout = attrgetter("earliest_timeout")
timed_out_on = attrgetter("timed_out_on")


def message_keys(connection, msg_ids: list[str]) -> list[tuple]:
    """Judge.message_key of each of ``msg_ids`` on ``connection``."""
    first, second = connection.subscription or ("", connection.name)
    return list(zip(repeat(first), repeat(second), msg_ids))


def known(ledger: dict, keys) -> list:
    """What ``ledger`` (judge.messages, a connection's in_flight) holds of ``keys``: those it holds."""
    return list(filter(None, map(ledger.get, keys)))
