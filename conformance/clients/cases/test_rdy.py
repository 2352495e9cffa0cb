"""NSQC-RDY: RDY within max_in_flight, spread over nsqds, backoff after failures."""
import asyncio

import pytest

from conformance.clients import contract
from conformance.clients.judge import check

SETTLE = 0.1  # seconds: a client updates its connections' RDY one after the other
STARVED_AFTER = 8.0  # seconds without RDY > 0 on a connection that max_in_flight leaves room for


@pytest.mark.nsqc("NSQC-RDY-001")
async def test_first_rdy_within_max_in_flight(run):
    run.driver.require("max_in_flight")
    broker = await run.nsqd()
    await run.consumer(broker, max_in_flight=3)
    connection = await broker.next_connection(timeout=10.0)
    rdy = await connection.subscribed()
    count = rdy.params[0] if rdy.params else b""
    check(count.isdigit() and 1 <= int(count) <= 3, "the first RDY (max_in_flight 3)", "RDY 1..3", rdy.describe())


@pytest.mark.nsqc("NSQC-RDY-002")
async def test_rdy_spread_over_two_nsqds(run):
    run.driver.require("max_in_flight")
    first, second = await run.nsqd(), await run.nsqd()
    await run.consumer(first, second, max_in_flight=4)
    connections = [await first.next_connection(timeout=10.0), await second.next_connection(timeout=10.0)]
    for connection in connections:
        await connection.expect(b"SUB", timeout=5.0, why="the consumer subscribes on both nsqds")
    # go-nsq gives a connection the RDY it could not give within max_in_flight 5 s later
    for connection in connections:
        await connection.seen(b"RDY", 0, timeout=STARVED_AFTER, why=f"connection {connection.name} gets RDY > 0 "
                              "(4 in flight allowed, 2 nsqds)", matching=lambda rdy: rdy.params[:1] != (b"0",),
                              expected="RDY > 0")
    await asyncio.sleep(SETTLE * 3)
    events = sorted((at, connection.name, command) for connection in connections
                    for at, command in connection.received if command.name == b"RDY")

    def counts_at(moment: float) -> dict[str, int]:
        counts: dict[str, int] = {}
        for at, name, command in events:
            if at <= moment:
                counts[name] = int(command.params[0]) if command.params and command.params[0].isdigit() else -1
        return counts
    for at, _, _ in events:  # each redistribution judged once settled: RDYs within SETTLE of each other are one
        settled = counts_at(at + SETTLE)
        check(sum(settled.values()) <= 4, f"the RDY counts over both connections {SETTLE * 1000:.0f} ms after a "
              "change (max_in_flight 4)", "<= 4 in all", f"{settled} at {(at + SETTLE) * 1000:.0f} ms")


@pytest.mark.nsqc("NSQC-RDY-003")
async def test_backoff_after_failure(run):
    _, connection = await run.subscribed(await run.nsqd(), max_in_flight=1)
    since = len(connection.received)
    message_id = await connection.send_message(contract.instruction(contract.FAIL))
    requeue = await connection.expect(b"REQ", timeout=3.0, why="the failed message is requeued")
    check(requeue.params[:1] == (message_id,), "the REQ's id", message_id.decode(), requeue.describe())
    backoff = await connection.seen(b"RDY", since, timeout=2.0, why="the consumer backs off after a failure",
                                    matching=lambda rdy: rdy.params == (b"0",), expected="RDY 0")
    await connection.seen(b"RDY", backoff + 1, timeout=10.0, why="the consumer recovers after its backoff",
                          matching=lambda rdy: rdy.params[:1] != (b"0",), expected="RDY > 0")
