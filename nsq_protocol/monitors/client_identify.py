"""The client's IDENTIFY: before SUB, a JSON object (NSQC-CONN-002), naming the client and asking for feature
negotiation (NSQC-CONN-003), with values nsqd takes (NSQC-CONN-006)."""

from __future__ import annotations

from nsq_protocol.monitors.events import CLIENT, COMMAND, ERROR
from nsq_protocol.monitors.monitor import Monitor

MAX_MSG_TIMEOUT_MS = 900_000  # nsqd's --max-msg-timeout by default (ID-07)
# ID-02, ID-03, ID-04, ID-06, ID-07: what nsqd v1.3.0 takes for each IDENTIFY value with its default flags, in its
# order of validation (ID-08): (field, the values taken, the words of its E_BAD_BODY)
IDENTIFY_BOUNDS = (
    ("heartbeat_interval", lambda n: n in (-1, 0) or 1000 <= n <= 60_000, "heartbeat interval"),  # ID-02
    ("output_buffer_timeout", lambda n: n in (-1, 0) or 25 <= n <= 30_000, "output buffer timeout"),  # ID-03
    ("output_buffer_size", lambda n: n in (-1, 0) or 64 <= n <= 65_536, "output buffer size"),  # ID-04
    ("sample_rate", lambda n: 0 <= n <= 99, "sample rate"),  # ID-06
    ("msg_timeout", lambda n: n == 0 or 1000 <= n <= MAX_MSG_TIMEOUT_MS, "msg timeout"),  # ID-07
)
NAMES = ("client_id", "hostname", "user_agent")  # ID-01


def identify_refusal(fields: dict) -> str | None:
    """The E_BAD_BODY text nsqd v1.3.0 refuses this IDENTIFY body with, or None when it takes it (ID-02, ID-03,
    ID-04, ID-06, ID-07, ID-08; a value of the wrong JSON type, 1000.0 too, fails Go's decode into an int already,
    while null leaves the field as it was: P-ID-03)."""
    for key, takes, words in IDENTIFY_BOUNDS:
        value = 0 if fields.get(key) is None else fields[key]
        if isinstance(value, bool) or not isinstance(value, int):
            return "IDENTIFY failed to decode JSON body"
        if not takes(value):
            return f"IDENTIFY {words} ({value}) is invalid"
    return None


class ClientIdentifies(Monitor):
    """NSQC-CONN-002: IDENTIFY, with a JSON object body, comes before SUB; NSQC-CONN-003 (SHOULD): it names the
    client (client_id, hostname, user_agent) and asks for feature negotiation; NSQC-CONN-006: its values are within
    the bounds nsqd takes. A value out of bounds is judged where the broker refused the IDENTIFY: a broker that took
    it runs with wider flags than nsqd's defaults (or broke ID-02, ID-03, ID-04, ID-06 or ID-07 itself)."""

    ITEMS = ("NSQC-CONN-002", "NSQC-CONN-003", "NSQC-CONN-006")

    def __init__(self):
        super().__init__()
        self._identified: set[str] = set()  # connections that sent IDENTIFY

    def observe(self, judge, connection, event, answered):
        if event.kind == COMMAND and event.name == "IDENTIFY":
            self._identified.add(connection.name)
            self._judge_body(connection, event)
        elif event.kind == COMMAND and event.name == "SUB" and connection.name not in self._identified:
            if connection.started:
                self.report("NSQC-CONN-002", CLIENT, event.ts, connection.name, "IDENTIFY before SUB",
                            "SUB without an IDENTIFY", event)
            else:
                self.skip("NSQC-CONN-002", "the connection's start is not in the traffic")
        elif event.kind == ERROR and answered is not None and answered.name == "IDENTIFY" and answered.fields:
            fields = {key.lower(): value for key, value in answered.fields.items()}  # ID-14
            refusal = identify_refusal(fields)
            if refusal is not None:
                self.report("NSQC-CONN-006", CLIENT, event.ts, connection.name,
                            "IDENTIFY values within the bounds nsqd takes", refusal, answered, event)

    def _judge_body(self, connection, event):
        if event.fields is None:
            self.report("NSQC-CONN-002", CLIENT, event.ts, connection.name, "an IDENTIFY body that is a JSON object",
                        "a body that is not", event)
            return
        fields = {key.lower(): value for key, value in event.fields.items()}
        unnamed = [name for name in NAMES if not (isinstance(fields.get(name), str) and fields[name])]
        if unnamed or fields.get("feature_negotiation") is not True:
            missing = unnamed + ([] if fields.get("feature_negotiation") is True else ["feature_negotiation true"])
            self.report("NSQC-CONN-003", CLIENT, event.ts, connection.name,
                        "IDENTIFY with client_id, hostname, user_agent and feature_negotiation true",
                        f"without {', '.join(missing)}", event)
