"""What nsqd answers to one command (nsqd/protocol_v2.go, v1.3.0): from what the traffic shows of the command and
the connection's state, the answers it may give, whether it may give none, and the catalogue item that says so.
Where the answer hangs on what the traffic does not show (a flag such as --max-msg-size or --max-rdy-count, the
auth server, the TLS policy, a message's fate in the channel), every answer nsqd could give is allowed; an error's
description is matched as nsqd words it (C-08)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from nsq_protocol.monitors.events import ERROR, JSON, NON_FATAL_ERRORS, RESPONSE, Observed, body_hash
from nsq_protocol.monitors.release import UNKNOWN, V1_1, Release, before

INIT, SUBSCRIBED, CLOSING = "init", "subscribed", "closing"
VERBS = frozenset({"IDENTIFY", "AUTH", "SUB", "RDY", "FIN", "REQ", "TOUCH", "PUB", "MPUB", "DPUB", "NOP", "CLS"})
SETTLING_ITEMS = {  # verb -> (state, parameters, ID length, not in flight) items
    "FIN": ("P-FIN-01", "P-FIN-02", "P-FIN-03", "P-FIN-04"),
    "REQ": ("P-REQ-01", "P-REQ-02", "P-REQ-03", "P-REQ-06"),
    "TOUCH": ("P-TOUCH-01", "P-TOUCH-02", "P-TOUCH-02", "P-TOUCH-03"),
}
# C-17: the parameters each command reads; nsqd ignores any beyond them (AUTH, which refuses any, is P-AUTH-02's)
OWN_PARAMS = {"IDENTIFY": 0, "SUB": 2, "RDY": 1, "FIN": 1, "REQ": 2, "TOUCH": 1, "PUB": 1, "MPUB": 1, "DPUB": 2,
              "NOP": 0, "CLS": 0}
# the items a command nsqd takes in a state breaks when it is refused there as out of state
STATELESS = {"PUB": "P-PUB-01", "MPUB": "P-MPUB-01"}  # no state requirement
PUBLISHES = frozenset({"PUB", "MPUB", "DPUB"})
AFTER_CLS = frozenset({"FIN", "REQ", "TOUCH", "PUB", "MPUB", "DPUB", "NOP"})  # P-CLS-03: they still work
LINE_ITEMS = frozenset({"C-14", "C-17"})  # a wrong answer to a line of that shape is named by its shape first
EMPTY_BODY = body_hash(b"")
TEXT_KEPT = 300  # characters of an error's description a capture's decoder keeps (spark_analysis decode)
NS_PER_MS = 1_000_000
_NAME = re.compile(r"[.a-zA-Z0-9_-]+(#ephemeral)?\Z")  # D-39
ANY_TEXT = ".*"
ERRORS_KEPT = 4096  # refusals _error keeps made: nsqd words a few dozen, the names and counts they quote vary


class Answer(NamedTuple):
    """One answer nsqd may give: a response frame (``name`` its text, or ``JSON``) or an error frame (``name`` its
    code, ``text`` a pattern its description matches whole)."""

    kind: str
    name: str
    text: str = ANY_TEXT
    item: str = ""
    worded_by: str = "C-08"  # the rule a description other than nsqd's breaks
    # where ``text`` is an escaped literal beginning, then '.+': that beginning as a description shows it (one that
    # names a message ID, a pattern for each of a consumer's FINs, is read without compiling it)
    begins: str | None = None

    def fits(self, event: Observed, wording: bool = True) -> bool:
        """``event`` is this answer: its kind, name or code, and (``wording``) its description as nsqd words it."""
        return event.kind == self.kind and event.name == self.name and (not wording or self.worded(event))

    def worded(self, event: Observed) -> bool:
        if self.kind != ERROR or len(event.text) >= TEXT_KEPT:  # a description cut short by the decoder
            return True
        if self.begins is not None:
            return len(event.text) > len(self.begins) and event.text.startswith(self.begins)
        return re.fullmatch(self.text, event.text, re.DOTALL) is not None

    @property
    def fatal(self) -> bool:
        return self.kind == ERROR and self.name not in NON_FATAL_ERRORS


class Expected(NamedTuple):
    """What nsqd may answer to one command; ``item``: the rule the command breaks when its answer is none of
    these, or when it gets none though it must."""

    answers: tuple[Answer, ...]
    silent: bool  # nsqd may answer nothing
    item: str
    refuted: tuple[Answer, ...] = ()  # answers nsqd never gives here, each with the rule it breaks (named first)
    unjudged: tuple[str, str] | None = None  # (item, why): what the answer hangs on that the traffic does not show

    @property
    def only_errors(self) -> bool:
        """nsqd refuses the command whatever the traffic does not show: a fatal error, then the close (C-23)."""
        return not self.silent and all(answer.fatal for answer in self.answers)

    def fitting(self, event: Observed, wording: bool = True) -> Answer | None:
        return next((answer for answer in self.answers if answer.fits(event, wording)), None)

    def refuting(self, event: Observed) -> Answer | None:
        """The answer nsqd never gives here that ``event`` is, if any."""
        return next((answer for answer in self.refuted if answer.fits(event)), None)


@dataclass
class Session:
    """The connection as nsqd sees it, taken forward command by command (C-22: in arrival order). A command nsqd
    may accept is taken as accepted: had it failed, the connection would have ended there."""

    state: str = INIT
    heartbeats: bool = True  # C-32: heartbeat_interval -1 turns them off, and SUB is then refused (P-SUB-02)
    tls_possible: bool = True  # a TLS-required policy may still refuse every command but IDENTIFY (P-G-01)
    auth_possible: bool = True  # an auth server may still refuse a publish or SUB (P-AUTH-09)
    auth_enabled: bool = False  # an IDENTIFY answer said auth_required (P-AUTH-14)
    authed: bool = False  # an AUTH was answered with its JSON: the client holds authorizations (P-AUTH-04)
    identified: int = 0  # IDENTIFYs taken: more may follow before SUB (P-ID-02)
    max_rdy_count: int | None = None  # --max-rdy-count, as an IDENTIFY answer showed it (P-RDY-04)
    # what the judge knows of the broker, told before each command (judge.release, judge.limits)
    release: Release | None = None
    max_req_timeout_ns: int | None = None

    def expect(self, command: Observed) -> Expected:
        verb = command.name
        if verb == "IDENTIFY":
            return self._named(command, self._identify(command))
        tls = (_error("E_INVALID", f"cannot {re.escape(verb)} in current state \\(TLS required\\)", "P-G-01"),) \
            if self.tls_possible else ()
        if verb not in VERBS:
            # C-16: names are case-sensitive; C-20: a bare newline is a command with an empty name
            item = "C-20" if verb == "" else "C-16" if verb.upper() in VERBS else "C-21"
            return Expected((_error("E_INVALID", f"invalid command {re.escape(verb)}", item), *tls), False, item)
        expected = getattr(self, "_" + verb.lower())(command)
        expected = self._named(command, expected._replace(answers=(*expected.answers, *tls)))
        if expected.item in LINE_ITEMS:  # the line's shape is what a wrong answer breaks first
            return expected
        # D-39: a name the rule allows is never refused as bad
        return expected._replace(refuted=(*expected.refuted, *(_error(code, ANY_TEXT, "D-39")
                                                               for code in self._allowed_names(command))))

    def _allowed_names(self, command: Observed) -> tuple[str, ...]:
        """The codes nsqd would refuse the command's names with (E_BAD_TOPIC, E_BAD_CHANNEL) of those it checks and
        the rule allows."""
        if command.name == "SUB" and self.state == INIT and self.heartbeats and valid_name(command.topic or ""):
            return ("E_BAD_TOPIC", "E_BAD_CHANNEL") if valid_name(command.channel or "") else ("E_BAD_TOPIC",)
        if command.name in PUBLISHES and valid_name(command.topic or ""):
            return ("E_BAD_TOPIC",)
        return ()

    def _named(self, command: Observed, expected: Expected) -> Expected:
        """The rules a wrong answer to a command nsqd takes breaks beyond the verb's own: the state it takes the
        command in (P-CLS-03, P-PUB-01, P-MPUB-01, P-ID-02), the line's CRLF (C-14), parameters beyond those the
        command reads (C-17)."""
        if expected.only_errors:
            return expected
        verb, item = command.name, expected.item
        state_item = "P-CLS-03" if self.state == CLOSING and verb in AFTER_CLS else STATELESS.get(verb) or (
            "P-ID-02" if self.identified and verb in ("IDENTIFY", "SUB", "AUTH") and self.state == INIT else None)
        refuted = expected.refuted
        if state_item is not None:
            refuted += (_error("E_INVALID", f"cannot {verb} in current state", state_item),)
            if self.state != INIT or verb == "IDENTIFY":  # PUB before SUB, a SUB after IDENTIFY: their own rules
                item = state_item
        if command.params is not None and command.params > OWN_PARAMS.get(verb, command.params):
            item = "C-17"
        if command.crlf:
            item = "C-14"
        return expected._replace(item=item, refuted=refuted)

    def lets_fins_pass(self, params: int | None, msg_ids: list[str]) -> bool:
        """Whether nsqd may let each of these FINs (lines of ``params`` parameters) pass in silence, answering it if at
        all with its own E_FIN_FAILED only, whatever the others get: subscribed, past the TLS policy, the lines with
        their IDs, each of 16 bytes."""
        return self.state in (SUBSCRIBED, CLOSING) and not self.tls_possible and \
            (params is None or params >= OWN_PARAMS["FIN"]) and set(map(len, msg_ids)) == {16} and \
            "".join(msg_ids).isascii()

    def answered(self, command: Observed, answer: Answer | None) -> None:
        """``command`` got ``answer`` (None: none, it was silent): what that changes."""
        if answer is not None and answer.kind == RESPONSE and command.name != "IDENTIFY":
            self.tls_possible = False
            self.authed |= command.name == "AUTH"
        elif answer is None and command.name not in ("IDENTIFY", "AUTH") and command.name in VERBS:
            self.tls_possible = False

    def taken(self, command: Observed) -> None:
        """``command`` accepted: the state it leaves (P-SUB-08, P-CLS-02, C-32)."""
        verb = command.name
        if verb == "SUB" and self.state == INIT:
            self.state = SUBSCRIBED
        elif verb == "CLS" and self.state == SUBSCRIBED:
            self.state = CLOSING
        elif verb == "IDENTIFY" and self.state == INIT:
            self.identified += 1
            fields = {key.lower(): value for key, value in (command.fields or {}).items()}
            interval = fields.get("heartbeat_interval")
            if isinstance(interval, int) and not isinstance(interval, bool) and interval != 0:
                self.heartbeats = interval > 0  # ID-02: 0 or absent keeps the current value

    def told(self, answer: dict) -> None:
        """A JSON answer to IDENTIFY says whether the server has an auth address (P-AUTH-14), and its
        --max-rdy-count (P-RDY-04)."""
        most = answer.get("max_rdy_count")
        if isinstance(most, int) and not isinstance(most, bool):
            self.max_rdy_count = most
        if answer.get("auth_required") is False:
            self.auth_possible = False
        elif answer.get("auth_required") is True:
            self.auth_enabled = True

    def _permission(self, verb: str) -> tuple[Answer, ...]:
        """P-AUTH-09, P-AUTH-10, P-AUTH-12: what an auth server may refuse, where nsqd asks it."""
        if not self.auth_possible:
            return ()
        return (_error("E_AUTH_FIRST", f"AUTH required before {verb}", "P-AUTH-09"),
                _error("E_AUTH_FAILED", "AUTH failed", "P-AUTH-12"),
                _error("E_UNAUTHORIZED", f"AUTH failed for {verb} on .*", "P-AUTH-10"))

    # ---- one method per verb, in nsqd's order of checks ----------------------------------------------------
    def _identify(self, command: Observed) -> Expected:
        if self.state != INIT:
            return Expected((_error("E_INVALID", "cannot IDENTIFY in current state", "P-ID-01"),), False, "P-ID-01")
        fields = {key.lower(): value for key, value in (command.fields or {}).items()}
        level = fields.get("deflate_level")
        # ID-11: nsqd never refuses a deflate level, it answers with 6 or the cap
        item = "ID-11" if isinstance(level, int) and not isinstance(level, bool) and level <= 0 else "P-ID-04"
        return Expected((Answer(RESPONSE, "OK", item=item), Answer(RESPONSE, JSON, item=item),
                         _error("E_BAD_BODY", "IDENTIFY .+", "P-ID-03"),
                         _error("E_IDENTIFY_FAILED", "cannot enable both deflate and snappy compression|IDENTIFY "
                                "failed .+", "ID-12")), False, item)

    def _auth(self, command: Observed) -> Expected:
        if self.state != INIT:
            return Expected((_error("E_INVALID", "cannot AUTH in current state", "P-AUTH-01"),), False, "P-AUTH-01")
        # P-AUTH-02: a parameter on the line is refused before the body is read
        params = _error("E_INVALID", "AUTH invalid number of parameters", "P-AUTH-02")
        if command.params:
            return Expected((params,), False, "P-AUTH-02")
        unjudged = ("P-AUTH-02", "the AUTH line's parameters are not in the traffic as decoded") \
            if command.params is None else ("P-AUTH-03", "the AUTH body's size is not in the traffic as decoded") \
            if command.number is None else None
        # P-AUTH-03: the body's size checked, in nsqd's order, against --max-body-size, which the traffic does not show
        size = command.number
        if size == 0:
            return Expected((_error("E_BAD_BODY", "AUTH invalid body size 0", "P-AUTH-03"),), False, "P-AUTH-03")
        too_big = f"body too big {size} > [0-9]+" if size is not None else \
            "failed to read body( size)?|body too big [0-9]+ > [0-9]+|invalid body size -?[0-9]+"
        unseen = (*((params,) if command.params is None else ()),
                  _error("E_BAD_BODY", f"AUTH ({too_big})", "P-AUTH-03"))
        refuted = (params,) if command.params == 0 else ()
        if self.authed:
            return Expected((_error("E_INVALID", "AUTH already set", "P-AUTH-04"), *unseen), False, "P-AUTH-04",
                            refuted, unjudged)
        disabled = _error("E_AUTH_DISABLED", "AUTH disabled", "P-AUTH-05", worded_by="P-AUTH-17")
        if not self.auth_possible:
            return Expected((disabled, *unseen), False, "P-AUTH-05", refuted, unjudged)
        asked = (Answer(RESPONSE, JSON, item="P-AUTH-08"), _error("E_AUTH_FAILED", "AUTH failed", "P-AUTH-06"),
                 _error("E_UNAUTHORIZED", "AUTH no authorizations found", "P-AUTH-07"),
                 _error("E_AUTH_ERROR", "AUTH error .+", "P-AUTH-08"))
        if self.auth_enabled:
            return Expected((*asked, *unseen), False, "P-AUTH-14", refuted, unjudged)
        return Expected((*asked, disabled, *unseen), False, "P-AUTH-08", refuted, unjudged)

    def _sub(self, command: Observed) -> Expected:
        if self.state != INIT:
            return _refused("cannot SUB in current state", "P-SUB-01")
        if not self.heartbeats:
            return _refused("cannot SUB with heartbeats disabled", "P-SUB-02")
        if command.topic is None or command.channel is None:
            return _refused("SUB insufficient number of parameters", "P-SUB-03")
        for code, what, name in (("E_BAD_TOPIC", "topic", command.topic), ("E_BAD_CHANNEL", "channel",
                                                                          command.channel)):
            if not valid_name(name):
                item = "C-15" if name == "" else "P-SUB-04"
                # P-SUB-05: the names are checked before the permission
                early = tuple(answer._replace(item="P-SUB-05") for answer in self._permission("SUB"))
                # taken, the name breaks the name rule (D-39)
                return Expected((_error(code, f"SUB {what} name {_quoted(name)} is not valid", item),), False,
                                "C-15" if name == "" else "D-39", early)
        return Expected((Answer(RESPONSE, "OK", item="P-SUB-08"), _error("E_SUB_FAILED", "SUB failed .+", "P-SUB-06"),
                         *self._permission("SUB")), False, "P-SUB-08")

    def _rdy(self, command: Observed) -> Expected:
        if self.state == CLOSING:
            return Expected((), True, "P-RDY-01")
        if self.state != SUBSCRIBED:
            return _refused("cannot RDY in current state", "P-RDY-02")
        count = command.number
        if count is None:  # a count that does not parse, or one the traffic's decoder did not read
            return Expected((_error("E_INVALID", "RDY could not parse count .*|RDY count -?[0-9]+ out of range "
                                    "0-[0-9]+", "P-RDY-04"),), True, "P-RDY-07")
        # P-RDY-06: nsqd reads the digits into 64 bits, wrapping, then as a signed count; P-RDY-05: 'RDY' is 1
        read = count % 2**64 - (2**64 if count % 2**64 >= 2**63 else 0)
        item = "P-RDY-06" if count >= 2**63 else "P-RDY-05" if command.params == 0 else "P-RDY-04"
        most = self.max_rdy_count
        out_of_range = _error("E_INVALID", f"RDY count {read} out of range 0-{'[0-9]+' if most is None else most}",
                              item)
        if read < 0 or most is not None and read > most:
            return Expected((out_of_range,), False, item)
        # P-RDY-03: digits always parse; P-RDY-05: 'RDY ' is 0
        unparsed = _error("E_INVALID", "RDY could not parse count .*", "P-RDY-05" if count == 0 else item)
        if most is None:
            return Expected((out_of_range,), True, item if item != "P-RDY-04" else "P-RDY-07", (unparsed,),
                            ("P-RDY-04", "--max-rdy-count is not in the traffic (no IDENTIFY answer showed it)"))
        return Expected((), True, item if item != "P-RDY-04" else "P-RDY-07", (unparsed, out_of_range))

    def _settle(self, command: Observed) -> Expected:
        verb = command.name
        state_item, params_item, id_item, failed_item = SETTLING_ITEMS[verb]
        if self.state not in (SUBSCRIBED, CLOSING):
            return _refused(f"cannot {verb} in current state", state_item)
        # C-24: a FIN, REQ or TOUCH nsqd cannot read is a fatal E_INVALID, never the non-fatal E_<VERB>_FAILED
        failed_any = (_error(f"E_{verb}_FAILED", ANY_TEXT, "C-24"),)
        insufficient = _error("E_INVALID", f"{verb} insufficient number of params", params_item)
        if command.msg_id is None or command.params is not None and command.params < OWN_PARAMS[verb]:
            return Expected((insufficient,), False, "C-24", failed_any)
        unparsed = _error("E_INVALID", "REQ could not parse timeout .*", "P-REQ-04")
        # REQ without a timeout, or with one that does not parse: where the traffic does not show which, either
        unsure = (insufficient,) if verb == "REQ" and command.number is None and command.params is None else ()
        size = id_size(command.msg_id)
        invalid_id = _error("E_INVALID", "invalid message ID", id_item, worded_by="C-34")
        if size is not None and size != 16:
            return Expected((invalid_id, *unsure), False, "C-24", failed_any)
        if verb == "REQ" and command.number is None and command.params is not None and size is not None:
            return Expected((unparsed,), False, "C-24", failed_any)  # the suite's decoder reads any digits
        # P-FIN-04, P-REQ-06, P-TOUCH-03: the ID as sent, where the traffic's text shows it
        failed = _error(f"E_{verb}_FAILED", f"{verb} .+ failed .+", failed_item) if size is None else \
            Answer(ERROR, f"E_{verb}_FAILED", f"{verb} {re.escape(command.msg_id)} failed .+", failed_item,
                   begins=f"{verb} {command.msg_id} failed ")
        unsure += (unparsed,) if verb == "REQ" and command.number is None else ()
        unknown_id = (invalid_id,) if size is None else ()
        if verb != "REQ" or command.number is None:
            return Expected((failed, *unsure, *unknown_id), True, failed_item)
        older = before(self.release, V1_1)
        if older is False:  # P-REQ-05: a timeout above --max-req-timeout is lowered to it, never refused
            return Expected((failed, *unknown_id), True, failed_item, (_error("E_INVALID", "REQ timeout .*",
                                                                              "P-REQ-05"),))
        # P-REQ-08: before 1.1.0, one above it is a fatal E_INVALID naming the range in nanoseconds
        timeout, most = command.number * NS_PER_MS, self.max_req_timeout_ns
        ranged = _error("E_INVALID", f"REQ timeout {timeout} out of range 0-{'[0-9]+' if most is None else most}",
                        "P-REQ-08")
        if older is None:
            return Expected((failed, ranged, *unknown_id), True, failed_item, (), ("P-REQ-05", UNKNOWN))
        if most is None:
            return Expected((failed, ranged, *unknown_id), True, failed_item, (),
                            ("P-REQ-08", "--max-req-timeout is not in the traffic (no refusal or /config showed it)"))
        if timeout > most:
            return Expected((ranged, *unknown_id), False, "P-REQ-08")
        return Expected((failed, *unknown_id), True, failed_item, (ranged,))

    _fin = _req = _touch = _settle

    def _cls(self, command: Observed) -> Expected:
        if self.state != SUBSCRIBED:
            return _refused("cannot CLS in current state", "P-CLS-01")
        return Expected((Answer(RESPONSE, "CLOSE_WAIT", item="P-CLS-02"),), False, "P-CLS-02")

    def _nop(self, command: Observed) -> Expected:
        return Expected((), True, "P-NOP-01")

    def _pub(self, command: Observed) -> Expected:
        if command.topic is None:
            return _refused("PUB insufficient number of parameters", "P-PUB-02")
        if not valid_name(command.topic):
            return _bad_topic(f"PUB topic name {_quoted(command.topic)} is not valid", "P-PUB-02", command.topic)
        if command.bodies == (EMPTY_BODY,):
            return Expected((_error("E_BAD_MESSAGE", "PUB invalid message body size 0", "P-PUB-03"),), False,
                            "P-PUB-03")
        return Expected((Answer(RESPONSE, "OK", item="P-PUB-04"),
                         _error("E_BAD_MESSAGE", "PUB message too big [0-9]+ > [0-9]+", "P-PUB-03"),
                         _error("E_PUB_FAILED", "PUB failed .+", "P-PUB-02"), *self._permission("PUB")), False,
                        "P-PUB-04")

    def _dpub(self, command: Observed) -> Expected:
        if command.topic is None:
            return _refused("DPUB insufficient number of parameters", "P-DPUB-01")
        if command.number is None:  # no delay, an empty one (P-DPUB-03) or one that does not parse
            if not valid_name(command.topic):  # too few parameters, else the name (D-39)
                return Expected(tuple(_error(code, "(E_BAD_TOPIC )?DPUB .+", "P-DPUB-01") for code in (
                    "E_INVALID", "E_BAD_TOPIC")), False, "C-15" if command.topic == "" else "D-39")
            return Expected((Answer(RESPONSE, "OK", item="P-DPUB-01"),
                             *(_error(code, "DPUB .+", "P-DPUB-01") for code in (
                                 "E_INVALID", "E_BAD_MESSAGE", "E_DPUB_FAILED")),
                             *self._permission("DPUB")), False, "P-DPUB-01")
        if not valid_name(command.topic):
            return _bad_topic(f"DPUB topic name {_quoted(command.topic)} is not valid", "P-DPUB-01", command.topic)
        # P-DPUB-02: the delay's range is --max-req-timeout's
        beyond = _error("E_INVALID", f"DPUB timeout {command.number} out of range 0-[0-9]+", "P-DPUB-02")
        if command.bodies == (EMPTY_BODY,):
            return Expected((beyond, _error("E_BAD_MESSAGE", "DPUB invalid message body size 0", "P-DPUB-01")),
                            False, "P-DPUB-01")
        return Expected((Answer(RESPONSE, "OK", item="P-DPUB-04"), beyond,
                         _error("E_BAD_MESSAGE", "DPUB message too big [0-9]+ > [0-9]+", "P-DPUB-01"),
                         _error("E_DPUB_FAILED", "DPUB failed .+", "P-DPUB-01"), *self._permission("DPUB")), False,
                        "P-DPUB-04")

    def _mpub(self, command: Observed) -> Expected:
        if command.topic is None:
            return _refused("MPUB insufficient number of parameters", "P-MPUB-02")
        if not valid_name(command.topic):  # the code twice
            return _bad_topic(f"E_BAD_TOPIC MPUB topic name {_quoted(command.topic)} is not valid", "P-MPUB-02",
                              command.topic)
        # P-MPUB-04: a size word that disagrees with the body its count and sizes frame is only range-checked
        if command.size is not None and command.size <= 0:
            return Expected((*self._permission("MPUB"), _error("E_BAD_BODY", f"MPUB invalid body size {command.size}",
                                                               "P-MPUB-04")), False, "P-MPUB-04")
        # the permission first (P-AUTH-09), then sizes and counts against --max-body-size and --max-msg-size, which
        # the traffic does not show
        refusable = (*self._permission("MPUB"),
                   _error("E_BAD_BODY", "MPUB body too big [0-9]+ > [0-9]+|MPUB invalid message count [0-9]+",
                          "P-MPUB-02"),
                   _error("E_BAD_MESSAGE", "MPUB message too big [0-9]+ > [0-9]+", "P-MPUB-02"))
        if not command.bodies:  # the batch did not parse
            return Expected((Answer(RESPONSE, "OK", item="P-MPUB-06"), *self._permission("MPUB"),
                             *(_error(code, "MPUB .+", "P-MPUB-02") for code in ("E_BAD_BODY", "E_BAD_MESSAGE"))),
                            False, "P-MPUB-02")
        if EMPTY_BODY in command.bodies:
            empty = _error("E_BAD_MESSAGE", f"MPUB invalid message\\({command.bodies.index(EMPTY_BODY)}\\) body "
                           "size 0", "P-MPUB-02")
            return Expected((empty, *refusable), False, "P-MPUB-02")
        item = "P-MPUB-06" if command.size is None else "P-MPUB-04"
        return Expected((Answer(RESPONSE, "OK", item=item), *refusable,
                         _error("E_MPUB_FAILED", "MPUB failed .+", "P-MPUB-02")), False, item)


def valid_name(name: str) -> bool:
    """D-39: 1 to 64 characters of letters, digits, '.', '_' and '-', optionally ending in '#ephemeral'."""
    return 1 <= len(name.encode("utf-8", "surrogateescape")) <= 64 and _NAME.match(name) is not None


def id_size(msg_id: str) -> int | None:
    """The ID's length in bytes as sent, where the traffic's text shows it (ASCII); None otherwise."""
    return len(msg_id) if msg_id.isascii() else None


def _quoted(name: str) -> str:
    """The pattern of Go's %q of ``name``: exact for printable ASCII, any quoted text otherwise."""
    if not all(" " <= character <= "~" for character in name):
        return '".*"'
    return re.escape('"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"')


@lru_cache(maxsize=ERRORS_KEPT)  # the same few refusals, command after command
def _error(code: str, text: str, item: str, worded_by: str = "C-08") -> Answer:
    return Answer(ERROR, code, text, item, worded_by)


def _bad_topic(text: str, item: str, topic: str) -> Expected:
    """A publish to a topic name nsqd refuses: E_BAD_TOPIC, fatal; taken, it breaks the name rule (D-39). An empty
    name is the line split on each single space (C-15): two spaces, or a trailing one."""
    if topic == "":
        return Expected((_error("E_BAD_TOPIC", text, "C-15"),), False, "C-15")
    return Expected((_error("E_BAD_TOPIC", text, item),), False, "D-39")


def _refused(text: str, item: str) -> Expected:
    return Expected((_error("E_INVALID", re.escape(text), item),), False, item)

