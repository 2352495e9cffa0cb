"""NSQC-CLS: a consumer told to stop (SIGTERM to its driver) closes cleanly."""
import asyncio

import pytest

from conformance.clients.judge import check

CLOSE_WAIT_DELAY = 0.3


@pytest.mark.nsqc("NSQC-CLS-001")
async def test_cls_before_close(run):
    process, connection = await run.subscribed(await run.nsqd())
    connection.close_wait_delay = CLOSE_WAIT_DELAY
    stopping = asyncio.create_task(process.stop(timeout=6.0))
    await connection.expect(b"CLS", timeout=5.0, why="the stopping consumer sends CLS")
    sent = connection.received[-1][0] if connection.received[-1][1].name == b"CLS" else connection.transcript.now()
    try:
        await asyncio.wait_for(connection.closed.wait(), 5.0)
    except TimeoutError:
        pass
    await stopping
    check(connection.closed_by_client, "who closed after CLS", "the client", "nobody within 5 s" if
          not connection.closed.is_set() else "the broker")
    waited = connection.closed_at - sent
    check(waited >= CLOSE_WAIT_DELAY - 0.05, f"the close after CLS (CLOSE_WAIT sent {CLOSE_WAIT_DELAY:g} s after it)",
          f"after CLOSE_WAIT, >= {CLOSE_WAIT_DELAY - 0.05:.2f} s", f"{waited:.3f} s after CLS")


@pytest.mark.nsqc("NSQC-CLS-002")
async def test_closes_when_stopped(run):
    process, connection = await run.subscribed(await run.nsqd())
    stopping = asyncio.create_task(process.stop(timeout=6.0))
    try:
        await asyncio.wait_for(connection.closed.wait(), 5.0)
    except TimeoutError:
        pass
    clean = await stopping
    check(connection.closed.is_set(), "the connection 5 s after the stop", "closed by the client", "still open")
    check(clean, "the library's stop", "done within 6 s of SIGTERM", "killed after 6 s")
