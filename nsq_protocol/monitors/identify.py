"""The IDENTIFY answer: JSON exactly when feature negotiation is asked for (ID-09), with every field (ID-20), the
deflate level nsqd picks (ID-11), and each upgrade's OK through its new layer right after it (ID-30)."""

from __future__ import annotations

from heapq import heappop, heappush

from nsq_protocol.monitors.connection import IDENTIFY_ANSWER_FIELDS, TAIL_LOST, UPGRADES
from nsq_protocol.monitors.events import BROKER, ERROR, JSON, OUTSIDE_TLS, RESPONSE
from nsq_protocol.monitors.monitor import Monitor
from nsq_protocol.monitors.release import UNKNOWN, V1_1, before

DEFAULT_DEFLATE_LEVEL = 6
UPGRADE_OK_S = 1.0  # nsqd writes the OK of a compression layer right after the JSON; the capture's slack


class IdentifyAnswer(Monitor):
    """ID-09: the answer to IDENTIFY is JSON when feature_negotiation is true, OK otherwise (ID-10: whatever upgrades
    it asks for); ID-20: the JSON has every field of the server's limits and the client's settings, and no upgrade
    the IDENTIFY did not ask for (T-05: tls_v1 false when not asked, whatever the TLS policy); ID-11: its
    deflate_level is the one asked when deflate is on and the level positive, 6 otherwise, capped at its
    max_deflate_level (ID-44, before 1.1.0: 6 only when deflate is on without a positive level, else 0). An upgrade
    the broker makes after answering false or OK leaves its later frames unreadable plain: the stream decoder says
    so, not this monitor."""

    ITEMS = ("ID-09", "ID-10", "ID-11", "ID-20", "ID-44", "T-05")
    KINDS = frozenset({RESPONSE})

    def observe(self, judge, connection, event, answered):
        if answered is None or answered.name != "IDENTIFY" or event.kind != RESPONSE:
            return
        asked = {key.lower(): value for key, value in (answered.fields or {}).items()}  # ID-14: any case
        negotiated = asked.get("feature_negotiation") is True
        if negotiated and event.name != JSON:
            self.report("ID-09", BROKER, event.ts, connection.name, "a JSON answer to feature_negotiation true",
                        f"{event.name[:40]!r}", answered, event)
        elif not negotiated and event.name == JSON:
            # ID-10: asking for an upgrade without feature negotiation asks for nothing
            upgrades = any(asked.get(name) is True for name in UPGRADES)
            self.report("ID-10" if upgrades else "ID-09", BROKER, event.ts, connection.name,
                        "OK without feature_negotiation", "a JSON answer", answered, event)
        elif event.name == JSON and event.fields is None:
            self.skip("ID-20", "the JSON answer is not all in the traffic")
        elif event.name == JSON:
            missing = [name for name in IDENTIFY_ANSWER_FIELDS if name not in event.fields]
            if missing:
                self.report("ID-20", BROKER, event.ts, connection.name, "every field of the negotiated answer",
                            f"{', '.join(missing)} missing", answered, event)
            for name in UPGRADES:  # T-05, ID-20: an upgrade only where the IDENTIFY asked for it
                if event.fields.get(name) is True and asked.get(name) is not True:
                    self.report("T-05" if name == "tls_v1" else "ID-20", BROKER, event.ts, connection.name,
                                f"{name} false, not asked for", f"{name} true", answered, event)
            self._deflate_level(judge, connection, answered, event, asked)

    def _deflate_level(self, judge, connection, answered, event, asked):
        older = before(judge.release, V1_1)
        item = "ID-44" if older else "ID-11"
        if older is None:
            self.skip("ID-11", UNKNOWN)
            return
        level = _deflate_level(asked, event.fields, older)
        if level is not None and event.fields.get("deflate_level") != level:
            self.report(item, BROKER, event.ts, connection.name, f"deflate_level {level}",
                        f"deflate_level {event.fields.get('deflate_level')}", answered, event)


def _deflate_level(asked: dict, answer: dict, older: bool) -> int | None:
    """The level nsqd answers with, where the answer shows whether deflate is on and the cap; None when the
    IDENTIFY's level is not one nsqd reads (the JSON would not have decoded). ID-11: the positive level asked when
    deflate is on, 6 otherwise; ID-44 (``older``, before 1.1.0): 6 only with deflate on and no positive level asked,
    0 otherwise; either capped at max_deflate_level."""
    deflate, cap, level = answer.get("deflate"), answer.get("max_deflate_level"), asked.get("deflate_level", 0)
    if not isinstance(deflate, bool) or not _integer(cap) or not _integer(level):
        return None
    if older:
        return min(DEFAULT_DEFLATE_LEVEL if deflate and level <= 0 else 0, cap)
    return min(level if deflate and level > 0 else DEFAULT_DEFLATE_LEVEL, cap)


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class UpgradeOks(Monitor):
    """ID-30: after a JSON answer that switches on snappy or deflate (without TLS, whose OK waits for the client's
    handshake), the OK through the new layer follows at once. Judged where the times are the wire's, once the
    traffic went on a second past the answer without it (the judge ticks before it closes a connection)."""

    ITEMS = ("ID-30",)
    KINDS = frozenset({RESPONSE, ERROR})

    def __init__(self):
        super().__init__()
        self._waiting: list = []  # heap of (due, sequence, connection, the JSON answer)
        self._sequence = 0

    def observe(self, judge, connection, event, answered):
        if event.text == OUTSIDE_TLS and event.kind in (RESPONSE, ERROR):
            self.report("ID-30", BROKER, event.ts, connection.name, "the TLS handshake after the answer, and the "
                        "upgrade's OK through TLS", f"{event.name[:40]!r} in plaintext before it", event)
            return
        if not judge.timing or answered is None or answered.name != "IDENTIFY" or event.name != JSON \
                or not event.fields or event.fields.get("tls_v1") is not False \
                or not (event.fields.get("snappy") is True or event.fields.get("deflate") is True):
            return
        self._sequence += 1
        heappush(self._waiting, (event.ts + UPGRADE_OK_S, self._sequence, connection.name, event))
        self.due = self._waiting[0][0]
        judge.want_tick(self.due)

    def tick(self, judge, now):
        while self._waiting and self._waiting[0][0] <= now:
            _, _, name, answer = heappop(self._waiting)
            connection = judge.connections[name]
            if connection.open and connection.upgrades_pending:  # the judge ticks
                if connection.unseen_at(now):
                    self.skip("ID-30", TAIL_LOST)
                    continue
                self.report("ID-30", BROKER, now, name, "the upgrade's OK right after the JSON answer",
                            f"none {now - answer.ts:.1f} s later", answer)
        self.due = self._waiting[0][0] if self._waiting else float("inf")
        judge.want_tick(self.due)


class FeaturesKept(Monitor):
    """ID-21: a feature asked for is answered false only where the broker lacks it (--snappy=false, --deflate=false, no
    certificate: flags the traffic does not carry). An answer that showed the broker has it (true, or snappy and
    deflate refused together, which needs both) holds for every connection open then (a restart, with other flags
    perhaps, would have ended them): a later answer false there to a request nsqd grants breaks it. Judged on a
    connection's first IDENTIFY (a second one asking for TLS inside TLS is undefined, ID-41)."""

    ITEMS = ("ID-21",)
    KINDS = frozenset({RESPONSE, ERROR})

    def __init__(self):
        super().__init__()
        self._offered: dict[str, float] = {}  # feature -> the latest time the broker showed it has it

    def observe(self, judge, connection, event, answered):
        if answered is None or answered.name != "IDENTIFY":
            return
        asked = {key.lower(): value for key, value in (answered.fields or {}).items()}
        if event.kind == ERROR and event.name == "E_IDENTIFY_FAILED" and event.text.startswith("cannot enable both"):
            self._offered.update(snappy=event.ts, deflate=event.ts)
        if event.name != JSON or not event.fields or asked.get("feature_negotiation") is not True:
            return
        both = asked.get("snappy") is True and asked.get("deflate") is True  # one of them answered false: ID-12's
        for name in UPGRADES:
            if event.fields.get(name) is True:
                self._offered[name] = event.ts
            elif event.fields.get(name) is not False or asked.get(name) is not True or both and name != "tls_v1" \
                    or connection.identify_answer is not event.fields:
                continue
            elif name in self._offered and connection.lived_through(self._offered[name]):
                self.report("ID-21", BROKER, event.ts, connection.name,
                            f"{name} true, as the broker answered at {self._offered[name]:.3f}", f"{name} false",
                            answered, event)
            else:
                self.skip("ID-21", f"whether the broker has {name} (its flags) is not in the traffic while the "
                          "connection was open")
