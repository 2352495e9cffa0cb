"""What the broker showed of its limits (LIM-01): the IDENTIFY answer's max_rdy_count, max_msg_timeout and
max_deflate_level, /info's maxima, any GET /config/<option> answer, and the refusals that quote a limit (RDY's and
DPUB's range, a body or message too big). nsqd reads its flags once, at start (PUT /config changes only
nsqlookupd_tcp_addresses and log_level): two values of one limit shown while a connection stayed open, so without a
restart between, break LIM-01. A value holds for the connections open when it was shown (``value``)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from nsq_protocol.monitors.events import BROKER, ERROR, JSON, RESPONSE
from nsq_protocol.monitors.monitor import Monitor

MS = 1_000_000  # durations are kept in nanoseconds, as /config shows them
# the IDENTIFY answer's limits: field -> (option, its unit in ns or 1)
IDENTIFY_LIMITS = {"max_rdy_count": ("max_rdy_count", 1), "max_msg_timeout": ("max_msg_timeout", MS),
                   "max_deflate_level": ("max_deflate_level", 1)}
INFO_LIMITS = ("max_heartbeat_interval", "max_output_buffer_size", "max_output_buffer_timeout", "max_deflate_level")
CHANGEABLE = frozenset({"nsqlookupd_tcp_addresses", "log_level"})  # PUT /config sets them (nsqd/http.go doConfig)
# the refusals that quote a limit (nsqd/protocol_v2.go): pattern of the description -> (option, unit)
QUOTED = ((re.compile(r"RDY count -?[0-9]+ out of range 0-([0-9]+)\Z"), "max_rdy_count", 1),
          (re.compile(r"DPUB timeout -?[0-9]+ out of range 0-([0-9]+)\Z"), "max_req_timeout", MS),
          (re.compile(r"REQ timeout -?[0-9]+ out of range 0-([0-9]+)\Z"), "max_req_timeout", 1),  # P-REQ-08, in ns
          (re.compile(r"(?:PUB|DPUB|MPUB) message too big [0-9]+ > ([0-9]+)\Z"), "max_msg_size", 1),
          (re.compile(r"(?:IDENTIFY|AUTH|MPUB) body too big [0-9]+ > ([0-9]+)\Z"), "max_body_size", 1))
QUOTING_CODES = frozenset({"E_INVALID", "E_BAD_MESSAGE", "E_BAD_BODY"})


@dataclass(frozen=True)
class Shown:
    option: str
    value: object
    ts: float
    where: str  # what showed it, for a violation's evidence


@dataclass(frozen=True)
class Conflict:
    before: Shown
    after: Shown
    connection: str  # a connection open through both: no restart between


class Limits:
    """The limits the judge's traffic showed, the latest value of each; ``conflicts``: where two differ."""

    def __init__(self):
        self._latest: dict[str, Shown] = {}
        self.conflicts: list[Conflict] = []

    @property
    def shown(self) -> bool:
        return bool(self._latest)

    def latest(self, option: str) -> object | None:
        """``option``'s value as last shown, whatever the connections (a restart may have changed it since)."""
        shown = self._latest.get(option)
        return shown.value if shown is not None else None

    def value(self, option: str, connection) -> object | None:
        """``option``'s value for ``connection``: one shown while it was open (the same process), else None."""
        shown = self._latest.get(option)
        return shown.value if shown is not None and connection.opened_at is not None and \
            shown.ts >= connection.opened_at else None

    def frame(self, judge, connection, event, answered) -> None:
        """An answer or error frame: the IDENTIFY answer's limits, or a refusal quoting one."""
        if event.kind == ERROR and event.name in QUOTING_CODES:
            for pattern, option, unit in QUOTED:
                match = pattern.match(event.text)
                if match:
                    self._show(judge, Shown(option, int(match.group(1)) * unit, event.ts,
                                            f"{connection.name}: {event.name} {event.text[:80]}"))
                    return
        elif event.kind == RESPONSE and event.name == JSON and event.fields and answered is not None and \
                answered.name == "IDENTIFY":
            for field, (option, unit) in IDENTIFY_LIMITS.items():
                value = event.fields.get(field)
                if _integer(value):
                    self._show(judge, Shown(option, value * unit, event.ts,
                                            f"{connection.name}: IDENTIFY answer {field} {value}"))

    def http(self, judge, exchange) -> None:
        """GET /config/<option> (any option, its value as JSON) and /info's maxima."""
        request, response = exchange.request, exchange.response
        if request.method != "GET" or response.status != 200 or not response.whole:
            return
        path = request.path
        if path.startswith("/config/") and path[len("/config/"):] not in CHANGEABLE:
            document = _json(response.body)
            if document is not None:
                option = path[len("/config/"):]
                self._show(judge, Shown(option, document, exchange.ts, f"GET {path}: {response.body[:60]!r}"))
        elif path == "/info":
            document = _json(response.body)
            for option in INFO_LIMITS if isinstance(document, dict) else ():
                if _integer(document.get(option)):
                    self._show(judge, Shown(option, document[option], exchange.ts,
                                            f"GET /info: {option} {document[option]}"))

    def _show(self, judge, shown: Shown) -> None:
        before = self._latest.get(shown.option)
        self._latest[shown.option] = shown
        if before is None or before.value == shown.value:
            return
        through = next((connection for connection in judge.connections.values()
                        if connection.lived_through(before.ts)), None)
        if through is not None:
            self.conflicts.append(Conflict(before, shown, through.name))


class LimitsHeld(Monitor):
    """LIM-01: nsqd's limits are its flags, read once: every value it shows of one limit (IDENTIFY answers, /info,
    /config, the refusals quoting it) is the same while a connection stays open through them. Which values it has
    is the broker's choice (the defaults are the flags'); the limits the traffic does not show are not judged."""

    ITEMS = ("LIM-01",)
    KINDS = frozenset({RESPONSE, ERROR})

    def __init__(self):
        super().__init__()
        self._reported = 0

    def observe(self, judge, connection, event, answered):
        self._conflicts(judge)

    def http_exchange(self, judge, exchange):
        self._conflicts(judge)

    def _conflicts(self, judge):
        conflicts = judge.limits.conflicts
        for conflict in conflicts[self._reported:]:
            before, after = conflict.before, conflict.after
            self.report("LIM-01", BROKER, after.ts, conflict.connection,
                        f"{after.option} {before.value!r} as shown before ({before.where}), with no restart between",
                        f"{after.option} {after.value!r} ({after.where})")
        self._reported = len(conflicts)

    def finish(self, judge, now):
        if not judge.limits.shown:
            self.skip("LIM-01", "no limit of the broker is shown in the traffic")


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _json(body: bytes):
    try:
        return json.loads(body)
    except ValueError:
        return None
