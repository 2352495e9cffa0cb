"""NSQC-LOOKUP: a consumer given nsqlookupds instead of nsqd addresses finds its producers on GET /lookup, polls
it while it runs, joins the producers that appear, leaves those that go, and outlives a lookupd that is down.

The driver is told to poll every 1 s (session.LOOKUPD_POLL_INTERVAL_MS); libraries add up to 30 % jitter to the
first poll or to each one, so "within 3 polls" is waited for as 5-6 s."""
import asyncio
import contextlib

import pytest

from conformance.clients.judge import check
from conformance.clients.session import STARTS_WITHIN_S

POLLS = 5.0  # seconds after the first /lookup in which a 1 s poll interval makes 4-5 more (3 to 10 accepted)
FASTEST_GAP = 0.5  # seconds: half the poll interval; pynsq's and nsqjs's jitter delays a poll, never hastens it
JOINS_WITHIN = 6.0  # seconds for a producer that appears on /lookup to get a connection (3 polls and a connect)
LEFT_FOR = 4.0  # seconds that a producer gone from /lookup is watched for a reconnect
SUBSCRIBED_WITHIN = 2.0  # seconds for a consumer's RDY after its SUB, where it sends one
DOWN_AFTER_FIRST_QUERY = 2.0  # seconds its lookupds stay down after that: one or two more polls find them down


async def _consumer_on(run, lookupds, *brokers):
    """A consumer given only ``lookupds``; each of ``brokers`` is listed and gets a connection with SUB."""
    run.driver.require("lookupd")
    for lookupd in lookupds:
        await run.list_producers(lookupd, *brokers)
    process = await run.consumer(max_in_flight=2, lookupds=tuple(lookupds))
    connections = []
    for broker in brokers:
        connection = await broker.next_connection(timeout=10.0, why="the consumer connects to a producer /lookup "
                                                  "lists")
        await connection.expect(b"SUB", timeout=5.0, why="the consumer subscribes on the producer /lookup lists")
        connections.append(connection)
    return process, connections


@pytest.mark.nsqc("NSQC-LOOKUP-001")
async def test_lookup_finds_the_producers(run):
    run.driver.require("lookupd")
    lookupd = await run.nsqlookupd()
    first, second = await run.nsqd(), await run.nsqd()
    await run.list_producers(lookupd, first, second)
    await run.consumer(max_in_flight=2, lookupds=(lookupd,))
    query, = await lookupd.queried(1, timeout=STARTS_WITHIN_S,
                                   why="the consumer asks its lookupd for its topic's producers")
    check(query.path == "/lookup" and query.topic == run.topic, "the consumer's query",
          f"GET /lookup?topic={run.topic}", query.target)
    for broker in (first, second):
        connection = await broker.next_connection(timeout=10.0, why="the consumer connects to each listed producer")
        sub = await connection.expect(b"SUB", timeout=5.0, why="the consumer subscribes on each listed producer")
        check(sub.params == (run.topic.encode(), run.channel.encode()), "SUB on a listed producer",
              f"SUB {run.topic} {run.channel}", sub.describe())


@pytest.mark.nsqc("NSQC-LOOKUP-002")
async def test_lookup_is_polled(run):
    lookupd = await run.nsqlookupd()
    await _consumer_on(run, [lookupd], await run.nsqd())
    first, = await lookupd.queried(1, timeout=5.0, why="the consumer asks its lookupd")
    await asyncio.sleep(max(0.0, first.at + POLLS - run.transcript.now()))
    later = [query.at - first.at for query in lookupd.queries if first.at < query.at <= first.at + POLLS]
    shown = f"{len(later)}" + (f" at {', '.join(f'+{at:.2f} s' for at in later)}" if later else "")
    check(3 <= len(later) <= 10, f"the /lookup queries in the {POLLS:g} s after the first (poll interval 1 s)",
          "3 to 10", shown)
    gaps = [later - earlier for earlier, later in zip([0.0, *later], later, strict=False)]
    check(min(gaps) >= FASTEST_GAP, "the time between two /lookup queries (poll interval 1 s)",
          f"at least {FASTEST_GAP:g} s (half the interval)", f"{min(gaps):.3f} s; queries {shown}")


@pytest.mark.nsqc("NSQC-LOOKUP-003")
async def test_new_producer_is_joined(run):
    lookupd = await run.nsqlookupd()
    first = await run.nsqd()
    await _consumer_on(run, [lookupd], first)
    # listed only after two more polls: a client that asks at start and once more is not rescued by luck
    await lookupd.queried(3, timeout=10.0, why="the consumer polls its lookupd (3 queries)")
    second = await run.nsqd()
    await run.list_producers(lookupd, first, second)
    connection = await second.next_connection(timeout=JOINS_WITHIN, why="the consumer joins a producer that "
                                              "appeared on /lookup")
    await connection.expect(b"SUB", timeout=5.0, why="the consumer subscribes on the new producer")


@pytest.mark.nsqc("NSQC-LOOKUP-004")
async def test_tombstoned_producer_is_left(run):
    lookupd = await run.nsqlookupd()
    first, second = await run.nsqd(), await run.nsqd()
    _, (kept, leaving) = await _consumer_on(run, [lookupd], first, second)
    # its RDY there, where it sends one, ends its subscribing: a close in the middle of it (ansq then never polls
    # again) is a race of the case's making, not this item's
    with contextlib.suppress(AssertionError):
        await leaving.seen(b"RDY", 0, timeout=SUBSCRIBED_WITHIN, why="the consumer's RDY on the leaving producer")
    await run.list_producers(lookupd, first)  # tombstoned: /lookup no longer lists it (L-HTTP-12) ...
    await leaving.close()  # ... and it closes its clients, as an nsqd that deletes the topic or exits
    since = len(lookupd.queries)
    try:
        again = await second.next_connection(timeout=LEFT_FOR)
    except AssertionError:
        again = None
    check(again is None, f"connections to the producer gone from /lookup, over {LEFT_FOR:g} s",
          "none", f"a new connection at {run.transcript.now() * 1000:.0f} ms ({len(lookupd.queries) - since} "
          "/lookup queries after it left, none listing it)")
    check(not kept.closed.is_set(), "the connection to the producer still listed", "kept open", "closed")


async def _back_after_being_down(run, lookupds, returning):
    """A consumer given ``lookupds``, all down when it starts; ``returning`` comes back 2 s after the consumer's
    first query found them down (a client that queries once, late, would otherwise find it up by luck), listing an
    nsqd, which must get a connection with SUB within JOINS_WITHIN."""
    run.driver.require("lookupd")
    broker = await run.nsqd()
    for lookupd in lookupds:
        await lookupd.stop()
        await run.list_producers(lookupd, broker)
    process = await run.consumer(max_in_flight=2, lookupds=tuple(lookupds))
    deadline = asyncio.get_running_loop().time() + STARTS_WITHIN_S
    while not any(lookupd.refused for lookupd in lookupds) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
    check(any(lookupd.refused for lookupd in lookupds), "the consumer's first query, its lookupds down",
          f"a GET /lookup within {STARTS_WITHIN_S:g} s", "none" + (f"; the driver exited with {process.exit_code}"
                                                                     if process.exit_code is not None else ""))
    await asyncio.sleep(DOWN_AFTER_FIRST_QUERY)
    await returning.start()
    connection = await broker.next_connection(timeout=JOINS_WITHIN, why=f"the consumer connects once nsqlookupd "
                                              f"{returning.name} is back")
    await connection.expect(b"SUB", timeout=5.0, why="the consumer subscribes once its lookupd is back")
    check(process.exit_code is None, "the consumer's process", "running", f"exited with {process.exit_code}")


@pytest.mark.nsqc("NSQC-LOOKUP-005")
async def test_a_lookupd_down_is_passed_over(run):
    """The first lookupd stays down; the second is down at first too (so that a client that queries one lookupd
    chosen at random, once, cannot pass by luck) and comes back."""
    down, returning = await run.nsqlookupd(), await run.nsqlookupd()
    await _back_after_being_down(run, [down, returning], returning)


@pytest.mark.nsqc("NSQC-LOOKUP-006")
async def test_lookupd_back_after_being_down(run):
    lookupd = await run.nsqlookupd()
    await _back_after_being_down(run, [lookupd], lookupd)
