"""P-MPUB-04 (AnswersAsNsqd, expected.py): nsqd reads an MPUB's body by its count and sizes and only range-checks
the 4-byte size word before it. A capture's decoder shows the word where it disagrees (Observed.size); the suite's
codec keeps no word, and such an MPUB is judged as any other."""

from __future__ import annotations

from nsq_protocol import monitors, wire
from nsq_protocol.monitors import BROKER, Observed
from nsq_protocol.monitors.events import COMMAND
from tests.protocol.test_monitors import T0
from tests.protocol.test_monitors_answers import answers, line

BODIES = [b"a", b"bc"]


def mpub(size: int | None) -> Observed:
    """An MPUB of BODIES whose size word is ``size`` (None: it agrees, or is not shown)."""
    return Observed(T0 + 0.1, COMMAND, "MPUB", topic="t", number=len(BODIES),
                    bodies=tuple(monitors.body_hash(body) for body in BODIES), params=1, crlf=False, size=size)


def published(size: int | None):
    traffic = answers()
    traffic.judge.observe("A", mpub(size))
    return traffic


def test_an_mpub_whose_size_word_disagrees_is_answered_as_any_other_p_mpub_04():
    assert published(len(wire.mpub_body(BODIES)) + 10).ok(0.2).violations(0.3) == []
    refused = published(len(wire.mpub_body(BODIES)) + 10).error(0.2, b"E_BAD_SIZE MPUB body size 25 is not 15")
    assert refused.close(0.21, BROKER).violations(0.3) == [("P-MPUB-04", BROKER)]
    # too big for --max-body-size, which the traffic does not show: nsqd's refusal names the word
    too_big = published(6_000_000).error(0.2, b"E_BAD_BODY MPUB body too big 6000000 > 5242880")
    assert too_big.close(0.21, BROKER).violations(0.3) == []


def test_a_size_word_of_zero_is_refused_whatever_follows_p_mpub_04():
    refused = published(0).error(0.2, b"E_BAD_BODY MPUB invalid body size 0")
    assert refused.close(0.21, BROKER).violations(0.3) == []
    assert published(0).ok(0.2).violations(0.3) == [("P-MPUB-04", BROKER)]


def test_the_suites_codec_shows_no_size_word_and_its_mpub_is_judged_as_agreeing():
    traffic = line(answers(), 0.1, b"MPUB t\n", wire.mpub_body(BODIES))
    assert traffic.ok(0.2).violations(0.3) == []
    wrong = line(answers(), 0.1, b"MPUB t\n", wire.mpub_body(BODIES)).error(0.2, b"E_BAD_SIZE no")
    assert wrong.close(0.21, BROKER).violations(0.3) == [("P-MPUB-06", BROKER)]
