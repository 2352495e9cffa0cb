"""nsqlookupd's TCP protocol V1 judged per connection (conformance/spec/nsqlookupd.toml, L-TCP-*): the magic, the
replies' framing, the answer each command gets from lookupd's own checks (nsqlookupd/lookup_protocol_v1.go), and
that every error ends the connection."""

from __future__ import annotations

import json

from nsq_protocol.monitors.events import BROKER, ERROR, MAGIC, RESPONSE, UNFRAMED, UNREADABLE, Observed
from nsq_protocol.monitors.expected import valid_name
from nsq_protocol.monitors.lookupd_judge import V1Connection
from nsq_protocol.monitors.monitor import Monitor

NOT_STARTED = "the connection's start is not in the traffic"
UNREADABLE_BEFORE = "the client's bytes before it could not be read as lookupd reads them"
# the IDENTIFY answer: json.Marshal of a map, its keys sorted (L-TCP-05)
IDENTIFY_ANSWER_KEYS = ("broadcast_address", "hostname", "http_port", "tcp_port", "version")
# the IDENTIFY fields lookupd decodes (PeerInfo), by the JSON type Go accepts for each (L-TCP-04, L-TCP-07)
_PEER_STRINGS = ("broadcast_address", "hostname", "version", "topology_region", "topology_zone")
_PEER_PORTS = ("tcp_port", "http_port")


class MagicAnswered(Monitor):
    """L-TCP-01: after '  V1' lookupd sends nothing but answers (no heartbeat). L-TCP-03: any other magic is
    answered E_BAD_PROTOCOL, then lookupd closes."""

    ITEMS = ("L-TCP-01", "L-TCP-03")
    KINDS = frozenset({UNREADABLE, RESPONSE, ERROR})

    def __init__(self) -> None:
        super().__init__()
        self._refused: dict[str, Observed] = {}  # bad magic's connection -> lookupd's answer (or the magic)

    def observe(self, judge, connection: V1Connection, event: Observed, answered: Observed | None) -> None:
        if event.kind == UNREADABLE:
            if event.name == MAGIC:
                self._refused[connection.name] = event
            return
        if connection.magic_ok is False:
            before = self._refused.get(connection.name)
            if before is not None and before.kind == UNREADABLE and event.name == "E_BAD_PROTOCOL":
                self._refused[connection.name] = event
            else:  # L-TCP-03: one reply, E_BAD_PROTOCOL, and nothing more
                self.report("L-TCP-03", BROKER, event.ts, connection.name, "E_BAD_PROTOCOL, then the close",
                            f"{event.describe()} after a magic other than '  V1'", event)
            return
        if answered is None and connection.readable and connection.error is None:
            # L-TCP-01: lookupd speaks only when spoken to (an answer after its error is L-TCP-21's)
            self.report("L-TCP-01", BROKER, event.ts, connection.name, "replies only to commands (no heartbeat)",
                        f"{event.describe()} with no command to answer", event)

    def closed(self, judge, connection: V1Connection) -> None:
        if connection.magic_ok is not False:
            # L-TCP-01's "no close while the client idles": a close by lookupd at its shutdown (L-TCP-22) looks
            # the same in the traffic
            if connection.closed_by == BROKER and connection.error is None and not connection.pending:
                self.skip("L-TCP-01", "lookupd closed an idle connection: its shutdown (L-TCP-22) or a broken "
                          "rule, which the traffic does not tell apart")
            return
        answer = self._refused.get(connection.name)
        if answer is None or connection.closed_by != BROKER:
            self.skip("L-TCP-03", "the close after a bad magic is not in the traffic (the client closed, or the "
                      "traffic ended)")
        elif answer.kind == UNREADABLE:
            self.report("L-TCP-03", BROKER, connection.closed_at, connection.name, "E_BAD_PROTOCOL, then the close",
                        f"the close without E_BAD_PROTOCOL after the magic {answer.text}", answer)


class RepliesFramed(Monitor):
    """L-TCP-02: lookupd's bytes are [4-byte big-endian size][data] replies."""

    ITEMS = ("L-TCP-02",)
    KINDS = frozenset({UNFRAMED})

    def observe(self, judge, connection: V1Connection, event: Observed, answered: Observed | None) -> None:
        self.report("L-TCP-02", BROKER, event.ts, connection.name, "[4-byte size][data] replies", event.text, event)


class AnswersAsLookupd(Monitor):
    """Each command's answer as lookupd's checks give it, in their order (lookupd_protocol_v1.go): PING is OK
    (L-TCP-09); IDENTIFY once (L-TCP-06) with a body it can read (L-TCP-07), answered with its JSON (L-TCP-05);
    REGISTER and UNREGISTER only after IDENTIFY (L-TCP-08), with a valid topic and channel (L-TCP-11), UNREGISTER
    OK whatever is registered (L-TCP-17); any other command E_INVALID (L-TCP-10). Lines are read as lookupd reads
    them (L-TCP-20): an answer naming the line untrimmed breaks that."""

    ITEMS = ("L-TCP-05", "L-TCP-06", "L-TCP-07", "L-TCP-08", "L-TCP-09", "L-TCP-10", "L-TCP-11", "L-TCP-17",
             "L-TCP-20")
    KINDS = frozenset({RESPONSE, ERROR})

    def observe(self, judge, connection: V1Connection, event: Observed, answered: Observed | None) -> None:
        if answered is None:
            return  # no command to answer: MagicAnswered's (L-TCP-01) or after an error (L-TCP-21)
        if connection.error is not None:
            return  # L-TCP-21's: nothing answers after an error
        expected = _expected(connection, answered)
        if expected is None:
            self.skip("L-TCP-07", "an IDENTIFY body whose keys match lookupd's fields only case-insensitively")
            return
        item, kind, text = expected
        if kind == RESPONSE and text is None:  # L-TCP-05: lookupd's own JSON
            if event.kind != RESPONSE or not _identify_answer(event.name):
                self.report(item, BROKER, event.ts, connection.name,
                            "compact JSON of " + ", ".join(IDENTIFY_ANSWER_KEYS) + ", in that order",
                            event.describe(), answered, event)
            return
        observed = event.name if event.kind == RESPONSE else f"{event.name} {event.text}"
        if not judge.wording and kind == ERROR:  # the code alone
            observed, text = observed.split(" ")[0], text.split(" ")[0]
        if observed != text:
            if event.kind == ERROR and event.text.startswith("invalid command ") and \
                    event.text != f"invalid command {answered.name}":
                item = "L-TCP-20"  # lookupd did not trim and split the line as it must
            self.report(item, BROKER, event.ts, connection.name, text, observed, answered, event)


class ErrorsClose(Monitor):
    """L-TCP-21: every lookupd error is fatal: nothing more comes from lookupd, and it closes the connection.
    (That the producer's registrations go with it needs a model of lookupd's registrations, which this is not.)"""

    ITEMS = ("L-TCP-21",)
    KINDS = frozenset({RESPONSE, ERROR})

    def observe(self, judge, connection: V1Connection, event: Observed, answered: Observed | None) -> None:
        error = connection.error
        if error is not None and connection.magic_ok:
            self.report("L-TCP-21", BROKER, event.ts, connection.name, "the close after the error",
                        f"{event.describe()} after {error.describe()}", error, event)

    def closed(self, judge, connection: V1Connection) -> None:
        if connection.error is None or not connection.magic_ok:
            return
        if connection.closed_by != BROKER:
            self.skip("L-TCP-21", "lookupd's close after its error is not in the traffic (the client closed first, "
                      "or the traffic ended)")


def _expected(connection: V1Connection, command: Observed) -> tuple[str, str, str | None] | None:
    """(item, kind, text) of the answer lookupd gives ``command`` now; text None: lookupd's IDENTIFY JSON. None:
    not known (a body Go's JSON decoding reads in ways not followed here)."""
    verb = command.name
    if verb == "PING":
        return "L-TCP-09", RESPONSE, "OK"
    if verb == "IDENTIFY":
        if connection.identified:
            return "L-TCP-06", ERROR, "E_INVALID cannot IDENTIFY again"
        return _identify_body(command.text)
    if verb in ("REGISTER", "UNREGISTER"):
        if not connection.identified:
            return "L-TCP-08", ERROR, "E_INVALID client must IDENTIFY"
        if not command.number:
            return "L-TCP-11", ERROR, f"E_INVALID {verb} insufficient number of params"
        if not valid_name(command.topic):
            return "L-TCP-11", ERROR, f"E_BAD_TOPIC {verb} topic name '{command.topic}' is not valid"
        if command.channel and not valid_name(command.channel):
            return "L-TCP-11", ERROR, f"E_BAD_CHANNEL {verb} channel name '{command.channel}' is not valid"
        return ("L-TCP-11" if verb == "REGISTER" else "L-TCP-17"), RESPONSE, "OK"
    return "L-TCP-10", ERROR, f"E_INVALID invalid command {verb}"


def _identify_body(body: str) -> tuple[str, str, str | None] | None:
    """L-TCP-07: the body decoded into lookupd's PeerInfo; a body that does not decode, or lacks broadcast_address,
    tcp_port, http_port or version, is E_BAD_BODY."""
    try:
        fields = json.loads(body)
    except ValueError:
        return "L-TCP-07", ERROR, "E_BAD_BODY IDENTIFY failed to decode JSON body"
    if fields is None:  # JSON null decodes into nothing: every field missing
        return "L-TCP-07", ERROR, "E_BAD_BODY IDENTIFY missing fields"
    if not isinstance(fields, dict):
        return "L-TCP-07", ERROR, "E_BAD_BODY IDENTIFY failed to decode JSON body"
    known = (*_PEER_STRINGS, *_PEER_PORTS)
    if any(key.lower() in known and key not in known for key in fields):
        return None  # Go matches keys case-insensitively, the last one winning
    wrong_type = any(key in fields and fields[key] is not None and not isinstance(fields[key], str)
                     for key in _PEER_STRINGS) or \
        any(key in fields and fields[key] is not None and not _go_int(fields[key]) for key in _PEER_PORTS)
    if wrong_type:
        return "L-TCP-07", ERROR, "E_BAD_BODY IDENTIFY failed to decode JSON body"
    if not fields.get("broadcast_address") or not fields.get("tcp_port") or not fields.get("http_port") or \
            not fields.get("version"):
        return "L-TCP-07", ERROR, "E_BAD_BODY IDENTIFY missing fields"
    return "L-TCP-05", RESPONSE, None


def _go_int(value) -> bool:
    """A JSON number Go decodes into an int (64 bits)."""
    return isinstance(value, int) and not isinstance(value, bool) and -(1 << 63) <= value < (1 << 63)


def _identify_answer(text: str) -> bool:
    """L-TCP-05: compact JSON, exactly broadcast_address, hostname, http_port, tcp_port and version in that order,
    the ports numbers and the others strings."""
    try:
        fields = json.loads(text)
    except ValueError:
        return False
    if not isinstance(fields, dict) or tuple(fields) != IDENTIFY_ANSWER_KEYS:
        return False
    if not all(_go_int(fields[key]) for key in ("http_port", "tcp_port")) or \
            not all(isinstance(fields[key], str) for key in ("broadcast_address", "hostname", "version")):
        return False
    return json.dumps(fields, separators=(",", ":"), ensure_ascii=False) == text or any(
        character in text for character in "\\<>&")  # Go escapes some characters Python writes as they are
