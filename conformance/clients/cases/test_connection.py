"""NSQC-CONN: the magic, IDENTIFY and SUB a client opens a connection with."""
import pytest

from conformance.clients.judge import check
from conformance.clients.session import STARTS_WITHIN_S
from nsq_protocol import wire
from nsq_protocol.monitors.client_identify import identify_refusal


async def _identified(run):
    broker = await run.nsqd()
    await run.consumer(broker)
    connection = await broker.next_connection(timeout=STARTS_WITHIN_S)
    return connection, await connection.expect(b"IDENTIFY", b"SUB", timeout=5.0,
                                               why="the client identifies or subscribes")


@pytest.mark.nsqc("NSQC-CONN-001")
async def test_magic_first(run):
    broker = await run.nsqd()
    await run.consumer(broker)
    connection = await broker.next_connection(timeout=STARTS_WITHIN_S)
    await connection.expect(b"IDENTIFY", b"SUB", timeout=5.0, why="the client sends a first command")
    check(connection.magic == wire.MAGIC_V2, "the first 4 bytes", repr(wire.MAGIC_V2), repr(connection.magic))


@pytest.mark.nsqc("NSQC-CONN-002")
async def test_identify_before_sub(run):
    connection, first = await _identified(run)
    check(first.name == b"IDENTIFY", "the first command", "IDENTIFY", first.describe())
    check(isinstance(connection.identify, dict), "IDENTIFY's body", "a JSON object", repr(first.body)[:120])


@pytest.mark.nsqc("NSQC-CONN-003")
async def test_identify_names_the_client(run):
    connection, first = await _identified(run)
    fields = connection.identify or {}
    missing = [key for key in ("client_id", "hostname", "user_agent")
               if not (isinstance(fields.get(key), str) and fields[key])]
    check(not missing, "IDENTIFY's client_id, hostname, user_agent", "non-empty strings",
          f"missing or empty: {', '.join(missing)}" if missing else "")
    check(fields.get("feature_negotiation") is True, "IDENTIFY's feature_negotiation", "true",
          repr(fields.get("feature_negotiation")))


@pytest.mark.nsqc("NSQC-CONN-004")
async def test_identify_heartbeat_interval(run):
    connection, _ = await _identified(run)
    value = (connection.identify or {}).get("heartbeat_interval")
    check(value == 1000, "IDENTIFY's heartbeat_interval (the driver was told 1000 ms)", "1000", repr(value))


@pytest.mark.nsqc("NSQC-CONN-005")
async def test_sub_topic_and_channel(run):
    broker = await run.nsqd()
    await run.consumer(broker)
    connection = await broker.next_connection(timeout=STARTS_WITHIN_S)
    sub = await connection.expect(b"SUB", timeout=5.0, why="the consumer subscribes")
    expected = (run.topic.encode(), run.channel.encode())
    check(sub.params == expected, "SUB's parameters", " ".join(p.decode() for p in expected), sub.describe())


@pytest.mark.nsqc("NSQC-CONN-006")
async def test_identify_values_in_bounds(run):
    """A consumer's and a publisher's IDENTIFY, each value within what nsqd v1.3.0 takes (ID-02, ID-03, ID-04,
    ID-05, ID-06, ID-07, ID-08)."""
    consumer_broker, publisher_broker = await run.nsqd(), await run.nsqd()
    await run.consumer(consumer_broker)
    await run.publisher(publisher_broker, [])
    for role, broker in (("consumer", consumer_broker), ("publisher", publisher_broker)):
        connection = await broker.next_connection(timeout=STARTS_WITHIN_S, why=f"the {role} connects")
        identify = await connection.expect(b"IDENTIFY", timeout=5.0, why=f"the {role} identifies")
        refusal = identify_refusal(connection.identify) if isinstance(connection.identify, dict) else None
        check(refusal is None, f"the {role}'s IDENTIFY values (heartbeat_interval, output_buffer_timeout, "
              "output_buffer_size, sample_rate, msg_timeout)", "within nsqd v1.3.0's bounds",
              f"nsqd refuses it: E_BAD_BODY {refusal or ''}; {identify.describe()}")
