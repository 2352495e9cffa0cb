"""Each publish as the application asked for it (application.py): PUB (NSQC-PUB-001), MPUB (NSQC-PUB-002) and DPUB
(NSQC-PUB-003) with the topic, bodies and defer it gave."""

from __future__ import annotations

from nsq_protocol.monitors.application import Publish
from nsq_protocol.monitors.events import CLIENT, COMMAND
from nsq_protocol.monitors.monitor import Monitor

ITEM_OF = {"PUB": "NSQC-PUB-001", "MPUB": "NSQC-PUB-002", "DPUB": "NSQC-PUB-003"}


class PublishesAsTold(Monitor):
    """NSQC-PUB-001, NSQC-PUB-002, NSQC-PUB-003: each PUB, MPUB or DPUB is one the application asked for: its topic,
    every body unchanged (body_hash), DPUB's defer. A publish sent again (a retry) is still one asked for; an MPUB
    whose count and bodies disagree is unreadable, P-MPUB-02's and NSQC-PUB-002's in ClientCommandsParse."""

    ITEMS = ("NSQC-PUB-001", "NSQC-PUB-002", "NSQC-PUB-003")
    KINDS = frozenset({COMMAND})

    def observe(self, judge, connection, event, answered):
        if event.kind != COMMAND or event.name not in ITEM_OF:
            return
        item = ITEM_OF[event.name]
        told = judge.application.publishes if judge.application else None
        if told is None:
            self.skip(item, "the application's publishes are not known to the judge")
        elif not event.bodies:
            self.skip(item, "the command's bodies are not readable")
        elif Publish(event.name, event.topic, event.bodies, event.number if event.name == "DPUB" else None) \
                not in told:
            self.report(item, CLIENT, event.ts, connection.name, "a publish the application asked for "
                        "(its topic, bodies and defer unchanged)", event.describe()[2:], event)
