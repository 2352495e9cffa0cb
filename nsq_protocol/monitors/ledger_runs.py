"""A run (events.Run) against the judge's ledger as it stands before the run: its messages' keys, and what the
ledger holds of them, gathered at C speed (a run is a capture's bulk; its message IDs are distinct, so what the
ledger holds of each is what ``observe`` would find at that event). The ledger takes the run only after the
monitors that take it whole."""

from __future__ import annotations

from itertools import repeat
from operator import attrgetter

from nsq_protocol.monitors.waits import RunKeys

settled = attrgetter("settled")
earliest_timeout = attrgetter("earliest_timeout")
timed_out_on = attrgetter("timed_out_on")


def message_keys(connection, run) -> list[tuple]:
    """Judge.message_key of each of ``run``'s messages on ``connection``, the run's."""
    first, second = _channel(connection)
    return list(zip(repeat(first), repeat(second), run.msg_ids))


def run_keys(connection, run, start: int, stop: int) -> RunKeys:
    """``message_keys(connection, run)[start:stop]``, held as the run's IDs."""
    return RunKeys(_channel(connection), run.msg_ids[start:stop])


def _channel(connection) -> tuple:
    """What Judge.message_key puts before the ID: the subscription, else the connection's own."""
    return tuple(connection.subscription or ("", connection.name))


def delivered(judge, connection, run) -> list:
    """The ledger's latest Delivery (judge.messages) of each of ``run``'s messages delivered before."""
    return list(filter(None, map(judge.messages.get, message_keys(connection, run))))


def settling(connection, run) -> list:
    """What each FIN of ``run`` finds in flight on ``connection`` (its Delivery, or None)."""
    return list(map(connection.in_flight.get, run.msg_ids))
