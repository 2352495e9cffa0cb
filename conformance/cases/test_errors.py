"""Fatal vs non-fatal errors (C-23, C-24, C-25 in conformance/spec/connection.toml)."""

import pytest

from conformance.cases.test_fin_req_touch import invalid_id_text

requirement = pytest.mark.requirement
UNKNOWN_ID = "0123456789abcdef"


@requirement("NSQ-ERR-002", "NSQ-FIN-003")
@pytest.mark.parametrize("verb, line", [("FIN", f"FIN {UNKNOWN_ID}"), ("REQ", f"REQ {UNKNOWN_ID} 0"),
                                        ("TOUCH", f"TOUCH {UNKNOWN_ID}")])
def test_failed_settlement_is_not_fatal(nsq, verb, line):
    """FIN/REQ/TOUCH of an unknown ID: E_<VERB>_FAILED, and the connection still works (C-23; rec-0030..0032)."""
    topic = nsq.topic()
    conn = nsq.connect()
    conn.subscribe(topic, "c")
    conn.send(line.encode() + b"\n")
    conn.expect_error(f"E_{verb}_FAILED", f"{verb} {UNKNOWN_ID} failed ID not in flight", fatal=False)
    conn.publish(topic, b"alive")


@requirement("NSQ-ERR-003", "NSQ-FIN-002")
def test_short_message_id_is_fatal(nsq):
    """FIN with a 15-byte ID: E_INVALID, fatal (C-24; rec-0033)."""
    conn = nsq.connect()
    conn.subscribe(nsq.topic(), "c")
    conn.send(b"FIN 0123456789abcde\n")  # 15 bytes
    conn.expect_error("E_INVALID", invalid_id_text(nsq))


@requirement("NSQ-ERR-003", "NSQ-REQ-003")
def test_negative_req_timeout_is_fatal(nsq):
    """REQ <id> -1: E_INVALID, fatal (C-24, P-REQ-04; rec-0034)."""
    conn = nsq.connect()
    conn.subscribe(nsq.topic(), "c")
    conn.send(f"REQ {UNKNOWN_ID} -1\n".encode())
    conn.expect_error("E_INVALID", "REQ could not parse timeout -1")
