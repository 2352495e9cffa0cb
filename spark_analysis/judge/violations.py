"""Passive conformance checks on one decoded connection, named by requirement IDs.

Each finding names the requirement that the behaviour catalogue gives the item it checks (``trace_requirement`` in
``conformance/spec/*.toml``), the item, who broke it and how; the decoder makes it a ``violation`` row. The same
pass counts the connection's messages in flight per second (``inflight`` rows) for the report. The checks carry
their state from one window of a connection to the next (``ConnectionChecks``).
Timing-based checks use generous margins because capture time is not the broker's clock.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from conformance.spec import behaviours
from spark_analysis.decode.kinds import Close, Kind, Status

DEFAULT_MSG_TIMEOUT_MS = 60_000  # ID-07
DEFAULT_HEARTBEAT_MS = 30_000  # C-27
DEFAULT_OUTPUT_BUFFER_MS = 250  # ID-03
SCAN_MS = 100  # D-14
RDY_GRACE_NS = 1_000_000_000  # messages already buffered when RDY drops still arrive (D-16)
HEARTBEAT_LATE_FACTOR = 2.0
NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000

# Non-fatal errors answer FIN/REQ/TOUCH by message ID, outside the response order (C-23, P-FIN-04).
ID_ERRORS = {"E_FIN_FAILED": "FIN", "E_REQ_FAILED": "REQ", "E_TOUCH_FAILED": "TOUCH"}

# behaviour item -> the requirement its violations are named by, from the catalogue (conformance/spec/)
REQUIREMENT_OF = {item.id: item.trace_requirement for item in behaviours().values() if item.trace_requirement}


@dataclass(frozen=True)
class Finding:
    ts_ns: int
    requirement: str  # the catalogue's ID
    explanation: str  # the behaviour item, who broke it and how


class ConnectionChecks:
    """The checks of one connection, fed its rows one window after another in time order (``run``), and its end
    (``finish``). What they remember is bounded by the messages in flight, but for the IDs delivered (8 bytes
    each, for P-FIN-04) and the per-second in-flight counts of the window."""

    def __init__(self, identify_request: dict, identify_response: dict):
        # A message counts as in flight from when nsqd buffered it (D-16), up to output_buffer_timeout
        # before it shows on the wire; the queue scan adds ~100 ms (D-14). Expire ours that much earlier.
        buffered_ms = identify_response.get("output_buffer_timeout", DEFAULT_OUTPUT_BUFFER_MS) + SCAN_MS
        self.msg_timeout_ns = (int(identify_response.get("msg_timeout") or DEFAULT_MSG_TIMEOUT_MS)
                               - buffered_ms) * NS_PER_MS
        self.heartbeat_ms = identify_request.get("heartbeat_interval") or DEFAULT_HEARTBEAT_MS
        self.rdy_history: deque[tuple[int, int]] = deque()  # (ts, count): the current RDY and those within the grace
        # msg id -> deadline, in the order the deadlines were set (a delivery or a TOUCH moves its ID to the end), so
        # deadlines only grow along it: expiry looks at the front alone, and only once the time passes next_expiry,
        # a deadline no later than the front's.
        self.in_flight: dict[str, int] = {}
        self.next_expiry = math.inf
        self.delivered: set[str] = set()  # this window's; earlier windows' as sorted hashes
        self.delivered_before: list[np.ndarray] = []
        self.buckets: dict[int, int] = {}
        self.last_heartbeat = None
        self.last_command_ts = None
        self.fatal_error_ts = None
        self.last_ts = 0

    def _effective_rdy(self, ts):
        rdy_history = self.rdy_history
        # rows come in time order: RDYs older than the grace no longer count, unless still current
        while len(rdy_history) > 1 and rdy_history[0][0] < ts - RDY_GRACE_NS:
            rdy_history.popleft()
        return max((count for _, count in rdy_history), default=0)

    def _ever_delivered(self, msg_id: str) -> bool:
        if msg_id in self.delivered:
            return True
        key = hash(msg_id)
        for hashes in self.delivered_before:
            position = np.searchsorted(hashes, key)
            if position < len(hashes) and hashes[position] == key:
                return True
        return False

    def run(self, c: dict[str, list], order: np.ndarray, checked: np.ndarray,
            last: bool) -> tuple[list[Finding], dict[int, int]]:
        """The findings on a window's rows (``c``: its columns, ``order``: its rows by time, of which the ``checked``
        ones, commands and frames: a producer's publish rows are a third of its rows), and the most messages in
        flight per second of the seconds it completed (all of them when it is the ``last``)."""
        order = order[checked[order]].tolist()
        in_flight, delivered, rdy_history = self.in_flight, self.delivered, self.rdy_history
        next_expiry = self.next_expiry
        msg_timeout_ns, heartbeat_ms, buckets = self.msg_timeout_ns, self.heartbeat_ms, self.buckets
        found = []
        timestamps, kinds, names, rdys, statuses, msg_ids, codes = (
            c[column] for column in ("ts_ns", "kind", "name", "rdy", "status", "msg_id", "code")
        )
        # the most in flight in the current second, kept in locals: a consumer's rows are half deliveries
        second, peak = None, 0
        for index in order:
            ts, name = timestamps[index], names[index]
            if kinds[index] == Kind.COMMAND:
                self.last_command_ts = ts
                if name == "FIN" or name == "REQ":
                    if statuses[index] == Status.OK:
                        in_flight.pop(msg_ids[index], None)
                    elif name == "FIN" and statuses[index] == Status.FAILED \
                            and not self._ever_delivered(msg_ids[index]):
                        found.append((ts, "P-FIN-04", "client: FIN of a message ID never delivered on this connection"))
                elif name == "RDY" and rdys[index] is not None:
                    rdy_history.append((ts, rdys[index]))
                elif name == "CLS":
                    rdy_history.append((ts, 0))  # D-04: CLS sets RDY to 0
                elif name == "TOUCH" and msg_ids[index] in in_flight:
                    del in_flight[msg_ids[index]]
                    in_flight[msg_ids[index]] = ts + msg_timeout_ns  # P-TOUCH-04
                continue
            if name == "message":
                if ts >= next_expiry:
                    next_expiry = _expire(in_flight, ts)  # D-11: timed out
                # the common case, one RDY in force, read without a call
                rdy = rdy_history[0][1] if len(rdy_history) == 1 else self._effective_rdy(ts)
                if len(in_flight) >= rdy:
                    found.append((ts, "D-01", f"server: delivery with {len(in_flight)} in flight and RDY {rdy}"))
                msg_id = msg_ids[index]
                in_flight.pop(msg_id, None)  # delivered again while in flight: its deadline moves to the end
                in_flight[msg_id] = deadline = ts + msg_timeout_ns
                if deadline < next_expiry:
                    next_expiry = deadline
                delivered.add(msg_id)
                if ts // NS_PER_S != second:
                    if second is not None:
                        buckets[second] = max(buckets.get(second, 0), peak)
                    second, peak = ts // NS_PER_S, 0
                if len(in_flight) > peak:
                    peak = len(in_flight)
            elif name == "heartbeat":
                last_heartbeat = self.last_heartbeat
                if (
                    last_heartbeat is not None
                    and heartbeat_ms > 0
                    and ts - last_heartbeat > HEARTBEAT_LATE_FACTOR * heartbeat_ms * NS_PER_MS
                ):
                    found.append(
                        (
                            ts,
                            "C-28",
                            f"server: heartbeat gap {(ts - last_heartbeat) / NS_PER_MS:.0f} ms "
                            f"for interval {heartbeat_ms} ms",
                        )
                    )
                self.last_heartbeat = ts
            elif name == "error" and codes[index] not in ID_ERRORS:
                self.fatal_error_ts = self.fatal_error_ts or ts
            elif self.fatal_error_ts is not None and ts - self.fatal_error_ts > NS_PER_S:
                found.append((ts, "C-23", "server: kept sending after a fatal error frame"))
                self.fatal_error_ts = None
        if second is not None:
            buckets[second] = max(buckets.get(second, 0), peak)
        self.next_expiry = next_expiry
        self.last_ts = max(self.last_ts, max(timestamps, default=0))
        if delivered:
            self.delivered_before.append(np.sort(np.fromiter(map(hash, delivered), np.int64, len(delivered))))
            delivered.clear()
        # a second the next window may still add to stays
        done = {second: count for second, count in buckets.items() if last or second < self.last_ts // NS_PER_S}
        for second in done:
            del buckets[second]
        findings = [Finding(ts, REQUIREMENT_OF[behaviour], f"{behaviour} {explanation}")
                    for ts, behaviour, explanation in found]
        return findings, done

    def finish(self, close_kind: Close) -> list[Finding]:
        """C-29: the server closed a connection whose client sent nothing for 2 heartbeat intervals."""
        heartbeat_ms = self.heartbeat_ms
        if (
            close_kind == Close.SERVER_FIN
            and self.fatal_error_ts is None
            and heartbeat_ms > 0
            and self.last_command_ts is not None
            and self.last_ts - self.last_command_ts >= 2 * heartbeat_ms * NS_PER_MS
        ):
            return [Finding(self.last_ts, REQUIREMENT_OF["C-29"],
                            "C-29 client: no command for 2 x heartbeat interval; the server closed")]
        return []


def _expire(in_flight: dict[str, int], now: int) -> float:
    """Drops the messages whose deadline has passed (D-11) from the front of ``in_flight``; returns the next
    deadline."""
    expired = []
    for msg_id, deadline in in_flight.items():
        if deadline > now:
            break
        expired.append(msg_id)
    for msg_id in expired:
        del in_flight[msg_id]
    return next(iter(in_flight.values()), math.inf)
