"""NSQC-ERR: the three non-fatal errors keep the connection (C-23); a fatal one is followed by a reconnect, spaced and
no sooner than the library's documented delay.

E_FIN_FAILED and E_REQ_FAILED reach the client in one segment with the next message: a client reading a busy
connection gets them so, and must handle both. E_TOUCH_FAILED comes alone, while its message is still in flight."""
import asyncio

import pytest

from conformance.clients import contract
from conformance.clients.judge import Unsupported, check
from nsq_protocol import wire
from nsq_protocol.monitors.client_errors import EARLY_SHARE


async def _still_working(run, broker, connection, what: str) -> None:
    """After a non-fatal error: the same connection handles the next message, and no other connection opens."""
    message_id = await connection.send_message(contract.instruction(contract.FINISH, tag=2))
    connection.release()
    fin = await connection.expect(b"FIN", timeout=5.0, why=f"after {what}, the next message is finished")
    check(fin.params == (message_id,), f"the FIN after {what}", f"FIN {message_id.decode()}", fin.describe())
    check(not connection.closed.is_set() and len(broker.connections) == 1, f"the connection after {what}",
          "kept open, the only one", f"closed: {connection.closed.is_set()}, connections: {len(broker.connections)}")


async def _answered_with_error(run, instruction: bytes, command: bytes, error: bytes) -> None:
    """The first message's FIN or REQ answered with ``error``, which reaches the client in one segment with the
    next message; then that message must be handled on the same connection."""
    broker = await run.nsqd()
    _, connection = await run.subscribed(broker)
    connection.overrides[command] = (error, False)
    await connection.send_message(instruction)
    connection.hold()
    await connection.expect(command, timeout=5.0, why=f"the first message is answered with {command.decode()}")
    await _still_working(run, broker, connection, error.split(b" ")[0].decode())


@pytest.mark.nsqc("NSQC-ERR-001")
async def test_fin_failed_is_not_fatal(run):
    await _answered_with_error(run, contract.instruction(contract.FINISH, tag=1), b"FIN",
                               b"E_FIN_FAILED FIN %s failed ID not in flight")


@pytest.mark.nsqc("NSQC-ERR-002")
async def test_req_failed_is_not_fatal(run):
    await _answered_with_error(run, contract.instruction(contract.REQUEUE, delay_ms=0, tag=1), b"REQ",
                               b"E_REQ_FAILED REQ %s failed ID not in flight")


@pytest.mark.nsqc("NSQC-ERR-003")
async def test_touch_failed_is_not_fatal(run):
    run.driver.require("touch")
    broker = await run.nsqd()
    _, connection = await run.subscribed(broker)
    connection.overrides[b"TOUCH"] = (b"E_TOUCH_FAILED TOUCH %s failed ID not in flight", False)
    message_id = await connection.send_message(contract.instruction(contract.TOUCH, times=1, every_ms=100, tag=1))
    await connection.expect(b"TOUCH", timeout=5.0, why="the first message is touched")
    fin = await connection.expect(b"FIN", timeout=5.0, why="after E_TOUCH_FAILED, the touched message is finished")
    check(fin.params == (message_id,), "the FIN of the touched message", f"FIN {message_id.decode()}", fin.describe())
    await _still_working(run, broker, connection, "E_TOUCH_FAILED")


@pytest.mark.nsqc("NSQC-ERR-004")
async def test_reconnect_after_fatal_error(run):
    broker = await run.nsqd()
    _, connection = await run.subscribed(broker)
    connection.send(wire.FRAME_ERROR, b"E_INVALID cannot SUB in current state")  # C-23: the frame, then the close
    await connection.close()
    again = await broker.next_connection(timeout=20.0, why="the consumer reconnects after a fatal error")
    await again.subscribed(timeout=5.0)
    check(again.magic is not None and again.commands()[0].name == b"IDENTIFY", "the new connection's start",
          "magic, IDENTIFY, SUB, RDY", " | ".join(command.describe() for command in again.commands()))


RECONNECTS_WATCHED = 8.0  # seconds during which every reconnect is closed at once
MAX_RECONNECTS = 16  # in that time: one every 0.5 s on average; a client without a backoff makes hundreds


@pytest.mark.nsqc("NSQC-ERR-005")
async def test_reconnects_are_spaced(run):
    broker = await run.nsqd()
    _, connection = await run.subscribed(broker)
    broker.refusing = True  # as an nsqd that restarts: each new connection is accepted and closed at once
    connection.send(wire.FRAME_ERROR, b"E_INVALID cannot SUB in current state")
    await connection.close()
    await asyncio.sleep(RECONNECTS_WATCHED)
    attempts = broker.refused
    gaps = [f"{(later - earlier) * 1000:.0f} ms" for earlier, later in zip(attempts, attempts[1:11], strict=False)]
    check(len(attempts) <= MAX_RECONNECTS, f"reconnect attempts in the {RECONNECTS_WATCHED:g} s after a fatal error, "
          "each closed at once", f"at most {MAX_RECONNECTS} (spaced by a backoff)",
          f"{len(attempts)}, the first gaps {', '.join(gaps)}")


RECONNECT_WATCHED = 10.0  # seconds at most of a library's reconnect delay watched (go-nsq's and nsqjs's are 60 s)


@pytest.mark.nsqc("NSQC-ERR-006")
async def test_reconnect_not_sooner_than_documented(run):
    """After a fatal close, no connection to that nsqd within the reconnect delay the library documents (drivers.toml
    reconnect_delay; 90 % of it, for the clocks), counted from the close, or from the first connection for a library
    that tries on a ticker; a delay longer than 10 s is watched for 10 s."""
    delay = run.driver.reconnect_delay
    if delay is None:
        raise Unsupported(f"{run.driver.library} documents no reconnect delay (it may reconnect at once)")
    broker = await run.nsqd()
    _, connection = await run.subscribed(broker)
    connection.send(wire.FRAME_ERROR, b"E_INVALID cannot SUB in current state")
    await connection.close()
    ticker = delay.get("since") == "connect"
    start = connection.received[0][0] if ticker else connection.closed_at
    window = min(delay["min_ms"] / 1000 * EARLY_SHARE, RECONNECT_WATCHED)
    await asyncio.sleep(max(0.0, start + window - run.transcript.now()))
    early = broker.connections[1:]
    check(not early, f"connections to the nsqd within {window:g} s of {'the first' if ticker else 'the fatal close'} "
          f"({run.driver.library}: reconnect_delay {delay})", "none",
          f"{len(early)}, the first at " + (f"{early[0].received[0][0] - start:.2f} s" if early and early[0].received
                                            else "an unknown time (no command)"))
