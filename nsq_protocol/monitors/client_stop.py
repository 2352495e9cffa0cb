"""The client's stop: CLS, then the close once CLOSE_WAIT came (NSQC-CLS-001)."""

from __future__ import annotations

from nsq_protocol.monitors.events import CLIENT, COMMAND, RESPONSE
from nsq_protocol.monitors.monitor import Monitor


class ClsBeforeClose(Monitor):
    """NSQC-CLS-001 (SHOULD): a consumer closes its connection only after CLS and its CLOSE_WAIT (P-CLS-02), so that
    nsqd sends nothing more while it settles what it holds. Judged on a subscribed connection the client closed,
    from its start; one the broker ended on a fatal error is not the client's stop."""

    ITEMS = ("NSQC-CLS-001",)

    def __init__(self):
        super().__init__()
        self._cls: dict[str, bool] = {}  # connection -> whether its CLS was answered CLOSE_WAIT

    def observe(self, judge, connection, event, answered):
        if event.kind == COMMAND and event.name == "CLS":
            self._cls.setdefault(connection.name, False)
        elif answered is not None and answered.name == "CLS" and event.kind == RESPONSE:
            self._cls[connection.name] = True

    def closed(self, judge, connection):
        if connection.closed_by != CLIENT or connection.subscription is None or connection.fatal_error is not None:
            return
        if not connection.started:
            self.skip("NSQC-CLS-001", "the connection's start is not in the traffic")
            return
        answered = self._cls.get(connection.name)
        if not answered:
            self.report("NSQC-CLS-001", CLIENT, connection.closed_at, connection.name,
                        "CLS, CLOSE_WAIT, then the close", "closed before CLOSE_WAIT" if answered is False
                        else "closed without CLS")
