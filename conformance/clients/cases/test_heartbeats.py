"""NSQC-HB: heartbeats answered with NOP in time (nsqd closes a connection after two missed ones, C-29)."""
import asyncio
import time

import pytest

from conformance.clients.judge import check
from conformance.clients.session import STARTS_WITHIN_S

ANSWER_WITHIN = 1.0


async def _answers(connection, count: int = 3) -> None:
    for number in range(1, count + 1):
        sent = time.monotonic()
        connection.heartbeat()
        await connection.expect(b"NOP", timeout=ANSWER_WITHIN, why=f"heartbeat {number} of {count} is answered")
        check(time.monotonic() - sent <= ANSWER_WITHIN, f"heartbeat {number}'s NOP", f"<= {ANSWER_WITHIN} s",
              f"{time.monotonic() - sent:.2f} s")
        await asyncio.sleep(0.2)


@pytest.mark.nsqc("NSQC-HB-001")
async def test_consumer_answers_heartbeats(run):
    _, connection = await run.subscribed(await run.nsqd())
    await _answers(connection)


@pytest.mark.nsqc("NSQC-HB-002")
async def test_publisher_answers_heartbeats(run):
    broker = await run.nsqd()
    await run.publisher(broker, [])
    connection = await broker.next_connection(timeout=STARTS_WITHIN_S,
                                              why="the publisher connects before its first PUB")
    await connection.expect(b"IDENTIFY", timeout=5.0, why="the publisher identifies")
    await asyncio.sleep(0.2)
    await _answers(connection)
