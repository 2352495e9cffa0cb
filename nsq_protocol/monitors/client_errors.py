"""The client and the broker's errors: a non-fatal one keeps the connection (NSQC-ERR-001, NSQC-ERR-002,
NSQC-ERR-003), a fatal close is followed by a reconnect (NSQC-ERR-004), reconnects to an nsqd that closes them at
once are spaced (NSQC-ERR-005), and none comes sooner than the delay the client's library documents (NSQC-ERR-006)."""

from __future__ import annotations

from collections import deque

from nsq_protocol.monitors.events import BROKER, CLIENT, ERROR
from nsq_protocol.monitors.monitor import Monitor

ITEM_OF = {"E_FIN_FAILED": "NSQC-ERR-001", "E_REQ_FAILED": "NSQC-ERR-002", "E_TOUCH_FAILED": "NSQC-ERR-003"}
DROPPED_WITHIN_S = 1.0  # a close this soon after a non-fatal error, with no CLS, is the client dropping it
RECONNECT_WITHIN_S = 20.0  # NSQC-ERR-004
RECONNECTS_WATCHED_S, MAX_RECONNECTS = 8.0, 16  # NSQC-ERR-005: at most 16 in 8 s
REFUSED_WITHIN_S = 0.1  # a connection the broker closed this soon after it opened was refused at once
# NSQC-ERR-006: a reconnect this share of the documented delay early is early (the wire's times are when the broker saw
# the close and the connect; a ticker's first tick counts from before the first connect)
EARLY_SHARE = 0.9


class NonFatalErrorsKeepConnection(Monitor):
    """NSQC-ERR-001, NSQC-ERR-002, NSQC-ERR-003: E_FIN_FAILED, E_REQ_FAILED and E_TOUCH_FAILED are non-fatal (C-23):
    the client that closes its connection within a second of one, without a CLS, dropped it for the error. Judged
    where the times are the wire's."""

    ITEMS = ("NSQC-ERR-001", "NSQC-ERR-002", "NSQC-ERR-003")

    def __init__(self):
        super().__init__()
        self._last_error: dict[str, object] = {}  # connection -> its last non-fatal error

    def observe(self, judge, connection, event, answered):
        if event.kind == ERROR and event.name in ITEM_OF:
            self._last_error[connection.name] = event

    def closed(self, judge, connection):
        error = self._last_error.get(connection.name)
        if error is None or connection.closed_by != CLIENT or connection.closing:
            return
        if not judge.timing:
            self.skip(ITEM_OF[error.name], "the times are when the client read the frames, not when they arrived")
        elif connection.closed_at - error.ts <= DROPPED_WITHIN_S:
            self.report(ITEM_OF[error.name], CLIENT, connection.closed_at, connection.name,
                        f"the connection kept after {error.name}",
                        f"closed by the client {connection.closed_at - error.ts:.2f} s after it, without CLS", error)


class ReconnectsAfterFatalClose(Monitor):
    """NSQC-ERR-004 (SHOULD): a consumer whose connection the broker closed on a fatal error connects again and
    subscribes to the same topic and channel within 20 s. Judged where the traffic goes on that long, with the times
    the wire's; the traffic is one client's (the client suite's), or the new subscription may be another client's."""

    ITEMS = ("NSQC-ERR-004",)

    def __init__(self):
        super().__init__()
        self._closed: list = []  # (due, connection) of consumers closed on a fatal error, by due

    def closed(self, judge, connection):
        if connection.closed_by == BROKER and connection.fatal_error is not None and connection.subscription \
                and judge.timing:
            due = connection.closed_at + RECONNECT_WITHIN_S
            self._closed.append((due, connection))
            self.due = min(self.due, due)
            judge.want_tick(due)

    def tick(self, judge, now):
        waiting = []
        for due, closed in self._closed:
            if due > now:
                waiting.append((due, closed))
            elif not any(other.subscription == closed.subscription and other.subscribed_at is not None
                         and closed.closed_at < other.subscribed_at <= due for other in judge.connections.values()):
                self.report("NSQC-ERR-004", CLIENT, due, closed.name, "a new connection subscribed to "
                            f"{closed.subscription[0]} {closed.subscription[1]} within {RECONNECT_WITHIN_S:g} s of "
                            "the fatal close", "none", closed.fatal_error)
        self._closed = waiting
        self.due = min((due for due, _ in waiting), default=float("inf"))
        judge.want_tick(self.due)


class ReconnectsSpaced(Monitor):
    """NSQC-ERR-005 (SHOULD): while an nsqd closes every new connection at once, the client's reconnects are spaced:
    at most 16 such connections in 8 s. The traffic is taken as one client's (the client suite's); a real nsqd that
    is down refuses at the TCP level, which leaves no connection to count."""

    ITEMS = ("NSQC-ERR-005",)

    def __init__(self):
        super().__init__()
        self._refused: deque = deque()  # the times of the connections the broker closed at once
        self._reported = False

    def closed(self, judge, connection):
        if connection.closed_by != BROKER or connection.last_command_at is not None or self._reported \
                or connection.closed_at - connection.opened_at > REFUSED_WITHIN_S:
            return
        if not judge.timing:
            self.skip("NSQC-ERR-005", "the times are when the client read the frames, not when they arrived")
            return
        refused = self._refused
        refused.append(connection.closed_at)
        while refused[0] < connection.closed_at - RECONNECTS_WATCHED_S:
            refused.popleft()
        if len(refused) > MAX_RECONNECTS:
            self._reported = True
            self.report("NSQC-ERR-005", CLIENT, connection.closed_at, connection.name,
                        f"at most {MAX_RECONNECTS} connections in {RECONNECTS_WATCHED_S:g} s to an nsqd that closes "
                        "them at once", f"{len(refused)} within {connection.closed_at - refused[0]:.2f} s")


class ReconnectsNotEarly(Monitor):
    """NSQC-ERR-006 (SHOULD): a consumer connects to an nsqd address again no sooner than the reconnect delay its
    library documents (the application's ``reconnect_min_ms``): after its last connection to that address closed, or,
    for a library that tries on a ticker (``reconnect_since`` "connect"), after its last attempt. Judged at the end
    of the traffic, over the connections to each address the client dialed, with the times the wire's; not judged
    where the application does not say the delay (not documented, or the consumer finds its nsqds on lookupds)."""

    ITEMS = ("NSQC-ERR-006",)
    KINDS = frozenset()  # the connections' opening and closing times are all it reads

    def finish(self, judge, now):
        application = judge.application
        if application is None or application.reconnect_min_ms is None:
            return
        if not judge.timing:
            self.skip("NSQC-ERR-006", "the times are when the client read the frames, not when they arrived")
            return
        least = application.reconnect_min_ms / 1000
        by_server: dict[str, list] = {}
        for connection in judge.connections.values():
            if connection.server is not None and connection.opened_at is not None:
                by_server.setdefault(connection.server, []).append(connection)
        for connections in by_server.values():
            connections.sort(key=lambda connection: connection.opened_at)
            for earlier, later in zip(connections, connections[1:], strict=False):
                self._judge(application.reconnect_since, least, earlier, later)

    def _judge(self, since, least, earlier, later):
        if since == "connect":
            start, what = earlier.opened_at, "the last attempt to connect"
        elif earlier.closed_at is not None and earlier.closed_at <= later.opened_at:
            start, what = earlier.closed_at, "the last connection's close"
        else:
            return  # two at once: not a reconnect
        if later.opened_at - start < least * EARLY_SHARE:
            self.report("NSQC-ERR-006", CLIENT, later.opened_at, later.name,
                        f"a reconnect to {later.server} at least {least:g} s after {what} (the library's delay)",
                        f"{later.opened_at - start:.2f} s after it")
