"""The client's commands as nsqd parses them (C-21, P-RDY-03, P-RDY-04, P-FIN-02, P-FIN-03, P-REQ-02, P-REQ-03,
P-REQ-04, P-TOUCH-02, NSQC-PUB-002), the states it sends them in (P-RDY-02, P-SUB-01, NSQC-PUB-001) and AUTH where
nsqd asks for it (NSQC-NEG-006): what nsqd refuses, with a fatal error, is the client's to avoid."""

from __future__ import annotations

from nsq_protocol.monitors.events import CLIENT, COMMAND, RESPONSE
from nsq_protocol.monitors.monitor import Monitor

VERBS = frozenset({"IDENTIFY", "AUTH", "SUB", "RDY", "FIN", "REQ", "TOUCH", "PUB", "MPUB", "DPUB", "NOP", "CLS"})
ID_BYTES = 16  # P-FIN-03, P-REQ-03, P-TOUCH-02
# the item of a FIN, REQ or TOUCH without an ID, and of one whose ID is not 16 bytes
_ID_ITEMS = {"FIN": ("P-FIN-02", "P-FIN-03"), "REQ": ("P-REQ-02", "P-REQ-03"), "TOUCH": ("P-TOUCH-02", "P-TOUCH-02")}
PERMISSIONED = frozenset({"SUB", "PUB", "MPUB", "DPUB"})  # P-AUTH-09
AUTH_WITHIN_S = 4.0  # a library authenticates as soon as the answer asks (go-nsq, pynsq: in the handshake)


class ClientCommandsParse(Monitor):
    """Each command is one nsqd knows (C-21) with the parameters it parses: RDY's count a decimal (P-RDY-03) up to
    the negotiated max_rdy_count (P-RDY-04); FIN, REQ and TOUCH a 16-byte ID (P-FIN-02, P-FIN-03, P-REQ-03,
    P-TOUCH-02); REQ a delay (P-REQ-02) in decimal ms (P-REQ-04); MPUB a body its count and sizes read
    (NSQC-PUB-002)."""

    ITEMS = ("C-21", "P-RDY-03", "P-RDY-04", "P-FIN-02", "P-FIN-03", "P-REQ-02", "P-REQ-03", "P-REQ-04",
             "P-TOUCH-02", "NSQC-PUB-002")

    def observe(self, judge, connection, event, answered):
        if event.kind != COMMAND:
            return
        verb = event.name
        if verb not in VERBS:
            self.report("C-21", CLIENT, event.ts, connection.name, "a command nsqd knows",
                        f"{verb[:40]!r}", event)
        elif verb == "RDY":
            self._rdy(connection, event)
        elif verb in _ID_ITEMS:
            self._settlement(connection, event)
        elif verb == "MPUB" and event.number is None:
            self.report("NSQC-PUB-002", CLIENT, event.ts, connection.name,
                        "an MPUB body its message count and sizes read", "one they do not", event)

    def _rdy(self, connection, event):
        if event.number is None:
            self.report("P-RDY-03", CLIENT, event.ts, connection.name, "RDY with a decimal count",
                        f"RDY {event.text[:40]!r}", event)
            return
        limit = (connection.identify_answer or {}).get("max_rdy_count")
        if not isinstance(limit, int):
            self.skip("P-RDY-04", "max_rdy_count is the broker's flag: no IDENTIFY answer in the traffic says it")
        elif event.number > limit:
            self.report("P-RDY-04", CLIENT, event.ts, connection.name, f"RDY up to max_rdy_count {limit}",
                        f"RDY {event.number}", event)

    def _settlement(self, connection, event):
        missing_item, length_item = _ID_ITEMS[event.name]
        if event.msg_id is None:
            self.report(missing_item, CLIENT, event.ts, connection.name, f"{event.name} with a message ID",
                        f"{event.name} without one", event)
        elif len(event.msg_id.encode("utf-8", "surrogateescape")) != ID_BYTES:
            self.report(length_item, CLIENT, event.ts, connection.name, f"a {ID_BYTES}-byte message ID",
                        f"{event.name} {event.msg_id[:40]!r}", event)
        elif event.name == "REQ" and event.number is None:
            item, what = ("P-REQ-04", f"delay {event.text[:40]!r}") if event.text else ("P-REQ-02", "no delay")
            self.report(item, CLIENT, event.ts, connection.name, "REQ <id> <delay in decimal ms>", what, event)


class ClientCommandsInOrder(Monitor):
    """Commands in the states nsqd takes them in: RDY only once subscribed (P-RDY-02), one SUB per connection and none
    after CLS (P-SUB-01), a PUB after IDENTIFY (NSQC-PUB-001). Judged from the connection's start."""

    ITEMS = ("P-RDY-02", "P-SUB-01", "NSQC-PUB-001")

    def __init__(self):
        super().__init__()
        self._seen: dict[str, set] = {}  # connection -> the verbs it sent so far

    def observe(self, judge, connection, event, answered):
        if event.kind != COMMAND:
            return
        if not connection.started:
            self.skip("P-SUB-01", "the connection's start is not in the traffic")
            return
        seen = self._seen.setdefault(connection.name, set())
        verb = event.name
        if verb == "RDY" and "SUB" not in seen:
            self.report("P-RDY-02", CLIENT, event.ts, connection.name, "RDY after SUB", "RDY before any SUB", event)
        elif verb == "SUB" and ("SUB" in seen or "CLS" in seen):
            self.report("P-SUB-01", CLIENT, event.ts, connection.name, "one SUB, before CLS",
                        "a second SUB" if "SUB" in seen else "SUB after CLS", event)
        elif verb == "PUB" and "IDENTIFY" not in seen:
            self.report("NSQC-PUB-001", CLIENT, event.ts, connection.name, "PUB after IDENTIFY",
                        "PUB without an IDENTIFY", event)
        seen.add(verb)


class AuthenticatesWhenAsked(Monitor):
    """NSQC-NEG-006 (P-AUTH-09): where the IDENTIFY answer says auth_required, the client sends AUTH at once (within
    4 s) and sends SUB or a publish only once AUTH is answered. Waiting is judged where the times are the wire's."""

    ITEMS = ("NSQC-NEG-006",)

    def __init__(self):
        super().__init__()
        self._asked: dict[str, object] = {}  # connection -> the answer asking for AUTH, until an AUTH is sent
        self._authorized: set[str] = set()

    def observe(self, judge, connection, event, answered):
        name = connection.name
        if answered is not None and answered.name == "IDENTIFY" and event.kind == RESPONSE \
                and (event.fields or {}).get("auth_required") is True and judge.timing:
            self._asked[name] = event
            self.due = min(self.due, event.ts + AUTH_WITHIN_S)
            judge.want_tick(event.ts + AUTH_WITHIN_S)
        elif answered is not None and answered.name == "AUTH" and event.kind == RESPONSE:
            self._authorized.add(name)
        elif event.kind == COMMAND and event.name == "AUTH":
            self._asked.pop(name, None)
        elif event.kind == COMMAND and event.name in PERMISSIONED and name not in self._authorized \
                and (connection.identify_answer or {}).get("auth_required") is True:
            self._asked.pop(name, None)
            self.report("NSQC-NEG-006", CLIENT, event.ts, name, "AUTH answered before SUB or a publish "
                        "(auth_required)", f"{event.name} without it", event)

    def tick(self, judge, now):
        for name, answer in list(self._asked.items()):
            if answer.ts + AUTH_WITHIN_S <= now:
                del self._asked[name]
                if judge.connections[name].open:
                    self.report("NSQC-NEG-006", CLIENT, answer.ts + AUTH_WITHIN_S, name,
                                f"AUTH within {AUTH_WITHIN_S:g} s of an answer saying auth_required", "none", answer)
        self.due = min((answer.ts + AUTH_WITHIN_S for answer in self._asked.values()), default=float("inf"))
        judge.want_tick(self.due)

    def closed(self, judge, connection):
        self._asked.pop(connection.name, None)
