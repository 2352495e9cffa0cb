"""Each message settled as its handler asked (application.py's orders): finished (NSQC-MSG-001), requeued with the
delay asked (NSQC-MSG-002), touched as often as asked then finished (NSQC-MSG-003), a failed one requeued
(NSQC-MSG-004) with the delay the library documents (NSQC-MSG-006), one over max_attempts finished (NSQC-MSG-005)."""

from __future__ import annotations

from nsq_protocol.monitors.application import FAIL, FIN, REQ, TOUCH
from nsq_protocol.monitors.events import CLIENT, COMMAND, MESSAGE
from nsq_protocol.monitors.monitor import Monitor

ORDER_ITEMS = {FIN: "NSQC-MSG-001", REQ: "NSQC-MSG-002", TOUCH: "NSQC-MSG-003", FAIL: "NSQC-MSG-004"}
UNKNOWN_MAX_ATTEMPTS = ("a message of attempt 2 or more, and the application left max_attempts to a library whose "
                        "default the judge was not told: whether its handler runs is that default")


class SettlesAsOrdered(Monitor):
    """The first FIN or REQ of a delivered message whose handler's order the application told: FIN for ``fin``
    (NSQC-MSG-001); REQ with the delay asked for ``req`` (NSQC-MSG-002); as many TOUCH as asked before the FIN for
    ``touch`` (NSQC-MSG-003); REQ for ``fail`` (NSQC-MSG-004), its delay the library's documented one for the
    message's attempts (NSQC-MSG-006); and whatever the order, FIN for a message over the application's max_attempts
    (NSQC-MSG-005, P-REQ-02: the handler never sees it). A message of attempt 2 or more is judged only against a
    max_attempts known: the application's, or the library's documented default (0: none). A FIN or REQ of another
    ID is SettlesWhatItHolds'."""

    ITEMS = ("NSQC-MSG-001", "NSQC-MSG-002", "NSQC-MSG-003", "NSQC-MSG-004", "NSQC-MSG-005", "NSQC-MSG-006")
    KINDS = frozenset({COMMAND, MESSAGE})

    def __init__(self):
        super().__init__()
        self._held: dict[tuple[str, str], list] = {}  # (connection, msg_id) -> [the order, the message, touches]

    def observe(self, judge, connection, event, answered):
        if event.kind == MESSAGE:
            application = judge.application
            order = application.orders.get(event.bodies[0]) if application and event.bodies else None
            if order is not None and event.msg_id is not None:
                self._held[connection.name, event.msg_id] = [order, event, 0]
            return
        if event.name not in ("FIN", "REQ", "TOUCH") or event.msg_id is None:
            return
        held = self._held.get((connection.name, event.msg_id))
        if held is None:
            return
        if event.name == "TOUCH":
            held[2] += 1
            return
        del self._held[connection.name, event.msg_id]
        self._judge(judge.application, connection.name, *held, event)

    def _judge(self, application, name, order, message, touches, answer):
        attempts = message.attempts or 1
        handled = application.handled(attempts)
        if handled is False:
            if answer.name != "FIN":
                self.report("NSQC-MSG-005", CLIENT, answer.ts, name,
                            f"FIN of a message of attempt {attempts}, over max_attempts {application.max_attempts}",
                            answer.describe()[2:], message, answer)
            return
        item = ORDER_ITEMS[order.action]
        if handled is None:
            for skipped in (item, "NSQC-MSG-006") if order.action == FAIL else (item,):
                self.skip(skipped, UNKNOWN_MAX_ATTEMPTS)
            return
        expected = REQ if order.action in (REQ, FAIL) else FIN
        if answer.name != expected.upper():
            self.report(item, CLIENT, answer.ts, name, f"{expected.upper()} of a message its handler says "
                        f"{order.action} to", answer.describe()[2:], message, answer)
        elif order.action == REQ and answer.number != order.delay_ms:
            self.report(item, CLIENT, answer.ts, name, f"REQ with the delay asked, {order.delay_ms} ms",
                        answer.describe()[2:], message, answer)
        elif order.action == TOUCH and touches != order.touches:
            self.report(item, CLIENT, answer.ts, name, f"{order.touches} TOUCH before the FIN",
                        f"{touches} TOUCH", message, answer)
        elif order.action == FAIL:
            self._judge_delay(application, name, attempts, message, answer)

    def _judge_delay(self, application, name, attempts, message, answer):
        if application.requeue_delay_ms is None:
            self.skip("NSQC-MSG-006", "the library's documented requeue delay is not known to the judge")
            return
        documented = application.requeue_delay_ms(attempts)
        if answer.number != documented:
            self.report("NSQC-MSG-006", CLIENT, answer.ts, name,
                        f"REQ with the library's documented delay for attempt {attempts}, {documented} ms",
                        answer.describe()[2:], message, answer)

    def closed(self, judge, connection):
        for key in [key for key in self._held if key[0] == connection.name]:
            del self._held[key]
