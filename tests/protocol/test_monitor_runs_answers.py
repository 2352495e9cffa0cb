"""AnswersAsNsqd takes a capture's bulk (events.Run) whole and judges it as the same events one by one: FINs that
await their fate (an E_FIN_FAILED of one in the middle, worded or not, a wrong answer after them, the close, the
silence of those older than SILENT_AFTER_S), after CLS, with CRLF or extra parameters, with IDs nsqd refuses, before
the subscription, on a connection whose start is missing; message frames; a judge that does not read the wording.
An E_<VERB>_FAILED's description, read by the beginning that names the ID, fits as its pattern would."""

from __future__ import annotations

import re
import string

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from nsq_protocol import monitors
from nsq_protocol.monitors import answers
from nsq_protocol.monitors.answers import AnswersAsNsqd
from nsq_protocol.monitors.events import (
    BROKER,
    CLIENT,
    COMMAND,
    ERROR,
    FINS,
    HEARTBEAT,
    JSON,
    MESSAGE,
    RESPONSE,
    Observed,
    failed_id,
)
from nsq_protocol.monitors.expected import SUBSCRIBED, Session
from tests.protocol.test_monitor_runs import Feeder

T0 = 1_800_000_000.0
NS = 1_000_000_000


def _id(number: int) -> str:
    return f"{number:016x}"


# (params, crlf, topic): the line's shape, the topic a capture's decoder names
SHAPES = st.sampled_from([(1, False, None), (1, False, "t")] * 2 + [(None, False, "t"), (2, False, None),
                                                                    (1, True, None), (0, False, None)])
IDS = st.sampled_from(["good"] * 8 + ["short", "wide"])
fins = st.tuples(st.just("fins"), st.integers(1, 8), st.integers(0, 30), SHAPES, IDS)
steps = st.lists(st.one_of(
    fins, fins, fins,
    st.tuples(st.just("messages"), st.integers(1, 8), st.integers(0, 30)),
    st.tuples(st.just("fin_failed"), st.integers(0, 30), st.sampled_from(["worded", "worded", "misworded", "long",
                                                                          "bare"])),
    st.tuples(st.sampled_from(["rdy", "req", "heartbeat"] * 3 + ["nop", "cls", "close_wait", "ok", "sub", "identify",
                                                                 "e_invalid", "e_tls", "e_invalid_id"])),
    st.tuples(st.just("gap"), st.floats(0.5, 7.0))), min_size=1, max_size=30)
endings = st.sampled_from([BROKER, CLIENT, None])
mostly = st.sampled_from([True, True, True, True, False])


def traffic(started: bool, subscribed: bool, plan) -> list[Observed]:
    """One connection's events: IDENTIFY answered, SUB (answered where ``subscribed``), then ``plan``'s steps."""
    events = []
    ts = T0
    if started and subscribed:
        events += [Observed(ts, COMMAND, "IDENTIFY", fields={}, params=0, crlf=False),
                   Observed(ts + 0.001, RESPONSE, JSON, fields={"max_rdy_count": 2500, "auth_required": False}),
                   Observed(ts + 0.002, COMMAND, "SUB", topic="t", channel="c", params=2, crlf=False),
                   Observed(ts + 0.003, RESPONSE, "OK")]
    for step in plan:
        ts += 0.01
        action = step[0]
        if action == "fins":
            _, count, number, (params, crlf, topic), ids = step
            for offset in range(count):
                msg_id = _id(number + offset)
                msg_id = msg_id[:10] if ids == "short" else msg_id[:15] + "\u00e9" if ids == "wide" else msg_id
                events.append(Observed(ts + offset * 1e-4, COMMAND, FINS, msg_id=msg_id, topic=topic, params=params,
                                       crlf=crlf))
        elif action == "messages":
            _, count, number = step
            events += [Observed(ts + offset * 1e-4, MESSAGE, msg_id=_id(number + offset), attempts=1,
                                msg_ts_ns=int(T0 * NS), bodies=(number,)) for offset in range(count)]
        elif action == "fin_failed":
            _, number, wording = step
            text = {"worded": f"FIN {_id(number)} failed ID not in flight", "misworded": f"FIN {_id(number)} is bad",
                    "long": f"FIN {_id(number)} failed " + "x" * 300, "bare": "FIN failed"}[wording]
            events.append(Observed(ts, ERROR, "E_FIN_FAILED", text, msg_id=failed_id(text)))
        elif action == "gap":
            ts += step[1]
        else:
            events.append({
                "sub": Observed(ts, COMMAND, "SUB", topic="t", channel="c", params=2, crlf=False),
                "ok": Observed(ts, RESPONSE, "OK"),
                "cls": Observed(ts, COMMAND, "CLS", params=0, crlf=False),
                "close_wait": Observed(ts, RESPONSE, "CLOSE_WAIT"),
                "identify": Observed(ts, COMMAND, "IDENTIFY", fields={}, params=0, crlf=False),
                "nop": Observed(ts, COMMAND, "NOP", params=0, crlf=False),
                "rdy": Observed(ts, COMMAND, "RDY", number=5, params=1, crlf=False),
                "req": Observed(ts, COMMAND, "REQ", msg_id=_id(3), number=0, params=2, crlf=False),
                "e_invalid": Observed(ts, ERROR, "E_INVALID", "cannot FIN in current state"),
                "e_tls": Observed(ts, ERROR, "E_INVALID", "cannot FIN in current state (TLS required)"),
                "e_invalid_id": Observed(ts, ERROR, "E_INVALID", "invalid message ID"),
                "heartbeat": Observed(ts, HEARTBEAT),
            }[action])
    return events


def judged(started: bool, events: list[Observed], ending: str | None, runs: bool, wording: bool) -> monitors.Judge:
    """``events`` on connection A through a judge of AnswersAsNsqd alone: with ``runs``, the consecutive message
    frames or FINs (of one line's shape, no ID twice) as runs, as a capture's analysis hands them over."""
    judge = monitors.Judge([AnswersAsNsqd()], timing=True, http_seen=True, wording=wording, release=(1, 3, 0),
                           runs=runs)
    judge.open("A", T0 - 0.001, started)
    feeder = Feeder(judge)
    for event in events:
        feeder.observe("A", event)
    feeder.hand_over()
    end = events[-1].ts + 0.5 if events else T0
    if ending is not None:
        judge.close("A", end, ending)
    judge.finish(end + 5.0)
    return judge


def verdicts(judge: monitors.Judge):
    return ([violation.as_dict() for violation in judge.violations], sorted(judge.not_judged.items()), judge.failures)


GOOD = (1, False, "t")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mostly, mostly, steps, endings, st.booleans())
# FINs nsqd refuses before SUB, past the TLS policy (a NOP let pass)
@example(True, False, [("nop",), ("gap", 6.0), ("nop",), ("fins", 3, 0, GOOD, "good")], BROKER, True)
# FINs sent before the SUB's OK, when a TLS policy may still refuse them
@example(True, False, [("sub",), ("fins", 3, 0, GOOD, "good"), ("ok",), ("e_tls",)], None, True)
@example(True, True, [("fins", 3, 0, GOOD, "wide"), ("e_invalid_id",)], None, True)  # IDs not shown as sent
@example(True, True, [("fins", 3, 0, GOOD, "short")], BROKER, True)  # IDs nsqd refuses
@example(True, True, [("fins", 2, 0, (0, False, None), "good")], BROKER, True)  # lines without the ID's parameter
@example(True, True, [("fins", 5, 0, GOOD, "good"), ("fin_failed", 2, "misworded")], None, True)  # C-08, evidence
# FINs let pass in silence before their E_FIN_FAILED, which then answers none
@example(True, True, [("fins", 3, 0, GOOD, "good"), ("gap", 6.0), ("rdy",), ("fin_failed", 1, "worded")], None, True)
# FINs before CLS, wrongly answered after it
@example(True, True, [("fins", 3, 0, GOOD, "good"), ("cls",), ("e_invalid",)], None, True)
def test_runs_are_answered_as_their_events_one_by_one(started, subscribed, plan, ending, wording):
    events = traffic(started, subscribed, plan)
    assert verdicts(judged(started, events, ending, True, wording)) == \
        verdicts(judged(started, events, ending, False, wording))


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps, endings)
def test_too_many_awaiting_is_let_go_as_one_by_one(plan, ending):
    """MOST_PENDING reached within a run, or before it."""
    most = answers.MOST_PENDING
    answers.MOST_PENDING = 6
    try:
        events = traffic(True, True, plan)
        assert verdicts(judged(True, events, ending, True, True)) == verdicts(judged(True, events, ending, False,
                                                                                     True))
    finally:
        answers.MOST_PENDING = most


def test_a_fins_wrong_answer_inside_a_run_is_found():
    """The runs above reach the verdicts that matter: an E_FIN_FAILED misworded for a FIN amid a run (C-08)."""
    events = traffic(True, True, [("fins", 5, 0, GOOD, "good"), ("fin_failed", 2, "misworded")])
    judge = judged(True, events, None, True, True)
    assert [(v.item, v.connection) for v in judge.violations] == [("C-08", "A")]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["FIN", "REQ", "TOUCH"]), st.text(string.printable, min_size=16, max_size=16),
       st.text(string.printable, min_size=16, max_size=16), st.sampled_from(["", " failed ", " failed", " Failed "]),
       st.text(max_size=5))
def test_a_failure_naming_the_id_is_read_as_its_pattern_reads_it(verb, msg_id, other, middle, rest):
    """P-FIN-04, P-REQ-06, P-TOUCH-03: E_<VERB>_FAILED's description, read by the beginning that names the ID (a
    run's FINs answered one by one), fits where the pattern fits, for the ID or another."""
    session = Session(state=SUBSCRIBED, tls_possible=False)
    expected = session.expect(Observed(T0, COMMAND, verb, msg_id=msg_id, number=0 if verb == "REQ" else None))
    [failed] = [answer for answer in expected.answers if answer.begins is not None]
    for named in (msg_id, other):
        text = f"{verb} {named}{middle}{rest}"
        event = Observed(T0, ERROR, failed.name, text)
        assert failed.worded(event) == (re.fullmatch(failed.text, text, re.DOTALL) is not None)
