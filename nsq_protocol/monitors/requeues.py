"""A REQ with a positive timeout defers the message (D-21): it is not delivered again before the timeout has passed.
nsqd clamps a timeout above --max-req-timeout to the maximum (P-REQ-05, D-23); the flag is not in the traffic: a
timeout up to nsqd's default is judged whole, one above it only where a DPUB's E_INVALID showed the broker's range."""

from __future__ import annotations

import re

from nsq_protocol.monitors.connection import MIN_MSG_TIMEOUT_MS
from nsq_protocol.monitors.events import BROKER, COMMAND, ERROR, FINS, MESSAGE, MESSAGES, RESPONSE
from nsq_protocol.monitors.ledger_runs import message_keys
from nsq_protocol.monitors.monitor import Monitor

DEFAULT_MAX_REQ_TIMEOUT_MS = 3_600_000  # nsqd's --max-req-timeout
EARLY_SLACK_S = 0.02  # the capture's clock against itself: the broker starts the delay after the REQ crossed the wire
DEFAULT_OUTPUT_BUFFER_TIMEOUT_MS = 250  # nsqd's --output-buffer-timeout, where no IDENTIFY answer shows it
_DPUB_RANGE = re.compile(r"DPUB timeout -?\d+ out of range 0-(\d+)$")  # P-DPUB-02: the broker's --max-req-timeout


class RequeueDelayKept(Monitor):
    """D-21: a message REQ'd with a positive timeout is not delivered again before min(timeout,
    --max-req-timeout) after the REQ crossed the wire. Judged on a redelivery too early to be its timeout's (before
    its delivery plus msg_timeout, less what the output buffer may have held it: the broker's defaults where the
    IDENTIFY answer does not show them), to a connection open since before the REQ (a restart, which ends every
    connection, hands deferred messages on at once: D-33), the broker not crashed and the REQ's connection
    without a fatal error. D-23: a timeout above --max-req-timeout defers for the maximum, judged where a DPUB's
    refusal showed it."""

    ITEMS = ("D-21", "D-23")
    KINDS = frozenset({COMMAND, MESSAGE, ERROR, RESPONSE})
    RUNS = frozenset({MESSAGES, FINS})

    def __init__(self):
        super().__init__()
        self._deferred: dict[tuple, tuple] = {}  # message key -> (REQ's time, its delay in ms, the Delivery, conn)
        self._max_ms = DEFAULT_MAX_REQ_TIMEOUT_MS
        self._max_shown = False  # a DPUB's E_INVALID showed the broker's --max-req-timeout

    def observe_run(self, judge, connection, run):
        if run.key == FINS or not self._deferred or self._deferred.keys().isdisjoint(message_keys(connection, run)):
            return  # a FIN defers nothing; no message of the run was requeued
        for event in run.events():
            self.observe(judge, connection, event, None)

    def observe(self, judge, connection, event, answered):
        kind = event.kind
        if kind == COMMAND:
            if event.name == "REQ" and event.number and event.msg_id in connection.in_flight and judge.timing:
                delivery = connection.in_flight[event.msg_id]
                if delivery.settled is None:
                    key = judge.message_key(connection, event.msg_id)
                    self._deferred[key] = (event.ts, event.number, delivery, connection, _timeout_from(connection,
                                                                                                       delivery))
        elif kind == ERROR:
            if event.name == "E_INVALID" and answered is not None and answered.name == "DPUB":
                shown = _DPUB_RANGE.search(event.text)
                if shown:
                    self._max_ms, self._max_shown = int(shown.group(1)), True
        elif kind == MESSAGE and self._deferred and event.msg_id is not None:
            deferred = self._deferred.pop(judge.message_key(connection, event.msg_id), None)
            if deferred is not None:
                self._redelivered(judge, connection, event, *deferred)

    def _redelivered(self, judge, connection, event, requeued_at, delay_ms, delivery, requeuer, timeout_from):
        if delivery.settled != "REQ" or event.ts >= timeout_from or requeuer.fatal_error is not None \
                or judge.crashed_at is not None:
            return  # the channel was emptied since, or its timeout may have brought it back
        if connection.opened_at is None or connection.opened_at >= requeued_at:
            self.skip("D-21", "redelivered on a connection opened after the REQ: the broker may have restarted")
            return
        item = "D-21"
        if delay_ms > self._max_ms:  # D-23: clamped to --max-req-timeout, which only the traffic may show
            if not self._max_shown:
                self.skip("D-23", "the broker's --max-req-timeout is not in the traffic (no DPUB refusal showed it)")
                return
            item = "D-23"
        deferred_ms = min(delay_ms, self._max_ms)
        if event.ts < requeued_at + deferred_ms / 1000 - EARLY_SLACK_S:
            self.report(item, BROKER, event.ts, connection.name,
                        f"no redelivery before {deferred_ms} ms after REQ {delay_ms}",
                        f"redelivered {(event.ts - requeued_at) * 1000:.0f} ms after it", event)

    def forget(self, judge, now):
        self._deferred = {key: deferred for key, deferred in self._deferred.items() if key in judge.messages}


def _timeout_from(connection, delivery) -> float:
    """The earliest the broker can have timed ``delivery`` out: it started the timeout when it buffered the message,
    up to output_buffer_timeout before the wire (D-16)."""
    answer = connection.identify_answer or {}
    buffered = answer.get("output_buffer_timeout")
    if isinstance(buffered, int) and buffered < 0:
        return float("-inf")  # D-42: no timed flush, the message may have waited in the buffer for a heartbeat
    buffered = buffered if isinstance(buffered, int) else DEFAULT_OUTPUT_BUFFER_TIMEOUT_MS
    return delivery.at + ((connection.msg_timeout_ms or MIN_MSG_TIMEOUT_MS) - buffered) / 1000
