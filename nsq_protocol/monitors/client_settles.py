"""The client settles what it holds: FIN, REQ and TOUCH name a message delivered on that connection and not
settled since (NSQC-MSG-001, NSQC-MSG-002, NSQC-MSG-003)."""

from __future__ import annotations

from nsq_protocol.monitors.client_commands import ID_BYTES
from nsq_protocol.monitors.events import CLIENT, COMMAND, MESSAGE
from nsq_protocol.monitors.monitor import Monitor

ITEM_OF = {"FIN": "NSQC-MSG-001", "REQ": "NSQC-MSG-002", "TOUCH": "NSQC-MSG-003"}


class SettlesWhatItHolds(Monitor):
    """NSQC-MSG-001, NSQC-MSG-002, NSQC-MSG-003: a FIN, REQ or TOUCH names a message delivered on this connection
    and not yet finished or requeued there (a delivery again makes it the client's again). A message that timed out
    meanwhile is still the client's to settle late (nsqd answers E_FIN_FAILED, P-FIN-04): the rule is about IDs the
    client never held or already let go. Judged from the connection's start."""

    ITEMS = ("NSQC-MSG-001", "NSQC-MSG-002", "NSQC-MSG-003")

    def __init__(self):
        super().__init__()
        self._held: dict[str, dict] = {}  # connection -> msg_id -> None while held, or the command that let it go

    def observe(self, judge, connection, event, answered):
        held = self._held.setdefault(connection.name, {})
        if event.kind == MESSAGE and event.msg_id is not None:
            held[event.msg_id] = None
            return
        if event.kind != COMMAND or event.name not in ITEM_OF or event.msg_id is None \
                or len(event.msg_id.encode("utf-8", "surrogateescape")) != ID_BYTES:
            return  # no ID nsqd reads (P-FIN-02, P-FIN-03: ClientCommandsParse's)
        item = ITEM_OF[event.name]
        if not connection.started:
            self.skip(item, "the connection's start, and so its deliveries, are not all in the traffic")
            return
        if event.msg_id not in held:
            self.report(item, CLIENT, event.ts, connection.name, f"{event.name} of a message delivered here",
                        f"{event.name} {event.msg_id[:40]}, never delivered on this connection", event)
        elif held[event.msg_id] is not None:
            self.report(item, CLIENT, event.ts, connection.name, f"{event.name} of a message still held",
                        f"{event.name} {event.msg_id[:40]} after its {held[event.msg_id]}", event)
        elif event.name != "TOUCH":
            held[event.msg_id] = event.name
