"""NSQC-CLS: a consumer told to stop (SIGTERM to its driver) closes cleanly."""
import asyncio

import pytest

from conformance.clients.judge import check


@pytest.mark.nsqc("NSQC-CLS-001")
async def test_cls_before_close(run):
    process, connection = await run.subscribed(await run.nsqd())
    stopping = asyncio.create_task(process.stop(timeout=6.0))
    await connection.expect(b"CLS", timeout=5.0, why="the stopping consumer sends CLS")
    await asyncio.wait_for(connection.closed.wait(), 5.0)
    await stopping
    check(connection.closed_by_client, "who closed after CLOSE_WAIT", "the client", "the broker")


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
