"""NSQC-PUB: PUB, MPUB and DPUB framed as nsqd reads them, and an error answer reaching the caller."""
import pytest

from conformance.clients.judge import check
from conformance.clients.session import STARTS_WITHIN_S


async def _published(run, operations: list[dict]):
    broker = await run.nsqd()
    process = await run.publisher(broker, operations)
    connection = await broker.next_connection(timeout=STARTS_WITHIN_S, why="the publisher connects")
    return process, connection


@pytest.mark.nsqc("NSQC-PUB-001")
async def test_pub(run):
    body = "a body with spaces\nand a newline"
    process, connection = await _published(run, [{"op": "pub", "body": body}])
    pub = await connection.expect(b"PUB", timeout=5.0, why="the publisher sends PUB")
    check(pub.params == (run.topic.encode(),) and pub.body == body.encode(), "the PUB",
          f"PUB {run.topic} [{body!r}]", pub.describe())
    check(connection.commands()[0].name == b"IDENTIFY", "the first command", "IDENTIFY",
          connection.commands()[0].describe())
    (done,) = await process.report("published", timeout=5.0, why="the publisher reports the PUB's outcome")
    check(done["ok"] is True, "the PUB's outcome (nsqd answered OK)", "ok", str(done.fields))


@pytest.mark.nsqc("NSQC-PUB-002")
async def test_mpub(run):
    run.driver.require("mpub")
    bodies = ["first", "second with spaces", "third\nwith a newline", "x" * 3000]
    _, connection = await _published(run, [{"op": "mpub", "bodies": bodies}])
    mpub = await connection.expect(b"MPUB", b"PUB", timeout=5.0, why="the publisher sends MPUB")
    check(mpub.name == b"MPUB" and mpub.params == (run.topic.encode(),), "the command", f"MPUB {run.topic}",
          mpub.describe())
    check(mpub.messages == [body.encode() for body in bodies], "the MPUB's messages", f"{len(bodies)} unchanged",
          repr([message[:20] for message in mpub.messages]))


@pytest.mark.nsqc("NSQC-PUB-003")
async def test_dpub(run):
    run.driver.require("dpub")
    _, connection = await _published(run, [{"op": "dpub", "defer_ms": 1500, "body": "deferred"}])
    dpub = await connection.expect(b"DPUB", b"PUB", timeout=5.0, why="the publisher sends DPUB")
    check(dpub.name == b"DPUB" and dpub.params == (run.topic.encode(), b"1500") and dpub.body == b"deferred",
          "the DPUB", f"DPUB {run.topic} 1500 [deferred]", dpub.describe())


@pytest.mark.nsqc("NSQC-PUB-004")
async def test_pub_error_reaches_caller(run):
    broker = await run.nsqd()
    broker.overrides[b"PUB"] = (b"E_PUB_FAILED PUB failed topic is exiting", True)  # fatal, as in nsqd
    process = await run.publisher(broker, [{"op": "pub", "body": "refused"}])
    connection = await broker.next_connection(timeout=STARTS_WITHIN_S, why="the publisher connects")
    await connection.expect(b"PUB", timeout=5.0, why="the publisher sends PUB")
    (done,) = await process.report("published", timeout=5.0, why="the publisher reports the PUB's outcome")
    check(done["ok"] is False, "the outcome of a PUB answered E_PUB_FAILED", "a failure", str(done.fields))
