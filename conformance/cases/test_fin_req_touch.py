"""FIN, REQ, TOUCH (P-FIN-01, P-FIN-02, P-FIN-03, P-FIN-04, P-FIN-05, P-FIN-06, P-REQ-01, P-REQ-02, P-REQ-03, P-REQ-04,
P-REQ-05, P-REQ-06, P-REQ-07, P-TOUCH-01, P-TOUCH-02, P-TOUCH-03, P-TOUCH-04, D-20, D-21, D-22, D-23 in
conformance/spec/)."""

import time

import pytest

from nsq_protocol import wire

requirement = pytest.mark.requirement
UNKNOWN_ID = "0123456789abcdef"


def one_in_flight(nsq, topic, body=b"m", fields=None):
    conn = nsq.connect()
    if fields:
        conn.identify(fields)
    conn.subscribe(topic, "c", ready=1)
    conn.publish(topic, body)
    return conn, conn.expect_message(body, attempts=1)


@requirement("NSQ-FIN-001")
@pytest.mark.parametrize("line, verb", [(f"FIN {UNKNOWN_ID}", "FIN"), (f"REQ {UNKNOWN_ID} 0", "REQ"),
                                        (f"TOUCH {UNKNOWN_ID}", "TOUCH")], ids=["FIN", "REQ", "TOUCH"])
def test_settlement_before_sub_is_fatal(nsq, line, verb):
    """(P-FIN-01, P-REQ-01, P-TOUCH-01; rec-0145, rec-0151, rec-0158)"""
    conn = nsq.connect()
    conn.send(line.encode() + b"\n")
    conn.expect_error("E_INVALID", f"cannot {verb} in current state")


def invalid_id_text(nsq) -> str:
    """nsqd's text for a message ID that is not 16 bytes: v1.3.0 lower-cased it (C-34, C-35)."""
    return "invalid message ID" if nsq.has("C-34") else "Invalid Message ID"


BAD_ID = None  # a parameter's text: the version's invalid_id_text


@requirement("NSQ-FIN-002")
@pytest.mark.parametrize("line, text", [
    ("FIN", "FIN insufficient number of params"), (f"REQ {UNKNOWN_ID}", "REQ insufficient number of params"),
    ("REQ 0123 0", BAD_ID), ("TOUCH", "TOUCH insufficient number of params"),
    ("TOUCH 0123", BAD_ID), ("FIN 0123456789abcdef0", BAD_ID)],
    ids=["fin-no-id", "req-no-timeout", "req-short-id", "touch-no-id", "touch-short-id", "fin-17-bytes"])
def test_malformed_settlement_is_fatal(nsq, line, text):
    """(P-FIN-02, P-FIN-03, P-REQ-02, P-REQ-03, P-TOUCH-02, C-34, C-35; rec-0146, rec-0152, rec-0153, rec-0159,
    rec-0160)"""
    conn = nsq.connect()
    conn.subscribe(nsq.topic(), "c")
    conn.send(line.encode() + b"\n")
    conn.expect_error("E_INVALID", invalid_id_text(nsq) if text is BAD_ID else text)


@requirement("NSQ-FIN-003")
def test_non_hex_id_reaches_the_lookup(nsq):
    """16 bytes that are not hex pass the length check: non-fatal 'not in flight' (P-FIN-03, X-14; rec-0147)."""
    conn = nsq.connect()
    conn.subscribe(nsq.topic(), "c")
    conn.send(b"FIN zzzzzzzzzzzzzzzz\n")
    conn.expect_error("E_FIN_FAILED", "FIN zzzzzzzzzzzzzzzz failed ID not in flight", fatal=False)


@requirement("NSQ-FIN-003")
def test_fin_is_silent_and_only_once(nsq):
    """FIN succeeds with no response; a second FIN of the same ID is 'not in flight' (P-FIN-06; rec-0149)."""
    conn, message = one_in_flight(nsq, nsq.topic())
    message_id = message.id_text
    conn.command("FIN", message_id)
    conn.expect_silence(0.3, what="FIN has no response (P-FIN-06)")
    conn.command("FIN", message_id)
    conn.expect_error("E_FIN_FAILED", f"FIN {message_id} failed ID not in flight", fatal=False)


@requirement("NSQ-FIN-004")
@pytest.mark.parametrize("line, verb", [("FIN %s", "FIN"), ("REQ %s 0", "REQ"), ("TOUCH %s", "TOUCH")],
                         ids=["FIN", "REQ", "TOUCH"])
def test_settling_another_clients_message(nsq, line, verb):
    """B on the same channel settles A's in-flight message: 'client does not own message', non-fatal;
    A's FIN then works (P-FIN-05, P-REQ-06, P-TOUCH-03, D-10; rec-0148, rec-0155, rec-0161)."""
    topic = nsq.topic()
    owner, message = one_in_flight(nsq, topic, b"mine")
    other = nsq.connect()
    other.subscribe(topic, "c")
    message_id = message.id_text
    other.send((line % message_id).encode() + b"\n")
    other.expect_error(f"E_{verb}_FAILED", f"{verb} {message_id} failed client does not own message",
                       fatal=False)
    owner.command("FIN", message_id)
    owner.expect_silence(0.3)


@requirement("NSQ-FIN-004")
def test_fin_from_another_channel(nsq):
    """(D-10; rec-0150)"""
    topic = nsq.topic()
    owner, message = one_in_flight(nsq, topic, b"x")
    other = nsq.connect()
    other.subscribe(topic, "c2")
    message_id = message.id_text
    other.command("FIN", message_id)
    other.expect_error("E_FIN_FAILED", f"FIN {message_id} failed ID not in flight", fatal=False)


@requirement("NSQ-REQ-001")
def test_req_with_empty_timeout_is_immediate(nsq):
    """'REQ <id> ' (P-REQ-04; rec-0154)"""
    conn, message = one_in_flight(nsq, nsq.topic(), b"r")
    conn.send(b"REQ " + message.message_id + b" \n")
    again = conn.expect_message(b"r", attempts=2, timeout=1.0)
    nsq.verify.equal("same ID", message.message_id, again.message_id)


@requirement("NSQ-REQ-001")
def test_req_zero_goes_to_the_tail(nsq):
    """Two messages, REQ 0 the first: 'second' comes next, then 'first' with attempts 2 (D-20; rec-0156)."""
    topic = nsq.topic()
    conn = nsq.connect()
    conn.send(wire.encode_command("PUB", topic, body=b"first") + wire.encode_command("PUB", topic, body=b"second"))
    conn.expect_response(b"OK")
    conn.expect_response(b"OK")
    conn.subscribe(topic, "c", ready=1)
    first = conn.expect_message(b"first", attempts=1)
    conn.command("REQ", first.id_text, 0)
    second = conn.expect_message(b"second", attempts=1)
    conn.command("FIN", second.id_text)
    again = conn.expect_message(b"first", attempts=2)
    nsq.verify.equal("same ID and timestamp", (first.message_id, first.timestamp),
                     (again.message_id, again.timestamp))


@pytest.mark.long_wait(6)
@requirement("NSQ-REQ-002", "NSQ-HTTP-008")
def test_req_with_delay_defers(nsq):
    """REQ 1000: deferred_count 1, redelivered with attempts 2 after >= 1 s (D-21; rec-0157 observed ~1.0 s)."""
    topic = nsq.topic()
    nsq.fresh_channel(topic, "c")
    conn, message = one_in_flight(nsq, topic, b"later")
    conn.command("REQ", message.id_text, 1000)
    start = time.monotonic()
    conn.expect_silence(0.2)
    nsq.until(lambda: (nsq.http.channel_stats(topic, "c") or {}).get("deferred_count") == 1, 0.5,
              "the requeued message is deferred")
    channel = nsq.http.channel_stats(topic, "c")
    nsq.verify.equal("(in_flight_count, deferred_count) after REQ 1000", (0, 1),
                     (channel["in_flight_count"], channel["deferred_count"]))
    conn.expect_message(b"later", attempts=2, timeout=5)
    nsq.within("REQ 1000 redelivery", nsq.elapsed_since(start), 0.95, 2.6)


@requirement("NSQ-REQ-003")
def test_req_above_max_is_clamped(nsq):
    """REQ 2 x max-req-timeout is accepted silently. With a short max (nsqd-tight: 5 s) the redelivery
    is timed: after ~max, not 2 x max (P-REQ-05, D-23; rec-0242 observed 4.7 s after the stats call). Before 1.1.0
    it is a fatal E_INVALID naming the range in nanoseconds (P-REQ-08)."""
    maximum = nsq.limits["max_req_timeout_ms"] / 1000
    topic = nsq.topic()
    timed = maximum <= 10 and nsq.has("P-REQ-05")
    if timed:
        nsq.fresh_channel(topic, "c")
    conn, message = one_in_flight(nsq, topic, b"clamp")
    asked_ms = int(maximum * 2000)
    conn.command("REQ", message.id_text, asked_ms)
    if not nsq.has("P-REQ-05"):
        conn.expect_error("E_INVALID", f"REQ timeout {asked_ms * 1_000_000} out of range "
                                       f"0-{nsq.limits['max_req_timeout_ms'] * 1_000_000}")
        return
    start = time.monotonic()
    if not timed:
        conn.expect_silence(1.0, what="REQ above the max is accepted silently and deferred (P-REQ-05)")
        return
    conn.expect_message(b"clamp", attempts=2, timeout=maximum + 6)
    nsq.within("clamped REQ redelivery", nsq.elapsed_since(start), maximum - 0.05, maximum + 2.5)


@pytest.mark.long_wait(8)
@requirement("NSQ-TOUCH-001")
def test_touch_extends_the_timeout(nsq):
    """msg_timeout 2000, TOUCH at 1.5 s, nothing redelivered by 3 s, FIN then succeeds (P-TOUCH-04; rec-0162)."""
    topic = nsq.topic()
    nsq.fresh_channel(topic, "c")
    conn, message = one_in_flight(nsq, topic, b"touch", {"msg_timeout": 2000})
    nsq.wait(1.5, "three quarters of msg_timeout")
    conn.command("TOUCH", message.id_text)
    conn.expect_silence(1.5, what="no timeout: TOUCH reset the deadline")
    conn.command("FIN", message.id_text)
    conn.expect_silence(0.3, what="FIN of the touched message succeeds")


@requirement("NSQ-TOUCH-001")
def test_touch_cannot_pass_max_msg_timeout(nsq):
    """msg_timeout 2000, TOUCH every second: still redelivered ~max-msg-timeout after delivery
    (D-13; rec-0243 with max 5 s). Needs a profile whose max-msg-timeout is <= 10 s."""
    maximum = nsq.limits["max_msg_timeout_ms"] / 1000
    if maximum > 10:
        pytest.skip(f"max-msg-timeout {maximum:g} s is too long to observe; run with --profile nsqd-tight")
    topic = nsq.topic()
    nsq.fresh_channel(topic, "c")
    conn, message = one_in_flight(nsq, topic, b"cap", {"msg_timeout": 2000})
    delivered = time.monotonic()
    while nsq.elapsed_since(delivered) < maximum - 1:
        nsq.wait(1.0, "then TOUCH again")
        conn.command("TOUCH", message.id_text)
    conn.expect_message(b"cap", attempts=2, timeout=6)
    nsq.within("redelivery despite TOUCHes, measured from delivery", nsq.elapsed_since(delivered),
               maximum - 0.05, maximum + 2.5)
