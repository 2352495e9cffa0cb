"""The values an IDENTIFY asks for, held against nsqd's rules (nsqd/client_v2.go, (*clientV2).Identify, v1.3.0):
each refused with the fatal E_BAD_BODY that names the first bad one in nsqd's order, or accepted and echoed in the
negotiated answer. A limit that is the broker's flag (--max-heartbeat-interval, --max-msg-timeout, ...) and that the
traffic does not show leaves a value above nsqd's floor free to go either way; the floors are nsqd's own, but for
--min-output-buffer-timeout, judged at its default (ID-42)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from nsq_protocol.monitors.events import BROKER, COMMAND, ERROR, FINS, JSON, RESPONSE
from nsq_protocol.monitors.monitor import Monitor
from nsq_protocol.monitors.release import UNKNOWN, V1_2, before

DEFAULT_OUTPUT_BUFFER_SIZE = 16_384  # nsqd's defaultBufferSize, not a flag
MIN_OUTPUT_BUFFER_TIMEOUT_MS = 25  # ID-42: --min-output-buffer-timeout's default, the floor judged
MIN_OUTPUT_BUFFER_SIZE = 64
MIN_INTERVAL_MS = 1_000  # heartbeat_interval's and msg_timeout's floor (ID-02, ID-07)
INT64, INT32 = 1 << 63, 1 << 31
# identifyDataV2's fields and their Go types: a value of another type fails json.Unmarshal (ID-14)
STRINGS = ("client_id", "hostname", "user_agent")
INTS = ("heartbeat_interval", "output_buffer_size", "output_buffer_timeout", "deflate_level", "msg_timeout")
BOOLS = ("feature_negotiation", "tls_v1", "deflate", "snappy")
DECODE_FAILED = "IDENTIFY failed to decode JSON body"
BODY_CHECKS = ("IDENTIFY body too big", "IDENTIFY invalid body size", "IDENTIFY failed to read")  # P-ID-03
_FIELD_ERROR = re.compile(r"IDENTIFY (heartbeat interval|output buffer timeout|output buffer size|sample rate|"
                          r"msg timeout) \(-?[0-9]+\) is invalid\Z")


@dataclass(frozen=True)
class Refusal:
    """One E_BAD_BODY nsqd gives (``certain``) or may give, by a flag the traffic does not show, to an IDENTIFY."""

    item: str
    text: str
    certain: bool


@dataclass(frozen=True)
class Verdict:
    """What nsqd answers to one IDENTIFY's values: the refusals it may give, in its order (the last one certain
    when any is), and, where it may accept, the values its answer echoes (None: the broker's flag decides)."""

    refusals: tuple[Refusal, ...]
    echoes: dict  # answer field -> (value, item)
    negotiated: bool = False  # feature_negotiation asked for the JSON answer (ID-09)

    @property
    def must_refuse(self) -> Refusal | None:
        return self.refusals[-1] if self.refusals and self.refusals[-1].certain else None


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def badly_typed(fields: dict) -> str | None:
    """ID-14: the first known field whose value Go cannot decode into identifyDataV2 (null leaves a field as it
    is); None when every one decodes."""
    for key, value in fields.items():
        if value is None:
            continue
        if key in STRINGS and not isinstance(value, str) or key in BOOLS and not isinstance(value, bool) or \
                key in INTS and not (_integer(value) and -INT64 <= value < INT64) or \
                key == "sample_rate" and not (_integer(value) and -INT32 <= value < INT32):
            return key
    return None


def verdict(fields: dict, current: dict, older: bool = False) -> Verdict:
    """nsqd's answer to an IDENTIFY of ``fields`` (keys lowercased, types decodable) on a connection whose settings
    so far are ``current`` (output_buffer_size, output_buffer_timeout, msg_timeout: those the traffic showed), by
    v1.3.0's rules or (``older``) those before 1.2.0."""
    refusals: list[Refusal] = []
    echoes: dict = {}

    def refuse(item: str, name: str, value: int, certain: bool) -> bool:
        """nsqd refuses ``value`` (``certain``) or may, by a flag: whether its checks stop here."""
        refusals.append(Refusal(item, f"IDENTIFY {name} ({value}) is invalid", certain))
        return certain

    # ID-08: heartbeat, buffer timeout, buffer size, sample rate, msg timeout; the first bad one is the answer
    interval = fields.get("heartbeat_interval") or 0
    if interval not in (-1, 0) and refuse("ID-02", "heartbeat interval", interval, interval < MIN_INTERVAL_MS):
        return Verdict(tuple(refusals), echoes)  # a certain refusal; otherwise above --max-heartbeat-interval
    timeout, size = fields.get("output_buffer_timeout") or 0, fields.get("output_buffer_size") or 0
    # ID-05: the timeout before the size; ID-45: the size first before 1.2.0, which had no floor for the timeout
    floor = 1 if older else MIN_OUTPUT_BUFFER_TIMEOUT_MS
    size_first = older and size not in (-1, 0)
    if size_first and refuse("ID-04", "output buffer size", size, size < MIN_OUTPUT_BUFFER_SIZE):
        return Verdict(tuple(refusals), echoes)
    if timeout not in (-1, 0):
        item = "ID-42" if 1 <= timeout < floor else "ID-03"
        if refuse(item, "output buffer timeout", timeout, timeout < floor):
            return Verdict(tuple(refusals), echoes)
    if size not in (-1, 0) and not size_first and \
            refuse("ID-04", "output buffer size", size, size < MIN_OUTPUT_BUFFER_SIZE):
        return Verdict(tuple(refusals), echoes)
    rate = fields.get("sample_rate") or 0
    if not 0 <= rate <= 99 and refuse("ID-06", "sample rate", rate, True):
        return Verdict(tuple(refusals), echoes)
    msg_timeout = fields.get("msg_timeout") or 0
    if msg_timeout != 0 and refuse("ID-07", "msg timeout", msg_timeout, msg_timeout < MIN_INTERVAL_MS):
        return Verdict(tuple(refusals), echoes)
    # what the negotiated answer then says of this client (SetOutputBuffer, SetSampleRate, SetMsgTimeout)
    echoes["sample_rate"] = (rate, "ID-06")
    if size == -1 and not older:  # ID-43: a one-byte buffer, and no timed flush whatever the timeout asked
        echoes["output_buffer_size"], echoes["output_buffer_timeout"] = (1, "ID-04"), (0, "ID-43")
    else:
        echoes["output_buffer_size"] = ({-1: 1, 0: current.get("output_buffer_size")}.get(size, size), "ID-04")
        echoes["output_buffer_timeout"] = ({-1: 0, 0: current.get("output_buffer_timeout")}.get(timeout, timeout),
                                           "ID-03")
    echoes["msg_timeout"] = (msg_timeout or current.get("msg_timeout"), "ID-07")
    return Verdict(tuple(refusals), echoes)


class IdentifyValues(Monitor):
    """ID-02, ID-03, ID-04, ID-06, ID-07, ID-42: a value outside nsqd's floor refused with the fatal E_BAD_BODY, one
    within echoed by the negotiated answer (ID-43: output_buffer_size -1 answered with timeout 0); ID-05, ID-08: the
    error names the first bad value in nsqd's order (ID-45: before 1.2.0, the size before the timeout); ID-14: keys
    in any case, a value of the wrong type refused.
    Judged from the connection's start, in its initial state, where the IDENTIFY's body is a JSON object."""

    ITEMS = ("ID-02", "ID-03", "ID-04", "ID-05", "ID-06", "ID-07", "ID-08", "ID-14", "ID-42", "ID-43", "ID-45")
    KINDS = frozenset({COMMAND, RESPONSE, ERROR})
    RUNS = frozenset({FINS})

    def __init__(self):
        super().__init__()
        # connection -> [(the IDENTIFY, its fields (keys lowercased), a Verdict where its types are wrong, or None:
        # not judged)]; judged at the answer, which may be what shows the broker's release
        self._asked: dict[str, list] = {}
        self._current: dict[str, dict] = {}  # connection -> the settings its answers showed

    def observe_run(self, judge, connection, run):
        """A FIN is no IDENTIFY."""

    def observe(self, judge, connection, event, answered):
        if event.kind == COMMAND:
            if event.name == "IDENTIFY":
                self._asked.setdefault(connection.name, []).append((event, self._judgeable(connection, event)))
            return
        if answered is None or answered.name != "IDENTIFY":
            return
        asked = self._asked.get(connection.name, [])
        entry = next((entry for entry in asked if entry[0] is answered), None)
        if entry is None:
            return
        asked.remove(entry)
        expected = self._verdict(judge, connection, entry[1]) if isinstance(entry[1], dict) else entry[1]
        if expected is not None:
            self._judge(judge, connection, answered, expected, event)

    def closed(self, judge, connection):
        self._asked.pop(connection.name, None)
        self._current.pop(connection.name, None)

    def _judgeable(self, connection, command):
        """The IDENTIFY's fields, its Verdict where they do not decode, or None where nsqd's answer hangs on what the
        traffic does not show."""
        if not connection.started:
            self.skip("ID-08", "the connection's start (its settings) is not in the traffic")
            return None
        if connection.subscription is not None or connection.fatal_error is not None:
            return None  # P-ID-01's
        if command.fields is None:
            self.skip("ID-14", "the IDENTIFY's body is not a JSON object in the traffic")
            return None
        fields = {key.lower(): value for key, value in command.fields.items()}
        if len(fields) < len(command.fields):  # Go decodes each of the keys that fold together, in order
            self.skip("ID-14", "keys that differ only in case")
            return None
        wrong = badly_typed(fields)
        if wrong is not None:
            return Verdict((Refusal("ID-14", DECODE_FAILED, True),), {})
        return fields

    def _verdict(self, judge, connection, fields):
        current = self._current.setdefault(connection.name, {"output_buffer_size": DEFAULT_OUTPUT_BUFFER_SIZE})
        older = before(judge.release, V1_2)
        expected = verdict(fields, current, bool(older))
        if older is None and expected != verdict(fields, current, True):  # ID-05, ID-42, ID-43 came with 1.2.0
            self.skip("ID-45", UNKNOWN)
            return None
        return replace(expected, negotiated=fields.get("feature_negotiation") is True)

    def _judge(self, judge, connection, command, expected, answer):
        certain = expected.must_refuse
        if answer.kind == ERROR and answer.name == "E_BAD_BODY":
            self._refused(judge, connection, command, expected, answer)
        elif answer.kind == RESPONSE and certain is not None:
            self.report(certain.item, BROKER, answer.ts, connection.name, f"E_BAD_BODY {certain.text}",
                        f"{answer.name[:40]!r}", command, answer)
        elif answer.kind == RESPONSE and answer.name == JSON and answer.fields is not None and \
                expected.negotiated:  # a JSON answer not asked for is ID-09's
            self._echoed(connection, command, expected, answer)
        elif answer.kind == RESPONSE and answer.name == "OK":
            self._current[connection.name] = {name: value for name, (value, _) in expected.echoes.items()
                                              if value is not None}

    def _refused(self, judge, connection, command, expected, answer):
        if answer.text.startswith(BODY_CHECKS):
            return  # P-ID-03's, before the values
        if not expected.refusals:
            named = _FIELD_ERROR.match(answer.text)
            item = {"heartbeat interval": "ID-02", "output buffer timeout": "ID-03", "output buffer size": "ID-04",
                    "sample rate": "ID-06", "msg timeout": "ID-07"}[named.group(1)] if named else "ID-14"
            self.report(item, BROKER, answer.ts, connection.name, "the IDENTIFY's values accepted",
                        f"E_BAD_BODY {answer.text[:80]}", command, answer)
            return
        if not judge.wording or any(refusal.text == answer.text for refusal in expected.refusals):
            return
        # ID-05: the timeout named where both are bad; ID-45 (before 1.2.0): the size
        item = "ID-45" if "output buffer timeout" in answer.text and \
            any(refusal.item == "ID-04" for refusal in expected.refusals) else "ID-05" \
            if "output buffer size" in answer.text and \
            any(refusal.item in ("ID-03", "ID-42") for refusal in expected.refusals) else "ID-08"
        self.report(item, BROKER, answer.ts, connection.name,
                    f"E_BAD_BODY {' or '.join(refusal.text for refusal in expected.refusals)}",
                    f"E_BAD_BODY {answer.text[:80]}", command, answer)

    def _echoed(self, connection, command, expected, answer):
        cased = {key.lower() for key in command.fields if key != key.lower()}
        for name, (value, item) in expected.echoes.items():
            if value is None or name not in answer.fields or answer.fields[name] == value:
                continue  # a field missing is ID-20's
            self.report("ID-14" if name in cased else item, BROKER, answer.ts, connection.name,
                        f"{name} {value}", f"{name} {answer.fields.get(name)!r}", command, answer)
        ceiling, timeout = answer.fields.get("max_msg_timeout"), answer.fields.get("msg_timeout")
        asked = {key.lower(): value for key, value in command.fields.items()}.get("msg_timeout")
        if _integer(ceiling) and _integer(asked) and timeout == asked > ceiling:  # not the default --msg-timeout
            self.report("ID-07", BROKER, answer.ts, connection.name, f"a msg_timeout up to {ceiling}",
                        f"msg_timeout {timeout} accepted", command, answer)
        self._current[connection.name] = {name: answer.fields.get(name) for name in (
            "output_buffer_size", "output_buffer_timeout", "msg_timeout") if _integer(answer.fields.get(name))}
