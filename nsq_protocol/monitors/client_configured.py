"""The client's commands against the settings its application gave it (application.py): IDENTIFY's heartbeat interval
(NSQC-CONN-004) and layers (NSQC-NEG-001, NSQC-NEG-003, NSQC-NEG-004, NSQC-NEG-005), SUB's topic and channel
(NSQC-CONN-005), the first RDY within max_in_flight (NSQC-RDY-001)."""

from __future__ import annotations

from nsq_protocol.monitors.application import LAYERS
from nsq_protocol.monitors.events import CLIENT, COMMAND
from nsq_protocol.monitors.monitor import Monitor

NOT_TOLD = "the application's {} is not known to the judge"
LAYER_ITEMS = {"snappy": "NSQC-NEG-003", "deflate": "NSQC-NEG-004", "tls_v1": "NSQC-NEG-005"}


class IdentifiesAsConfigured(Monitor):
    """NSQC-CONN-004 (SHOULD): IDENTIFY's heartbeat_interval is the one the application configured; NSQC-NEG-003,
    NSQC-NEG-004, NSQC-NEG-005: it asks for snappy, deflate or tls_v1 where the application told it to; NSQC-NEG-001:
    told to ask for no layer, it asks for none (tls_v1, snappy and deflate not true). A layer asked beyond those told
    while told some is no item's."""

    ITEMS = ("NSQC-CONN-004", "NSQC-NEG-001", "NSQC-NEG-003", "NSQC-NEG-004", "NSQC-NEG-005")
    KINDS = frozenset({COMMAND})

    def observe(self, judge, connection, event, answered):
        if event.kind != COMMAND or event.name != "IDENTIFY" or event.fields is None:
            return  # a body that is no JSON object is NSQC-CONN-002's
        fields = {key.lower(): value for key, value in event.fields.items()}  # ID-14
        application = judge.application
        told = application.heartbeat_interval_ms if application else None
        if told is None:
            self.skip("NSQC-CONN-004", NOT_TOLD.format("heartbeat interval"))
        elif fields.get("heartbeat_interval") != told:  # ID-02
            self.report("NSQC-CONN-004", CLIENT, event.ts, connection.name,
                        f"IDENTIFY's heartbeat_interval {told} (as configured)",
                        f"heartbeat_interval {fields.get('heartbeat_interval')!r}", event)
        layers = application.layers if application else None
        if layers is None:
            for item in ("NSQC-NEG-001", *LAYER_ITEMS.values()):
                self.skip(item, NOT_TOLD.format("choice of layers"))
            return
        asked = {layer for layer in LAYERS if fields.get(layer) is True}  # ID-30
        if not layers and asked:
            self.report("NSQC-NEG-001", CLIENT, event.ts, connection.name,
                        "no layer asked for (the application asked for none)",
                        f"IDENTIFY asks for {', '.join(sorted(asked))}", event)
        for layer in sorted(layers - asked):
            self.report(LAYER_ITEMS[layer], CLIENT, event.ts, connection.name,
                        f"IDENTIFY asks for {layer} (the application told it to)", f"{layer} {fields.get(layer)!r}",
                        event)


class SubscribesAsConfigured(Monitor):
    """NSQC-CONN-005: SUB names the topic and channel the application gave its consumer (P-SUB-01)."""

    ITEMS = ("NSQC-CONN-005",)
    KINDS = frozenset({COMMAND})

    def observe(self, judge, connection, event, answered):
        if event.kind != COMMAND or event.name != "SUB":
            return
        application = judge.application
        if application is None or application.channel is None:
            self.skip("NSQC-CONN-005", NOT_TOLD.format("topic and channel"))
        elif (event.topic, event.channel) != (application.topic, application.channel):
            self.report("NSQC-CONN-005", CLIENT, event.ts, connection.name,
                        f"SUB {application.topic} {application.channel} (as configured)",
                        f"SUB {event.topic} {event.channel}", event)


class FirstRdyWithinMaxInFlight(Monitor):
    """NSQC-RDY-001: the first RDY after SUB is at most the application's max_in_flight (P-RDY-02). Its lower bound
    (at least 1) is not judged: a consumer with more connections than max_in_flight starts some at RDY 0."""

    ITEMS = ("NSQC-RDY-001",)
    KINDS = frozenset({COMMAND})

    def __init__(self):
        super().__init__()
        self._awaiting: set[str] = set()  # connections subscribed, their first RDY not yet sent

    def observe(self, judge, connection, event, answered):
        if event.kind != COMMAND:
            return
        if event.name == "SUB":
            self._awaiting.add(connection.name)
        elif event.name == "RDY" and connection.name in self._awaiting:
            self._awaiting.discard(connection.name)
            most = judge.application.max_in_flight if judge.application else None
            if most is None:
                self.skip("NSQC-RDY-001", NOT_TOLD.format("max_in_flight"))
            elif event.number is not None and event.number > most:  # an unreadable count is C-18's
                self.report("NSQC-RDY-001", CLIENT, event.ts, connection.name,
                            f"the first RDY after SUB at most max_in_flight {most}", f"RDY {event.number}", event)
