"""Sampling (D-45): with sample_rate S from 1 to 99 a client's pump keeps each message it takes with probability
(S + 1) / 100, and the dropped ones are gone. A topic hands out its message IDs in sequence (C-11: within a
millisecond each is the previous plus one), so a run of consecutive IDs all delivered as first deliveries to one
sampling client is a run of messages its pump took and kept, one after another: unlikely beyond a few."""

from __future__ import annotations

import re

from nsq_protocol.monitors.events import BROKER, MESSAGE, MESSAGES
from nsq_protocol.monitors.monitor import Monitor

UNLIKELY = 1e-6  # the chance, over all the runs of the connection, below which a run is no sampling's doing
_HEX_ID = re.compile(r"[0-9a-f]{16}\Z")


class SampledShare(Monitor):
    """D-45: a client with sample_rate S (of its first IDENTIFY, which its pump keeps: ID-40) is not sent a run of
    consecutive message IDs so long that keeping each with probability (S + 1) / 100 would not explain it."""

    ITEMS = ("D-45",)
    KINDS = frozenset({MESSAGE})
    RUNS = frozenset({MESSAGES})

    def __init__(self):
        super().__init__()
        self._ids: dict[str, list[int]] = {}  # connection -> the IDs of its first deliveries

    def observe(self, judge, connection, event, answered):
        if event.kind == MESSAGE and event.attempts == 1 and event.msg_id and _HEX_ID.match(event.msg_id) \
                and _kept_share(connection) is not None:
            self._ids.setdefault(connection.name, []).append(int(event.msg_id, 16))

    def observe_run(self, judge, connection, run):
        if _kept_share(connection) is not None:  # only a sampling client's deliveries count
            for event in run.events():
                self.observe(judge, connection, event, None)

    def forget(self, judge, now):
        self._ids = {name: ids[-1:] for name, ids in self._ids.items()}  # a run goes on from its last ID

    def closed(self, judge, connection):
        self._judge(connection, connection.closed_at)

    def finish(self, judge, now):
        for name in list(self._ids):
            self._judge(judge.connections[name], now)

    def _judge(self, connection, now):
        ids = sorted(set(self._ids.pop(connection.name, ())))
        if not ids:
            return
        longest = run = 1
        for previous, current in zip(ids, ids[1:], strict=False):
            run = run + 1 if current == previous + 1 else 1
            longest = max(longest, run)
        share = _kept_share(connection)
        if len(ids) * share ** longest < UNLIKELY:
            self.report("D-45", BROKER, now, connection.name, f"about {share:.0%} of the messages its pump takes "
                        f"(sample_rate {round(share * 100) - 1})", f"{longest} consecutive message IDs all delivered, "
                        f"of {len(ids)}")


def _kept_share(connection) -> float | None:
    """The share of messages the pump keeps, where the connection samples."""
    rate = (connection.identify or {}).get("sample_rate")
    if not isinstance(rate, int) or isinstance(rate, bool) or not 1 <= rate <= 98:
        return None
    return (rate + 1) / 100
