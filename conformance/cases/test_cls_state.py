"""CLS, NOP, AUTH without an auth server, and the state machine (P-CLS-01, P-CLS-02, P-CLS-03, P-NOP-01,
P-AUTH-01, P-AUTH-02, P-AUTH-03, P-AUTH-04, P-AUTH-05, ST-01 in conformance/spec/)."""

import pytest

from nsq_protocol import wire

requirement = pytest.mark.requirement


@requirement("NSQ-CLS-001", "NSQ-STATE-001")
def test_cls_answers_close_wait_and_keeps_socket(nsq):
    """CLS -> CLOSE_WAIT, the socket stays open, /stats state goes 3 -> 4 (P-CLS-02, ST-01; rec-0165)."""
    topic = nsq.topic()
    conn = nsq.connect()
    conn.subscribe(topic, "c")
    if nsq.http.address:
        nsq.verify.soft_equal("client state when subscribed (ST-01)", 3,
                              nsq.http.channel_stats(topic, "c")["clients"][0]["state"])
    conn.command("CLS")
    conn.expect_response(b"CLOSE_WAIT")
    conn.expect_silence(0.5, what="the server does not close after CLS (P-CLS-02)")
    if nsq.http.address:
        nsq.verify.soft_equal("client state after CLS (ST-01)", 4,
                              nsq.http.channel_stats(topic, "c")["clients"][0]["state"])


@requirement("NSQ-CLS-001")
def test_cls_before_sub_is_fatal(nsq):
    """(P-CLS-01; rec-0163)"""
    conn = nsq.connect()
    conn.command("CLS")
    conn.expect_error("E_INVALID", "cannot CLS in current state")


@requirement("NSQ-CLS-001")
def test_second_cls_is_fatal(nsq):
    """(P-CLS-01; rec-0164)"""
    conn = nsq.connect()
    conn.subscribe(nsq.topic(), "c")
    conn.command("CLS")
    conn.expect_response(b"CLOSE_WAIT")
    conn.command("CLS")
    conn.expect_error("E_INVALID", "cannot CLS in current state")


@requirement("NSQ-CLS-002")
def test_settlement_and_publish_after_cls(nsq):
    """After CLS: TOUCH/FIN/REQ of in-flight messages, NOP and PUB work; AUTH is fatal (P-CLS-03; rec-0166)."""
    topic = nsq.topic()
    conn = nsq.connect()
    conn.send(wire.encode_command("SUB", topic, "c") + b"RDY 3\n"
              + wire.encode_command("MPUB", topic, body=wire.mpub_body([b"a", b"b", b"c"])))
    conn.expect_response(b"OK")
    conn.expect_response(b"OK")
    first, second, third = (conn.expect_message(body) for body in (b"a", b"b", b"c"))
    conn.command("CLS")
    conn.expect_response(b"CLOSE_WAIT")
    conn.send(b"TOUCH %s\nFIN %s\nREQ %s 0\n" % (first.message_id, first.message_id, second.message_id))
    conn.send(b"FIN %s\nNOP\n" % third.message_id + wire.encode_command("PUB", topic, body=b"d"))
    conn.expect_response(b"OK")
    conn.expect_silence(0.3, what="no error for settlements after CLS, and no redelivery while closing")
    conn.command("AUTH", body=b"s")
    conn.expect_error("E_INVALID", "cannot AUTH in current state")


@requirement("NSQ-CLS-002", "NSQ-ID-002")
def test_identify_after_cls_is_fatal(nsq):
    """(P-ID-01, P-CLS-03; rec-0047)"""
    conn = nsq.connect()
    conn.subscribe(nsq.topic(), "c")
    conn.command("CLS")
    conn.expect_response(b"CLOSE_WAIT")
    conn.command("IDENTIFY", body=b"{}")
    conn.expect_error("E_INVALID", "cannot IDENTIFY in current state")


@requirement("NSQ-NOP-001")
def test_nop_is_silent_in_every_state(nsq):
    """(P-NOP-01; rec-0167)"""
    topic = nsq.topic()
    conn = nsq.connect()
    conn.send(b"NOP\nNOP a b\n")
    conn.expect_silence(0.3)
    conn.subscribe(topic, "c")
    conn.command("NOP")
    conn.expect_silence(0.3)
    conn.command("CLS")
    conn.expect_response(b"CLOSE_WAIT")
    conn.command("NOP")
    conn.expect_silence(0.3)
    conn.publish(topic, b"x")


def auth_disabled_text(nsq) -> str:
    """nsqd's text for AUTH without an auth server: 1.2.0 lower-cased it (P-AUTH-17, P-AUTH-18)."""
    return "AUTH disabled" if nsq.has("P-AUTH-17") else "AUTH Disabled"


@requirement("NSQ-AUTH-001")
def test_auth_disabled(nsq):
    """AUTH on a server without an auth server: E_AUTH_DISABLED after reading the body (P-AUTH-05; rec-0089)."""
    if nsq.profile.capabilities["auth"]:
        pytest.skip("the profile says the target has an auth server")  # nsqd-auth: cases/test_auth.py covers AUTH
    conn = nsq.connect()
    conn.command("AUTH", body=b"secret")
    conn.expect_error("E_AUTH_DISABLED", auth_disabled_text(nsq))


@requirement("NSQ-AUTH-001")
@pytest.mark.parametrize("data, code, text", [
    (b"AUTH x\n\x00\x00\x00\x01s", "E_INVALID", "AUTH invalid number of parameters"),
    (b"AUTH\n\x00\x00\x00\x00", "E_BAD_BODY", "AUTH invalid body size 0")], ids=["parameter", "size-0"])
def test_auth_malformed(nsq, data, code, text):
    """(P-AUTH-02, P-AUTH-03; rec-0090, rec-0091)"""
    conn = nsq.connect()
    conn.send(data)
    conn.expect_error(code, text)


@requirement("NSQ-AUTH-001")
def test_auth_after_sub_is_fatal(nsq):
    """(P-AUTH-01; rec-0092)"""
    conn = nsq.connect()
    conn.subscribe(nsq.topic(), "c")
    conn.command("AUTH", body=b"s")
    conn.expect_error("E_INVALID", "cannot AUTH in current state")
