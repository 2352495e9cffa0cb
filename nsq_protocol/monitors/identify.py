"""The IDENTIFY answer: JSON exactly when feature negotiation is asked for (ID-09), with every field (ID-20)."""

from __future__ import annotations

from nsq_protocol.monitors.connection import IDENTIFY_ANSWER_FIELDS
from nsq_protocol.monitors.events import BROKER, JSON, RESPONSE
from nsq_protocol.monitors.monitor import Monitor


class IdentifyAnswer(Monitor):
    """ID-09: the answer to IDENTIFY is JSON when feature_negotiation is true, OK otherwise; ID-20: the JSON has
    every field of the server's limits and the client's settings."""

    ITEMS = ("ID-09", "ID-20")

    def observe(self, judge, connection, event, answered):
        if answered is None or answered.name != "IDENTIFY" or event.kind != RESPONSE:
            return
        asked = {key.lower(): value for key, value in (answered.fields or {}).items()}  # ID-14: any case
        negotiated = asked.get("feature_negotiation") is True
        if negotiated and event.name != JSON:
            self.report("ID-09", BROKER, event.ts, connection.name, "a JSON answer to feature_negotiation true",
                        f"{event.name[:40]!r}", answered, event)
        elif not negotiated and event.name == JSON:
            self.report("ID-09", BROKER, event.ts, connection.name, "OK without feature_negotiation",
                        "a JSON answer", answered, event)
        elif event.name == JSON and event.fields is None:
            self.skip("ID-20", "the JSON answer is not all in the traffic")
        elif event.name == JSON:
            missing = [name for name in IDENTIFY_ANSWER_FIELDS if name not in event.fields]
            if missing:
                self.report("ID-20", BROKER, event.ts, connection.name, "every field of the negotiated answer",
                            f"{', '.join(missing)} missing", answered, event)
