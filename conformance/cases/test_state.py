"""The state machine, cell by cell (ST-01 in conformance/spec/connection.toml): every command in init, subscribed and
closing."""

import pytest

from conformance.cases.test_cls_state import auth_disabled_text
from nsq_protocol import wire

requirement = pytest.mark.requirement
UNKNOWN_ID = "0123456789abcdef"
STATES = ("init", "subscribed", "closing")
FATAL, SILENT, OK, FAILED, CLOSE_WAIT, AUTH_DISABLED = "fatal", "silent", "ok", "failed", "close_wait", "auth"

# nsqd's state table (NSQ-STATE-002's items) with auth disabled (all shipped profiles but nsqd-auth): AUTH in init is
# E_AUTH_DISABLED (P-AUTH-05).
TABLE = {
    "IDENTIFY": (OK, FATAL, FATAL), "AUTH": (AUTH_DISABLED, FATAL, FATAL), "SUB": (OK, FATAL, FATAL),
    "PUB": (OK, OK, OK), "MPUB": (OK, OK, OK), "DPUB": (OK, OK, OK), "RDY": (FATAL, SILENT, SILENT),
    "FIN": (FATAL, FAILED, FAILED), "REQ": (FATAL, FAILED, FAILED), "TOUCH": (FATAL, FAILED, FAILED),
    "CLS": (FATAL, CLOSE_WAIT, FATAL), "NOP": (SILENT, SILENT, SILENT),
}
CELLS = [(command, state, TABLE[command][index]) for command in TABLE for index, state in enumerate(STATES)]


def command_bytes(command: str, topic: str) -> bytes:
    return {
        "IDENTIFY": wire.encode_command("IDENTIFY", body=b"{}"),
        "AUTH": wire.encode_command("AUTH", body=b"secret"),
        "SUB": wire.encode_command("SUB", topic, "other"),
        "PUB": wire.encode_command("PUB", topic, body=b"x"),
        "MPUB": wire.encode_command("MPUB", topic, body=wire.mpub_body([b"x"])),
        "DPUB": wire.encode_command("DPUB", topic, 100, body=b"x"),
        "RDY": b"RDY 1\n",
        "FIN": f"FIN {UNKNOWN_ID}\n".encode(),
        "REQ": f"REQ {UNKNOWN_ID} 0\n".encode(),
        "TOUCH": f"TOUCH {UNKNOWN_ID}\n".encode(),
        "CLS": b"CLS\n",
        "NOP": b"NOP\n",
    }[command]


@requirement("NSQ-STATE-002")
@pytest.mark.parametrize("command, state, outcome", CELLS, ids=[f"{s}-{c}" for c, s, _ in CELLS])
def test_state_table(nsq, command, state, outcome):
    """One cell of the table: the command in that state is allowed, ignored, a non-fatal *_FAILED or a
    fatal 'cannot <CMD> in current state' (P-ID-01, P-SUB-01, P-RDY-01, P-CLS-01)."""
    if command == "AUTH" and nsq.profile.capabilities["auth"]:
        pytest.skip("the profile says the target has an auth server")  # nsqd-auth: cases/test_auth.py covers AUTH
    topic = nsq.topic()
    conn = nsq.connect()
    if state != "init":
        conn.subscribe(topic, "c")
    if state == "closing":
        conn.command("CLS")
        conn.expect_response(b"CLOSE_WAIT")
    conn.send(command_bytes(command, topic))
    if outcome == OK:
        conn.expect_response(b"OK")
    elif outcome == SILENT:
        conn.expect_silence(0.3, what=f"{command} in state {state} gets no response")
    elif outcome == CLOSE_WAIT:
        conn.expect_response(b"CLOSE_WAIT")
    elif outcome == FAILED:
        conn.expect_error(f"E_{command}_FAILED", f"{command} {UNKNOWN_ID} failed ID not in flight", fatal=False)
    elif outcome == AUTH_DISABLED:
        conn.expect_error("E_AUTH_DISABLED", auth_disabled_text(nsq))
    else:
        conn.expect_error("E_INVALID", f"cannot {command} in current state")
