"""NSQC-MSG: FIN, REQ and TOUCH as the handler asks, with the message's own id."""
import asyncio

import pytest

from conformance.clients import contract
from conformance.clients.judge import check


def _names(command) -> str:
    return command.describe()


@pytest.mark.nsqc("NSQC-MSG-001")
async def test_finish(run):
    _, connection = await run.subscribed(await run.nsqd())
    message_id = await connection.send_message(contract.instruction(contract.FINISH))
    fin = await connection.expect(b"FIN", b"REQ", timeout=5.0, why="the finished message is answered")
    check(fin.name == b"FIN" and fin.params == (message_id,), "the answer", f"FIN {message_id.decode()}", _names(fin))


@pytest.mark.nsqc("NSQC-MSG-002")
async def test_requeue_with_delay(run):
    _, connection = await run.subscribed(await run.nsqd())
    message_id = await connection.send_message(contract.instruction(contract.REQUEUE, delay_ms=1500))
    req = await connection.expect(b"FIN", b"REQ", timeout=5.0, why="the requeued message is answered")
    check(req.name == b"REQ" and req.params == (message_id, b"1500"), "the answer",
          f"REQ {message_id.decode()} 1500", _names(req))


@pytest.mark.nsqc("NSQC-MSG-003")
async def test_touch_then_finish(run):
    run.driver.require("touch")
    _, connection = await run.subscribed(await run.nsqd())
    message_id = await connection.send_message(contract.instruction(contract.TOUCH, times=2, every_ms=200))
    answers = [await connection.expect(b"TOUCH", b"FIN", b"REQ", timeout=3.0, why=f"answer {n} of 3 (2 TOUCH, FIN)")
               for n in (1, 2, 3)]
    expected = [b"TOUCH %s" % message_id] * 2 + [b"FIN %s" % message_id]
    actual = [b" ".join((command.name, *command.params)) for command in answers]
    check(actual == expected, "the answers to a message touched twice", " | ".join(e.decode() for e in expected),
          " | ".join(a.decode() for a in actual))


@pytest.mark.nsqc("NSQC-MSG-004")
async def test_failed_handler_requeues(run):
    _, connection = await run.subscribed(await run.nsqd())
    message_id = await connection.send_message(contract.instruction(contract.FAIL))
    answer = await connection.expect(b"FIN", b"REQ", timeout=5.0, why="the failed message is answered")
    check(answer.name == b"REQ" and answer.params[:1] == (message_id,), "the answer to a failed handler",
          f"REQ {message_id.decode()} <delay>", _names(answer))


@pytest.mark.nsqc("NSQC-MSG-005")
async def test_over_max_attempts_finished_unhandled(run):
    run.driver.require("max_attempts")
    process, connection = await run.subscribed(await run.nsqd(), max_attempts=3)
    message_id = await connection.send_message(contract.instruction(contract.REQUEUE, delay_ms=0), attempts=4)
    answer = await connection.expect(b"FIN", b"REQ", timeout=5.0, why="the message over max_attempts is answered")
    await asyncio.sleep(0.3)  # the driver's report of a handled message would be out by now
    handled = [report for report in process.of("message") if report["id"] == message_id.decode()]
    check(not handled, "the handler (max_attempts 3, a message of attempt 4)", "not called",
          f"called: {handled[0].fields}" if handled else "")
    check(answer.name == b"FIN" and answer.params == (message_id,), "the answer", f"FIN {message_id.decode()}",
          _names(answer))


@pytest.mark.nsqc("NSQC-MSG-006")
async def test_failed_handler_requeue_delay_as_documented(run):
    """Attempt 2, so that a delay times the attempts (pynsq, go-nsq) is told apart from a fixed one (nsqjs)."""
    _, connection = await run.subscribed(await run.nsqd())
    message_id = await connection.send_message(contract.instruction(contract.FAIL), attempts=2)
    answer = await connection.expect(b"FIN", b"REQ", timeout=5.0, why="the failed message is answered")
    expected = run.driver.requeue_delay_ms(attempts=2)
    check(answer.name == b"REQ" and answer.params == (message_id, str(expected).encode()),
          f"the REQ of a failed handler, attempt 2 ({run.driver.library}: {run.driver.requeue_delay})",
          f"REQ {message_id.decode()} {expected}", _names(answer))
