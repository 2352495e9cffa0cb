"""How many messages a consumer had in flight, the most in each second: the report's in-flight picture.

Counted per connection, one released window after another (``InFlight.run``), from its deliveries, its settlements
and TOUCHes that succeeded, and its msg_timeout. The catalogue's rules are judged elsewhere
(``spark_analysis/judge/``: the monitors of ``nsq_protocol``); this only counts.
"""

from __future__ import annotations

import math

import numpy as np

from spark_analysis.decode.kinds import Kind, Status

DEFAULT_MSG_TIMEOUT_MS = 60_000  # ID-07: nsqd's --msg-timeout unless IDENTIFY set one
DEFAULT_OUTPUT_BUFFER_MS = 250  # ID-03
SCAN_MS = 100  # D-14
NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000


class InFlight:
    """One connection's messages in flight, carried from window to window. A message counts from when nsqd buffered
    it (D-16: up to output_buffer_timeout before the wire, plus a queue scan, D-14) until it is settled or its
    timeout passes (D-11); a TOUCH restarts that (P-TOUCH-04)."""

    def __init__(self, identify_response: dict):
        buffered_ms = identify_response.get("output_buffer_timeout", DEFAULT_OUTPUT_BUFFER_MS) + SCAN_MS
        self.msg_timeout_ns = (int(identify_response.get("msg_timeout") or DEFAULT_MSG_TIMEOUT_MS)
                               - buffered_ms) * NS_PER_MS
        # msg id -> deadline, in the order the deadlines were set (a delivery or a TOUCH moves its ID to the end), so
        # deadlines only grow along it: expiry looks at the front alone, once the time passes next_expiry
        self.in_flight: dict[str, int] = {}
        self.next_expiry = math.inf
        self.peaks: dict[int, int] = {}  # second -> the most in flight, for seconds the next window may add to
        self.last_ts = 0

    def run(self, c: dict[str, list], order: np.ndarray, counted: np.ndarray, last: bool) -> dict[int, int]:
        """The most messages in flight per second of the seconds this window completed (all of them when it is the
        ``last``); ``c``: its columns, ``order``: its rows by time, of which the ``counted`` ones (commands and
        frames) are read."""
        in_flight, peaks, msg_timeout_ns = self.in_flight, self.peaks, self.msg_timeout_ns
        next_expiry = self.next_expiry
        timestamps, kinds, names, statuses, msg_ids = (
            c[column] for column in ("ts_ns", "kind", "name", "status", "msg_id"))
        second, peak = None, 0  # kept in locals: a consumer's rows are half deliveries
        for index in order[counted[order]].tolist():
            ts, name = timestamps[index], names[index]
            if kinds[index] == Kind.COMMAND:
                if (name == "FIN" or name == "REQ") and statuses[index] == Status.OK:
                    in_flight.pop(msg_ids[index], None)
                elif name == "TOUCH" and msg_ids[index] in in_flight:
                    del in_flight[msg_ids[index]]
                    in_flight[msg_ids[index]] = ts + msg_timeout_ns
                continue
            if name != "message":
                continue
            if ts >= next_expiry:
                next_expiry = _expire(in_flight, ts)
            msg_id = msg_ids[index]
            in_flight.pop(msg_id, None)  # delivered again while in flight: its deadline moves to the end
            in_flight[msg_id] = deadline = ts + msg_timeout_ns
            next_expiry = min(next_expiry, deadline)
            if ts // NS_PER_S != second:
                if second is not None:
                    peaks[second] = max(peaks.get(second, 0), peak)
                second, peak = ts // NS_PER_S, 0
            peak = max(peak, len(in_flight))
        if second is not None:
            peaks[second] = max(peaks.get(second, 0), peak)
        self.next_expiry = next_expiry
        self.last_ts = max(self.last_ts, max(timestamps, default=0))
        done = {second: count for second, count in peaks.items() if last or second < self.last_ts // NS_PER_S}
        for second in done:
            del peaks[second]
        return done


def _expire(in_flight: dict[str, int], now: int) -> float:
    """Drops the messages whose deadline has passed from the front of ``in_flight``; returns the next deadline."""
    expired = []
    for msg_id, deadline in in_flight.items():
        if deadline > now:
            break
        expired.append(msg_id)
    for msg_id in expired:
        del in_flight[msg_id]
    return next(iter(in_flight.values()), math.inf)
