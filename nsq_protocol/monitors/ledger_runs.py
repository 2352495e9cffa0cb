"""A run (events.Run) against the judge's ledger as it stands before the run: its messages' keys, and what the
ledger holds of them, gathered at C speed (a run is a capture's bulk; its message IDs are distinct, so what the
ledger holds of each is what ``observe`` would find at that event). Read once for all the monitors that take the
run: the ledger takes the run only after them."""

from __future__ import annotations

from itertools import repeat
from operator import attrgetter

settled = attrgetter("settled")
earliest_timeout = attrgetter("earliest_timeout")
timed_out_on = attrgetter("timed_out_on")

_read: dict = {}  # what was read of the latest run ("run": the run itself)


def message_keys(connection, run) -> list[tuple]:
    """Judge.message_key of each of ``run``'s messages on ``connection``, the run's."""
    return _of(run, "keys", lambda: _keys(connection, run.msg_ids))


def delivered(judge, connection, run) -> list:
    """The ledger's latest Delivery (judge.messages) of each of ``run``'s messages delivered before."""
    return _of(run, "delivered", lambda: list(filter(None, map(judge.messages.get, message_keys(connection, run)))))


def settling(connection, run) -> list:
    """What each FIN of ``run`` finds in flight on ``connection`` (its Delivery, or None)."""
    return _of(run, "settling", lambda: list(map(connection.in_flight.get, run.msg_ids)))


def _keys(connection, msg_ids: list[str]) -> list[tuple]:
    first, second = connection.subscription or ("", connection.name)
    return list(zip(repeat(first), repeat(second), msg_ids))


def _of(run, what: str, read):
    if _read.get("run") is not run:
        _read.clear()
        _read["run"] = run
    if what not in _read:
        _read[what] = read()
    return _read[what]
