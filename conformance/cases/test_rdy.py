"""RDY and flow control (P-RDY-01, P-RDY-02, P-RDY-03, P-RDY-04, P-RDY-05, P-RDY-06, P-RDY-07, D-01, D-02, D-03, D-04,
D-05 in conformance/spec/)."""

import pytest

from nsq_protocol import wire

requirement = pytest.mark.requirement


@requirement("NSQ-RDY-001")
def test_rdy_before_sub_is_fatal(nsq):
    """(P-RDY-02; rec-0136)"""
    conn = nsq.connect()
    conn.command("RDY", 1)
    conn.expect_error("E_INVALID", "cannot RDY in current state")


@requirement("NSQ-RDY-001", "NSQ-CLS-002")
def test_rdy_after_cls_is_ignored(nsq):
    """After CLS, RDY 5 gets no answer and nothing is delivered (P-RDY-01; rec-0135)."""
    topic = nsq.topic()
    conn = nsq.connect()
    conn.subscribe(topic, "c")
    conn.command("CLS")
    conn.expect_response(b"CLOSE_WAIT")
    conn.command("RDY", 5)
    conn.expect_silence(0.3)
    nsq.connect().publish(topic, b"x")
    conn.expect_silence(0.6, what="nothing is delivered after CLS, whatever RDY says")


@requirement("NSQ-RDY-002")
@pytest.mark.parametrize("count", ["-1", "abc", "1.5"])
def test_rdy_unparsable_count(nsq, count):
    """(P-RDY-03; rec-0137..0139)"""
    conn = nsq.connect()
    conn.subscribe(nsq.topic(), "c")
    conn.command("RDY", count)
    conn.expect_error("E_INVALID", f"RDY could not parse count {count}")


@requirement("NSQ-RDY-002")
def test_rdy_above_max(nsq):
    """(P-RDY-04; rec-0140, rec-0240)"""
    maximum = nsq.limits["max_rdy_count"]
    conn = nsq.connect()
    conn.subscribe(nsq.topic(), "c")
    conn.command("RDY", maximum + 1)
    conn.expect_error("E_INVALID", f"RDY count {maximum + 1} out of range 0-{maximum}")


@requirement("NSQ-RDY-002")
def test_rdy_max_delivers(nsq):
    """RDY = max-rdy-count is valid and delivers (P-RDY-04; rec-0240)."""
    topic = nsq.topic()
    conn = nsq.connect()
    conn.subscribe(topic, "c", ready=nsq.limits["max_rdy_count"])
    conn.publish(topic, b"max")
    conn.expect_message(b"max", attempts=1)


@requirement("NSQ-RDY-002")
def test_rdy_uint64_max_prints_as_minus_one(nsq):
    """(P-RDY-06; rec-0143)"""
    maximum = nsq.limits["max_rdy_count"]
    conn = nsq.connect()
    conn.subscribe(nsq.topic(), "c")
    conn.command("RDY", 18446744073709551615)
    conn.expect_error("E_INVALID", f"RDY count -1 out of range 0-{maximum}")


@requirement("NSQ-RDY-003")
def test_rdy_without_parameter_means_one(nsq):
    """'RDY' alone: exactly one of two messages arrives (P-RDY-05; rec-0141)."""
    topic = nsq.topic()
    conn = nsq.connect()
    conn.send(wire.encode_command("PUB", topic, body=b"one") + wire.encode_command("PUB", topic, body=b"two"))
    conn.expect_response(b"OK")
    conn.expect_response(b"OK")
    conn.subscribe(topic, "c")
    conn.send(b"RDY\n")
    conn.expect_message(b"one", attempts=1)
    conn.expect_silence(0.5, what="RDY without a parameter is RDY 1")


@requirement("NSQ-RDY-003")
def test_rdy_with_empty_parameter_means_zero(nsq):
    """'RDY ' (P-RDY-05; rec-0142)"""
    topic = nsq.topic()
    conn = nsq.connect()
    conn.publish(topic, b"one")
    conn.subscribe(topic, "c")
    conn.send(b"RDY \n")
    conn.expect_silence(0.6, what="'RDY ' with an empty parameter is RDY 0")


@requirement("NSQ-RDY-003")
def test_rdy_2_pow_64_wraps_to_zero(nsq):
    """(P-RDY-06; rec-0144)"""
    topic = nsq.topic()
    conn = nsq.connect()
    conn.publish(topic, b"one")
    conn.subscribe(topic, "c")
    conn.command("RDY", 18446744073709551616)
    conn.expect_silence(0.6, what="RDY 2^64 wraps to 0")
    conn.command("RDY", 1)
    conn.expect_message(b"one", attempts=1)


@requirement("NSQ-RDY-004")
def test_rdy_is_a_window(nsq):
    """RDY 1 once; each FIN lets the next of 3 messages through, in any order, without another RDY (D-02;
    rec-0168)."""
    topic = nsq.topic()
    conn = nsq.connect()
    waiting = [b"w1", b"w2", b"w3"]
    conn.command("MPUB", topic, body=wire.mpub_body(waiting))
    conn.expect_response(b"OK")
    conn.subscribe(topic, "c", ready=1)
    while waiting:
        frame = conn.expect_message(attempts=1)
        nsq.verify.that("a message of the MPUB not delivered yet", frame.body in waiting, waiting, frame.body)
        waiting.remove(frame.body)
        conn.expect_silence(0.2, what="no second message while one is in flight at RDY 1")
        conn.command("FIN", frame.id_text)


@requirement("NSQ-RDY-005")
def test_lowering_rdy_below_in_flight(nsq):
    """RDY 2 with 2 in flight, then RDY 1 + FIN: nothing until the second FIN, then one more (D-03; rec-0169)."""
    topic = nsq.topic()
    conn = nsq.connect()
    published = [b"l1", b"l2", b"l3", b"l4"]
    conn.command("MPUB", topic, body=wire.mpub_body(published))
    conn.expect_response(b"OK")
    conn.subscribe(topic, "c", ready=2)
    first, second = conn.expect_messages(2)
    conn.send(b"RDY 1\n" + wire.encode_command("FIN", first.id_text))
    conn.expect_silence(0.5, what="in flight (1) is not below RDY (1)")
    conn.command("FIN", second.id_text)
    third = conn.expect_message(attempts=1)
    nsq.verify.that("one of the two messages not delivered yet (in any order: D-38)",
                    third.body in published and third.body not in (first.body, second.body),
                    [body for body in published if body not in (first.body, second.body)], third.body)
    conn.expect_silence(0.3)


@requirement("NSQ-RDY-005")
def test_rdy_zero_stops_delivery_but_fin_works(nsq):
    """RDY 0 with one in flight: no more messages, and FIN still settles (D-03; rec-0170)."""
    topic = nsq.topic()
    conn = nsq.connect()
    conn.command("MPUB", topic, body=wire.mpub_body([b"z1", b"z2"]))
    conn.expect_response(b"OK")
    conn.subscribe(topic, "c", ready=1)
    frame = conn.expect_message(b"z1")
    conn.command("RDY", 0)
    conn.command("FIN", frame.id_text)
    conn.expect_silence(0.6, what="RDY 0 stops delivery")
    conn.command("RDY", 1)
    conn.expect_message(b"z2")
