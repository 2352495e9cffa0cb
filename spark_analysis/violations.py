"""Passive conformance checks on one decoded connection, named by requirement IDs.

Each finding names the requirement ID of the conformance catalogue (``conformance/requirements.toml``),
the nsqd-behavior.md item, who broke it and how; the decoder makes it a ``violation`` row. The same pass
counts the connection's messages in flight per second (``inflight`` rows) for the report.
Timing-based checks use generous margins because capture time is not the broker's clock.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

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

# behaviour item -> the catalogue requirement that states it
REQUIREMENT_OF = {
    "D-01": "NSQ-RDY-004",  # deliveries only while in flight < RDY
    "P-FIN-04": "NSQ-FIN-003",  # FIN of an unknown ID: non-fatal E_FIN_FAILED
    "C-23": "NSQ-ERR-001",  # a fatal error frame closes the connection
    "C-28": "NSQ-HB-001",  # heartbeats every negotiated interval
    "C-29": "NSQ-HB-002",  # silent for 2 heartbeat intervals: closed
}


@dataclass(frozen=True)
class Finding:
    ts_ns: int
    requirement: str  # the catalogue's ID
    detail: str  # the behaviour item, who broke it and how


def check_connection(c: dict[str, list], order: list[int], identify_request: dict, identify_response: dict,
                     close_kind: str) -> tuple[list[Finding], dict[int, int]]:
    """The findings on one connection's decoded rows (``c``: its columns, ``order``: its rows by time), and its
    most messages in flight per second (for the report)."""
    # A message counts as in flight from when nsqd buffered it (D-16), up to output_buffer_timeout
    # before it shows on the wire; the queue scan adds ~100 ms (D-14). Expire ours that much earlier.
    buffered_ms = identify_response.get("output_buffer_timeout", DEFAULT_OUTPUT_BUFFER_MS) + SCAN_MS
    msg_timeout_ns = (int(identify_response.get("msg_timeout") or DEFAULT_MSG_TIMEOUT_MS) - buffered_ms) * NS_PER_MS
    heartbeat_ms = identify_request.get("heartbeat_interval") or DEFAULT_HEARTBEAT_MS
    rdy_history: deque[tuple[int, int]] = deque()  # (ts, count): the current RDY and those within the grace
    in_flight: dict[str, int] = {}  # msg id -> deadline
    # (deadline, msg id) in delivery order, so deadlines only grow: expiry looks at the front alone. A TOUCH or a
    # FIN leaves its entry behind; it is skipped when its deadline no longer matches in_flight.
    expiries: deque[tuple[int, str]] = deque()
    delivered: set[str] = set()
    buckets: dict[int, int] = {}
    last_heartbeat = None
    last_command_ts = None
    fatal_error_ts = None
    found = []

    def effective_rdy(ts):
        # rows come in time order: RDYs older than the grace no longer count, unless still current
        while len(rdy_history) > 1 and rdy_history[0][0] < ts - RDY_GRACE_NS:
            rdy_history.popleft()
        if len(rdy_history) == 1:  # the common case: one RDY in force
            return rdy_history[0][1]
        return max((count for _, count in rdy_history), default=0)

    timestamps, kinds, names, values, statuses, msg_ids, codes = (
        c[column] for column in ("ts_ns", "kind", "name", "value", "status", "msg_id", "code")
    )
    for index in order:
        ts, kind, name = timestamps[index], kinds[index], names[index]
        if kind == "command":
            last_command_ts = ts
            if name == "RDY" and values[index] is not None:
                rdy_history.append((ts, values[index]))
            elif name == "CLS":
                rdy_history.append((ts, 0))  # D-04: CLS sets RDY to 0
            elif name in ("FIN", "REQ") and statuses[index] == "ok":
                in_flight.pop(msg_ids[index], None)
            elif name == "TOUCH" and msg_ids[index] in in_flight:
                in_flight[msg_ids[index]] = ts + msg_timeout_ns  # P-TOUCH-04
                expiries.append((ts + msg_timeout_ns, msg_ids[index]))
            elif name == "FIN" and statuses[index] == "failed" and msg_ids[index] not in delivered:
                found.append((ts, "P-FIN-04", "client: FIN of a message ID never delivered on this connection"))
        elif kind == "frame" and name == "message":
            while expiries and expiries[0][0] <= ts:
                deadline, msg_id = expiries.popleft()
                if in_flight.get(msg_id) == deadline:
                    del in_flight[msg_id]  # D-11: timed out
            rdy = effective_rdy(ts)
            if len(in_flight) >= rdy:
                found.append((ts, "D-01", f"server: delivery with {len(in_flight)} in flight and RDY {rdy}"))
            msg_id = msg_ids[index]
            in_flight[msg_id] = ts + msg_timeout_ns
            expiries.append((ts + msg_timeout_ns, msg_id))
            delivered.add(msg_id)
            second = ts // NS_PER_S
            buckets[second] = max(buckets.get(second, 0), len(in_flight))
        elif kind == "frame" and name == "heartbeat":
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
            last_heartbeat = ts
        elif kind == "frame" and name == "error" and codes[index] not in ID_ERRORS:
            fatal_error_ts = fatal_error_ts or ts
        elif kind == "frame" and fatal_error_ts is not None and ts - fatal_error_ts > NS_PER_S:
            found.append((ts, "C-23", "server: kept sending after a fatal error frame"))
            fatal_error_ts = None
    last_ts = max(timestamps, default=0)
    if (
        close_kind == "server_fin"
        and fatal_error_ts is None
        and heartbeat_ms > 0
        and last_command_ts is not None
        and last_ts - last_command_ts >= 2 * heartbeat_ms * NS_PER_MS
    ):
        found.append((last_ts, "C-29", "client: no command for 2 x heartbeat interval; the server closed"))
    return [Finding(ts, REQUIREMENT_OF[behaviour], f"{behaviour} {detail}") for ts, behaviour, detail in found], buckets
