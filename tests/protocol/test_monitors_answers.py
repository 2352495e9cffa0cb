"""nsqd's answer to each command in each state (AnswersAsNsqd, expected.py): the states after IDENTIFY and CLS, the
line's shape (CRLF, parameters beyond a command's own), malformed FIN, REQ and TOUCH, AUTH's line and body, SUB's
order of checks with auth on, RDY's count read as nsqd reads it against the --max-rdy-count an answer showed."""

from __future__ import annotations

import json

from nsq_protocol import monitors, wire
from nsq_protocol.monitors import BROKER
from nsq_protocol.monitors.answers import AnswersAsNsqd
from tests.protocol.test_monitors import ID1, T0, Traffic, consumer

CLOSE_WAIT = b"CLOSE_WAIT"


def answers() -> Traffic:
    traffic = Traffic()
    traffic.judge = monitors.Judge([AnswersAsNsqd()], timing=True, http_seen=True, release=(1, 3, 0))
    return traffic.connect()


def line(traffic: Traffic, at: float, raw: bytes, body: bytes | None = None) -> Traffic:
    """One command as the client wrote it, read by the suite's decoder (its CRLF and parameters as sent)."""
    data = wire.MAGIC_V2 + raw + (b"" if body is None else len(body).to_bytes(4, "big") + body)
    [command] = wire.CommandDecoder().feed(data)
    traffic.judge.observe("A", monitors.from_command(T0 + at, command))
    return traffic


def subscribed() -> Traffic:
    return answers().send(0.0, b"SUB", "t", "c").ok(0.01)


def closing() -> Traffic:
    return subscribed().send(0.1, b"CLS").receive(0.11, wire.FRAME_RESPONSE, CLOSE_WAIT)


def identified(max_rdy_count: int = 2500) -> Traffic:
    answer = {"max_rdy_count": max_rdy_count, "auth_required": False}
    traffic = answers().identify(0.0, {"feature_negotiation": True})
    return traffic.receive(0.01, wire.FRAME_RESPONSE, json.dumps(answer).encode()).send(0.02, b"SUB", "t", "c").ok(0.03)


def not_judged(traffic: Traffic, item: str) -> bool:
    return any(key[0] == item for key in traffic.judge.not_judged)


# ---- the states ------------------------------------------------------------------------------------------

def test_identify_repeated_before_sub_is_answered_and_sub_still_taken_p_id_02():
    twice = answers().identify(0.0, {}).ok(0.01).identify(0.02, {}).ok(0.03)
    assert twice.send(0.04, b"SUB", "t", "c").ok(0.05).violations(0.1) == []
    refused = answers().identify(0.0, {}).ok(0.01).identify(0.02, {})
    assert refused.error(0.03, b"E_INVALID cannot IDENTIFY in current state").close(0.04, BROKER).violations(0.1) == [
        ("P-ID-02", BROKER)]
    left = answers().identify(0.0, {}).ok(0.01).send(0.02, b"SUB", "t", "c")
    assert left.error(0.03, b"E_INVALID cannot SUB in current state").close(0.04, BROKER).violations(0.1) == [
        ("P-ID-02", BROKER)]


def test_pub_and_mpub_work_in_every_state_p_pub_01_p_mpub_01():
    assert subscribed().send(0.1, b"PUB", "t", body=b"x").ok(0.11).violations(0.2) == []
    refused = subscribed().send(0.1, b"PUB", "t", body=b"x").error(0.11, b"E_INVALID cannot PUB in current state")
    assert refused.close(0.12, BROKER).violations(0.2) == [("P-PUB-01", BROKER)]
    batch = wire.mpub_body([b"a", b"b"])
    refused = subscribed().send(0.1, b"MPUB", "t", body=batch).error(0.11, b"E_INVALID cannot MPUB in current state")
    assert refused.close(0.12, BROKER).violations(0.2) == [("P-MPUB-01", BROKER)]
    assert answers().send(0.0, b"MPUB", "t", body=batch).ok(0.01).violations(0.1) == []


def test_after_cls_publishing_and_settling_still_work_p_cls_03():
    after = closing().send(0.2, b"PUB", "t", body=b"x").ok(0.21).send(0.3, b"NOP").send(0.4, b"RDY", 5)
    assert after.send(0.5, b"DPUB", "t", 10, body=b"x").ok(0.51).violations(1.0) == []
    refused = closing().send(0.2, b"PUB", "t", body=b"x").error(0.21, b"E_INVALID cannot PUB in current state")
    assert refused.close(0.22, BROKER).violations(0.3) == [("P-CLS-03", BROKER)]
    refused = closing().send(0.2, b"FIN", ID1.decode()).error(0.21, b"E_INVALID cannot FIN in current state")
    assert refused.close(0.22, BROKER).violations(0.3) == [("P-CLS-03", BROKER)]
    dropped = closing().send(0.2, b"NOP").error(0.21, b"E_INVALID NOP after CLS")
    assert dropped.close(0.22, BROKER).violations(0.3) == [("P-CLS-03", BROKER)]


# ---- the line ------------------------------------------------------------------------------------------------

def test_a_crlf_line_is_answered_as_its_lf_form_c_14():
    assert line(answers(), 0.0, b"PUB t\r\n", b"x").ok(0.01).violations(0.1) == []
    kept = line(answers(), 0.0, b"PUB t\r\n", b"x").error(0.01, b'E_BAD_TOPIC PUB topic name "t\\r" is not valid')
    assert kept.close(0.02, BROKER).violations(0.1) == [("C-14", BROKER)]
    nop = line(answers(), 0.0, b"NOP\r\n").error(0.01, b"E_INVALID invalid command NOP\r")
    assert nop.close(0.02, BROKER).violations(0.1) == [("C-14", BROKER)]
    capture = answers().send(0.0, b"NOP")
    capture.judge.observe("A", monitors.Observed(T0, monitors.events.COMMAND, "NOP"))  # a capture's row: no shape
    assert not_judged(capture, "C-14") is False, "the suite's event shows the shape"
    decoded = answers()
    decoded.judge.observe("A", monitors.Observed(T0, monitors.events.COMMAND, "NOP"))
    assert not_judged(decoded, "C-14") and not_judged(decoded, "C-17")


def test_parameters_beyond_a_commands_own_are_ignored_c_17():
    assert line(subscribed(), 0.1, b"NOP x y\n").violations(0.2) == []
    extra = line(answers(), 0.0, b"SUB t c extra\n").ok(0.01)
    assert extra.violations(0.1) == []
    refused = line(answers(), 0.0, b"SUB t c extra\n").error(0.01, b"E_INVALID SUB invalid number of parameters")
    assert refused.close(0.02, BROKER).violations(0.1) == [("C-17", BROKER)]


def test_auth_with_a_parameter_is_refused_p_auth_02():
    refused = line(answers(), 0.0, b"AUTH x\n", b"secret").error(0.01, b"E_INVALID AUTH invalid number of parameters")
    assert refused.close(0.02, BROKER).violations(0.1) == []
    taken = line(answers(), 0.0, b"AUTH x\n", b"secret").error(0.01, b"E_AUTH_DISABLED AUTH disabled")
    assert taken.close(0.02, BROKER).violations(0.1) == [("P-AUTH-02", BROKER)]
    capture = answers()
    capture.judge.observe("A", monitors.Observed(T0, monitors.events.COMMAND, "AUTH"))
    assert not_judged(capture, "P-AUTH-02")


def test_auth_with_an_empty_body_is_refused_for_its_size_p_auth_03():
    empty = line(answers(), 0.0, b"AUTH\n", b"").error(0.01, b"E_BAD_BODY AUTH invalid body size 0")
    assert empty.close(0.02, BROKER).violations(0.1) == []
    asked = line(answers(), 0.0, b"AUTH\n", b"").error(0.01, b"E_AUTH_DISABLED AUTH disabled")
    assert asked.close(0.02, BROKER).violations(0.1) == [("P-AUTH-03", BROKER)]
    capture = answers()
    capture.judge.observe("A", monitors.Observed(T0, monitors.events.COMMAND, "AUTH", params=0))
    assert not_judged(capture, "P-AUTH-03")


# ---- malformed settles, SUB's order, RDY's count, REQ's clamp -------------------------------------------------

def test_a_malformed_fin_req_or_touch_is_a_fatal_e_invalid_c_24():
    short = line(subscribed(), 0.1, b"FIN abc\n").error(0.11, b"E_INVALID invalid message ID")
    assert short.close(0.12, BROKER).violations(0.2) == []
    non_fatal = line(subscribed(), 0.1, b"FIN abc\n").error(0.11, b"E_FIN_FAILED FIN abc failed ID not in flight")
    assert non_fatal.violations(0.2) == [("C-24", BROKER)]
    bare = line(subscribed(), 0.1, b"REQ 0000000000000001\n").error(0.11, b"E_REQ_FAILED REQ failed")
    assert bare.violations(0.2) == [("C-24", BROKER)]
    unparsed = line(subscribed(), 0.1, b"REQ 0000000000000001 x\n")
    assert unparsed.error(0.11, b"E_INVALID REQ could not parse timeout x").close(0.12, BROKER).violations(0.2) == []


def test_sub_names_are_checked_before_the_permission_p_sub_05():
    traffic = answers().identify(0.0, {"feature_negotiation": True})
    traffic.receive(0.01, wire.FRAME_RESPONSE, json.dumps({"auth_required": True, "max_rdy_count": 2500}).encode())
    early = traffic.send(0.02, b"SUB", "bad!", "c").error(0.03, b"E_AUTH_FIRST AUTH required before SUB")
    assert early.close(0.04, BROKER).violations(0.1) == [("P-SUB-05", BROKER)]
    named = answers().send(0.0, b"SUB", "bad!", "c").error(0.01, b'E_BAD_TOPIC SUB topic name "bad!" is not valid')
    assert named.close(0.02, BROKER).violations(0.1) == []


def test_rdy_alone_is_1_and_rdy_empty_is_0_p_rdy_05():
    assert line(identified(), 0.1, b"RDY\n").violations(0.2) == []
    assert line(identified(), 0.1, b"RDY \n").violations(0.2) == []
    refused = line(identified(), 0.1, b"RDY \n").error(0.11, b"E_INVALID RDY could not parse count ")
    assert refused.close(0.12, BROKER).violations(0.2) == [("P-RDY-05", BROKER)]
    zero = line(identified(max_rdy_count=0), 0.1, b"RDY\n").error(0.11, b"E_INVALID RDY count 1 out of range 0-0")
    assert zero.close(0.12, BROKER).violations(0.2) == [], "1 is above a --max-rdy-count of 0"


def test_rdy_counts_past_64_bits_wrap_p_rdy_06():
    minus_one = line(identified(), 0.1, b"RDY 18446744073709551615\n")
    assert minus_one.error(0.11, b"E_INVALID RDY count -1 out of range 0-2500").close(0.12, BROKER).violations(
        0.2) == []
    wrapped = line(identified(), 0.1, b"RDY 18446744073709551616\n")
    assert wrapped.violations(0.2) == [], "2^64 reads as 0"
    refused = line(identified(), 0.1, b"RDY 18446744073709551616\n")
    assert refused.error(0.11, b"E_INVALID RDY could not parse count 18446744073709551616").close(
        0.12, BROKER).violations(0.2) == [("P-RDY-06", BROKER)]
    unknown = line(subscribed(), 0.1, b"RDY 3000\n")
    assert unknown.violations(0.2) == [] and not_judged(unknown, "P-RDY-04")
    beyond = line(identified(), 0.1, b"RDY 3000\n")
    assert beyond.close(2.0, monitors.CLIENT).violations(2.0) == [("P-RDY-04", BROKER)]


def test_a_req_timeout_above_the_maximum_is_lowered_never_refused_p_req_05():
    assert line(subscribed(), 0.1, b"REQ 0000000000000001 99999999\n").violations(0.2) == []
    refused = line(subscribed(), 0.1, b"REQ 0000000000000001 7200000\n")
    refused.error(0.11, b"E_INVALID REQ timeout 7200000000000 out of range 0-3600000000000")
    assert refused.close(0.12, BROKER).violations(0.2) == [("P-REQ-05", BROKER)]


def test_a_req_delay_above_the_maximum_defers_for_the_maximum_d_23():
    def requeued(shown: bool) -> Traffic:
        traffic = consumer(timeout_ms=60_000)
        if shown:  # on a publisher's connection, which the fatal error ends
            traffic.connect("B", 0.03).send(0.03, b"DPUB", "t", 9000, body=b"x", conn="B")
            traffic.error(0.04, b"E_INVALID DPUB timeout 9000 out of range 0-500", conn="B").close(0.05, BROKER, "B")
        return traffic.message(0.1, ID1).send(0.2, b"REQ", ID1.decode(), 1000)
    assert requeued(shown=True).message(0.75, ID1, attempts=2).violations(1.0) == []
    assert requeued(shown=True).message(0.4, ID1, attempts=2).violations(1.0) == [("D-23", BROKER)]
    # above nsqd's default hour, with no range shown: the broker's maximum is not assumed
    huge = consumer(timeout_ms=60_000).message(0.1, ID1).send(0.2, b"REQ", ID1.decode(), 7_200_000)
    assert huge.message(0.4, ID1, attempts=2).violations(1.0) == []
    assert not_judged(huge, "D-23")
