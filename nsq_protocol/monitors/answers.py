"""Each command answered as nsqd answers it (expected.py), in command order (C-13): the code and wording of a refusal,
no answer to a silent command, a fatal state error where nsqd refuses the command in that state, and that error
before the close (C-23). Judged from the connection's start; after the first wrong answer, or a fatal error, the
connection is judged no further: what the broker then believes is not known."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator
from dataclasses import replace
from heapq import heappop, heappush
from itertools import compress, islice, repeat
from typing import NamedTuple

from nsq_protocol.monitors.connection import TAIL_LOST
from nsq_protocol.monitors.events import (
    BROKER,
    CLIENT,
    COMMAND,
    ERROR,
    EVERY_KIND,
    FINS,
    JSON,
    MESSAGES,
    RESPONSE,
    UNREADABLE,
    Observed,
)
from nsq_protocol.monitors.expected import LINE_ITEMS, Answer, Expected, Session
from nsq_protocol.monitors.monitor import Monitor

UNANSWERED_S = 0.2  # nsqd answers a command it has read at once: a close this much later without the answer is no race
STILL_OPEN_S = 1.0  # after a command nsqd refuses, the error and the close; the capture's slack
IDENTIFY_ANSWER_S = 2.0  # nsqd answers IDENTIFY without waiting on anything (its TLS handshake comes after the JSON)
# an answer nsqd owes this long after the command is missing: even AUTH, or a publish whose authorizations expired,
# waits on the auth server for at most its connect and request timeouts (2 s and 5 s by default)
ANSWER_DUE_S = 15.0
SILENT_AFTER_S = 5.0  # a FIN, REQ or TOUCH unrefused this long was silent: a consumer's commands are not kept forever
MOST_PENDING = 100_000  # without the wire's times, a connection with more commands awaiting their fate is let go
_ERROR_CODE = re.compile(r"E_[A-Z_]+\Z")


class AnswersAsNsqd(Monitor):
    """C-13: answers in command order, C-22: every command nsqd answers answered; C-08: an error's description as
    nsqd words it; C-21, P-ID-01, P-SUB-01, P-RDY-02, P-CLS-01, ...: a command refused in the state where nsqd
    refuses it; P-PUB-02, P-PUB-03, P-FIN-04, ...: the error code nsqd gives; C-23: the fatal error frame comes before
    the close; ID-11, P-ID-04: IDENTIFY is answered, whatever its deflate_level; P-ID-02, P-CLS-03, P-PUB-01,
    P-MPUB-01: what each state still takes; C-14, C-17: a CRLF line, or one with parameters beyond the command's own,
    answered as its plain form; P-MPUB-04: an MPUB whose size word disagrees with its count and sizes, as one whose
    word agrees (where the traffic shows the word: a capture's decoder); C-24: a malformed FIN, REQ or TOUCH refused
    fatally; D-39: a topic or channel name refused (E_BAD_TOPIC, E_BAD_CHANNEL) exactly where the name rule
    refuses it; P-RDY-04, P-RDY-05, P-RDY-06: the count read as nsqd reads it, against the --max-rdy-count the IDENTIFY
    answer showed; P-REQ-05, P-REQ-08: a REQ timeout above --max-req-timeout lowered to it, or (before 1.1.0)
    refused, by the release the judge knows."""

    ITEMS = ("C-08", "C-13", "C-14", "C-15", "C-16", "C-17", "C-20", "C-21", "C-22", "C-23", "C-24", "C-34", "ID-11",
             "ID-12", "P-G-01", "P-ID-01", "P-ID-02", "P-ID-03", "P-ID-04", "P-AUTH-01", "P-AUTH-02", "P-AUTH-03",
             "P-AUTH-04", "P-AUTH-05", "P-AUTH-08", "P-AUTH-09", "P-AUTH-10", "P-AUTH-12", "P-AUTH-14", "P-AUTH-17",
             "P-SUB-01", "P-SUB-02", "P-SUB-03", "P-SUB-04", "P-SUB-05", "P-SUB-06", "P-SUB-08",
             "P-RDY-01", "P-RDY-02", "P-RDY-04", "P-RDY-05", "P-RDY-06", "P-RDY-07",
             "P-FIN-01", "P-FIN-02", "P-FIN-03", "P-FIN-04", "P-REQ-01", "P-REQ-02", "P-REQ-03", "P-REQ-04", "P-REQ-05",
             "P-REQ-06", "P-REQ-08", "P-TOUCH-01", "P-TOUCH-02", "P-TOUCH-03", "P-CLS-01", "P-CLS-02", "P-CLS-03",
             "P-NOP-01",
             "P-PUB-01", "P-PUB-02", "P-PUB-03", "P-PUB-04", "P-DPUB-01", "P-DPUB-02", "P-DPUB-04",
             "P-MPUB-01", "P-MPUB-02", "P-MPUB-04", "P-MPUB-06", "D-39")
    KINDS = EVERY_KIND  # a connection's first event, of any kind, starts its session or says C-13 is not judged
    RUNS = frozenset({MESSAGES, FINS})

    def __init__(self):
        super().__init__()
        self._sessions: dict[str, Session] = {}
        # connection -> the commands not yet answered, in order: (command, Expected), or a run's FIN as
        # (ts, msg_id, _Fins), made the former (_Fins.awaiting) only where an answer may be its own
        self._pending: dict[str, deque] = {}
        self._done: set[str] = set()  # connections judged no further
        self._identifies: list = []  # heap of (due, sequence, connection, command): an IDENTIFY awaiting its answer
        self._sequence = 0

    def observe(self, judge, connection, event, answered):
        name = connection.name
        if name in self._done:
            return
        if not connection.started:
            self.skip("C-13", "the connection's start (its state) is not in the traffic")
            self._done.add(name)
            return
        if event.kind == UNREADABLE:  # the broker's next answer is to these bytes (unreadable.py judges it)
            self._forget(name)
            return
        session = self._sessions.get(name)
        if session is None:
            session = self._sessions[name] = Session()
            if event.kind == COMMAND and event.params is None:
                for item in ("C-14", "C-17"):
                    self.skip(item, "the command lines' parameters and endings are not in the traffic as decoded")
        pending = self._pending.setdefault(name, deque())
        if event.kind == COMMAND:
            session.release = judge.release
            if event.name == "REQ":
                session.max_req_timeout_ns = judge.limits.value("max_req_timeout", connection)
            expected = session.expect(event)
            if expected.unjudged is not None:
                self.skip(*expected.unjudged)
            pending.append((event, expected))
            if judge.timing:
                _let_pass(session, pending, event.ts - SILENT_AFTER_S)
            if len(pending) > MOST_PENDING:
                self.skip("C-13", "too many commands awaiting their answer")
                self._forget(name)
                return
            if not expected.only_errors:
                session.taken(event)
            if event.name == "IDENTIFY" and judge.timing:
                self._sequence += 1
                heappush(self._identifies, (event.ts + IDENTIFY_ANSWER_S, self._sequence, name, event))
                self.due = min(self.due, self._identifies[0][0])
                judge.want_tick(self.due)
            return
        if event.kind not in (RESPONSE, ERROR) or connection.upgrade_ok_taken(event):
            return
        if (event.kind == ERROR) != bool(_ERROR_CODE.match(event.name.split(" ", 1)[0])):
            self._done.add(name)  # an error without its code, or one in a response frame: C-07, C-08
            return
        self._match(judge, connection, session, pending, event)

    def observe_run(self, judge, connection, run):
        name = connection.name
        session = self._sessions.get(name)
        if name in self._done or session is not None and run.key == MESSAGES:
            return  # a message frame neither answers a command nor awaits an answer
        pending = self._pending.get(name)
        # the connection's first run; FINs nsqd may refuse, or answer otherwise; too many awaiting within the run
        if session is None or not session.lets_fins_pass(run.params, run.msg_ids) or \
                len(pending) + len(run.ts) > MOST_PENDING:
            for event in run.events():
                self.observe(judge, connection, event, None)
            return
        session.release = judge.release
        # what observe would keep of each FIN but its time and ID is the same for all, and their silence changes
        # nothing (Session.lets_fins_pass)
        pending.extend(zip(run.ts, run.msg_ids, repeat(_Fins(replace(session), run.params, run.crlf, run.topic))))
        if judge.timing:
            _let_pass(session, pending, run.ts[-1] - SILENT_AFTER_S)

    def _match(self, judge, connection, session, pending, event):
        fin_failed = event.kind == ERROR and event.name == "E_FIN_FAILED"  # P-FIN-04: it may answer a run's FIN
        for index, entry in enumerate(pending) if fin_failed else _commands(pending):
            command, expected = entry if len(entry) == 2 else entry[2].awaiting(entry[0], entry[1])
            answer = expected.fitting(event, judge.wording)
            if answer is not None:
                _pass(session, pending, index)  # nsqd handles commands in order: those before it were silent
                pending.popleft()
                session.answered(command, answer)
                if command.name == "IDENTIFY" and event.name == JSON and event.fields:
                    session.told(event.fields)
                if answer.fatal:
                    self._done.add(connection.name)
                return
            if not expected.silent:
                _materialize(pending)
                self._wrong(connection, event, list(pending), index)
                return
        _materialize(pending)
        self._wrong(connection, event, list(pending), None)

    def _wrong(self, connection, event, pending, due):
        """``event`` fits no command it could answer; ``due``: the first command that must be answered, if any."""
        self._done.add(connection.name)
        candidates = pending[:due + 1] if due is not None else pending
        for command, expected in candidates:
            refuted = expected.refuting(event)
            if refuted is not None:
                self.report(refuted.item, BROKER, event.ts, connection.name, _described_all(expected),
                            f"{event.name} {event.text[:80]}", command, event)
                return
        # the command it answers: the one due, else the first of those nsqd may have let pass in silence (an error:
        # a response answering none is AnswersOnlyToCommands')
        answering = pending[due] if due is not None else candidates[0] if candidates and event.kind == ERROR else None
        if answering is not None and answering[1].item in LINE_ITEMS:  # a CRLF or extra parameters misread (C-14, C-17)
            self.report(answering[1].item, BROKER, event.ts, connection.name, _described_all(answering[1]),
                        event.describe()[2:], *answering[:1], event)
            return
        # after a command nsqd refuses, it reads no further: a later command's answer is not one out of order
        later = next((command for command, expected in pending[due + 1:] if expected.fitting(event)), None) \
            if due is not None and not pending[due][1].only_errors else None
        if later is not None:
            command = pending[due][0]
            self.report("C-13", BROKER, event.ts, connection.name, f"the answer to {command.name} first",
                        f"the answer to a later {later.name}", command, later, event)
            return
        for command, expected in candidates:
            for answer in expected.answers:
                if answer.kind == event.kind == ERROR and answer.name != event.name and answer.worded(event):
                    self.report(answer.item, BROKER, event.ts, connection.name,
                                f"{answer.name} {_readable(answer.text)}", f"{event.name} {event.text[:80]}",
                                command, event)
                    return
        for command, expected in candidates:
            same = next((answer for answer in expected.answers
                         if answer.name == event.name and answer.kind == event.kind), None)
            if same is not None and event.msg_id in (None, command.msg_id):  # an E_FIN_FAILED, ... is its own's
                self.report(same.worded_by, BROKER, event.ts, connection.name,
                            f"{event.name} {_described(expected, event)}", f"{event.name} {event.text[:80]}",
                            command, event)
                return
        if answering is not None:  # a silent command answered, or one answered otherwise
            command, expected = answering
            self.report(expected.item, BROKER, event.ts, connection.name, _described_all(expected) or "no answer",
                        event.describe()[2:], command, event)

    def _forget(self, name):
        self._done.add(name)
        self._sessions.pop(name, None)
        self._pending.pop(name, None)

    def closed(self, judge, connection):
        name = connection.name
        first = _first_due(self._pending.get(name, ())) if name not in self._done else None
        self._forget(name)
        if first is None:
            return
        command, expected = first
        late = connection.closed_at - command.ts
        if connection.closed_by == BROKER and (expected.only_errors or command.name == "IDENTIFY") and \
                (not judge.timing or late >= UNANSWERED_S):
            item = "C-23" if expected.only_errors else expected.item
            self.report(item, BROKER, connection.closed_at, connection.name,
                        f"{_described_all(expected)} before the close", f"closed by the broker {late:.2f} s after "
                        f"{command.name} without an answer", command)
        elif connection.closed_by == CLIENT and expected.only_errors and judge.timing and late > STILL_OPEN_S:
            self.report(expected.item, BROKER, connection.closed_at, connection.name,
                        f"{_described_all(expected)}, then the close", f"no answer, still open {late:.1f} s later, "
                        "then closed by the client", command)
        elif connection.closed_by == CLIENT and judge.timing and late > ANSWER_DUE_S:
            # C-22: nsqd handles every command it read, in order; the client waited long enough for its answer
            self.report("C-22", BROKER, connection.closed_at, connection.name, f"{_described_all(expected)}",
                        f"no answer {late:.1f} s later, when the client closed", command)

    def tick(self, judge, now):
        while self._identifies and self._identifies[0][0] <= now:
            _, _, name, command = heappop(self._identifies)
            pending = self._pending.get(name, ())
            if name in self._done or not judge.connections[name].open or \
                    not any(entry[0] is command for entry in pending):
                continue
            self._done.add(name)
            expected = next(entry[1] for entry in pending if entry[0] is command)
            if judge.connections[name].unseen_at(now):
                self.skip(expected.item, TAIL_LOST)
                continue
            self.report(expected.item, BROKER, now, name, "an answer to IDENTIFY",
                        f"none {now - command.ts:.1f} s later, the connection open", command)
        self.due = self._identifies[0][0] if self._identifies else float("inf")
        judge.want_tick(self.due)

    def finish(self, judge, now):
        self.tick(judge, now)


class _Fins(NamedTuple):
    """What the FINs of a run awaiting their fate share (Session.lets_fins_pass): each one nsqd may let pass in silence,
    or answer with its own E_FIN_FAILED."""

    session: Session  # as the run found it
    params: int | None
    crlf: bool | None
    topic: str | None

    def awaiting(self, ts: float, msg_id: str) -> tuple[Observed, Expected]:
        """The FIN and what nsqd may answer to it, as ``observe`` has them (events.Run.events)."""
        command = Observed(ts, COMMAND, FINS, msg_id=msg_id, topic=self.topic, params=self.params, crlf=self.crlf)
        return command, self.session.expect(command)


def _materialize(pending: deque) -> None:
    """Each run's FIN ``pending`` holds made the command and Expected ``observe`` would have made of it."""
    entries = [entry if len(entry) == 2 else entry[2].awaiting(entry[0], entry[1]) for entry in pending]
    pending.clear()
    pending.extend(entries)


def _commands(pending: deque) -> Iterator[tuple[int, tuple]]:
    """(index, entry) of each command ``pending`` holds but a run's FIN, which may be silent, and which only its own
    E_FIN_FAILED answers: passed over at C speed, as a consumer's FINs awaiting their answer may be thousands."""
    lengths = list(map(len, pending))
    index = -1
    while True:
        try:
            index = lengths.index(2, index + 1)
        except ValueError:
            return
        yield index, pending[index]


def _pass(session: Session, pending: deque, count: int) -> None:
    """The first ``count`` entries of ``pending`` let pass in silence (``_passed``), taken off at once."""
    head = list(islice(pending, count))
    rest = list(islice(pending, count, None))
    pending.clear()
    pending.extend(rest)
    _passed(session, head)


def _passed(session: Session, entries: list | tuple) -> None:
    """nsqd let ``entries``' commands pass in silence; a run's FIN found tls_possible false: its silence changes
    nothing (passed over at C speed: a consumer's FINs may be thousands)."""
    for entry in compress(entries, map((2).__eq__, map(len, entries))):
        session.answered(entry[0], None)


def _let_pass(session: Session, pending: deque, before: float) -> None:
    """The commands at the head of ``pending`` sent before ``before`` that nsqd may let pass in silence were silent:
    a consumer's commands are not kept forever."""
    while pending:
        entry = pending[0]
        fin = len(entry) == 3  # a run's FIN, which nsqd may let pass
        if (entry[0] if fin else entry[0].ts) >= before or not fin and not entry[1].silent:
            return
        _passed(session, (pending.popleft(),))


def _first_due(pending) -> tuple | None:
    """The first pending command that must be answered, if the ones before it may have been silent."""
    return next((entry for entry in pending if len(entry) == 2 and not entry[1].silent), None)


def _readable(pattern: str) -> str:
    return re.sub(r"\\(.)", r"\1", pattern)


def _described(expected: Expected, event) -> str:
    return " or ".join(_readable(answer.text) for answer in expected.answers if answer.name == event.name)


def _described_all(expected: Expected) -> str:
    return " or ".join(_answer(answer) for answer in expected.answers[:3])


def _answer(answer: Answer) -> str:
    return answer.name if answer.kind == RESPONSE else f"{answer.name} {_readable(answer.text)}"
