"""NSQC-NEG: feature negotiation. A client asks in IDENTIFY for the layers it was configured with and only those,
refuses a layer it did not ask for, and speaks through the layers agreed: the fake nsqd really handshakes TLS (the
test certificates of conformance/tls) and really compresses (snappy framing, raw deflate) both ways, so a SUB, RDY
and FIN it decodes came through the layer (ID-30, ID-31, ID-32, ID-33, ID-34). AUTH comes after IDENTIFY and before SUB
(P-AUTH-09)."""
import asyncio

import pytest

from conformance.clients import contract
from conformance.clients.judge import check
from conformance.clients.session import STARTS_WITHIN_S
from nsq_protocol import wire

SECRET = "nsqc-secret"


@pytest.mark.nsqc("NSQC-NEG-001")
async def test_asks_for_no_layer_unless_told(run):
    broker = await run.nsqd()
    broker.offers = {"tls_v1", "snappy", "deflate"}  # a client that asked would get them
    await run.consumer(broker)
    connection = await broker.next_connection(timeout=STARTS_WITHIN_S)
    await connection.expect(b"IDENTIFY", timeout=5.0, why="the consumer identifies")
    asked = [layer for layer in ("tls_v1", "snappy", "deflate") if (connection.identify or {}).get(layer) is True]
    check(not asked, "the layers IDENTIFY asks for (the driver was told none)", "none", ", ".join(asked))


@pytest.mark.nsqc("NSQC-NEG-002")
async def test_refuses_a_layer_it_did_not_ask_for(run):
    broker = await run.nsqd()
    broker.force = {"snappy"}  # the answer turns snappy on, and the broker compresses from then on
    await run.consumer(broker)
    connection = await broker.next_connection(timeout=STARTS_WITHIN_S)
    await connection.expect(b"IDENTIFY", timeout=5.0, why="the consumer identifies")
    try:
        await asyncio.wait_for(connection.closed.wait(), 3.0)
    except TimeoutError:
        pass
    sent = b"".join(data for _, data in connection.chunks)
    check(wire.SNAPPY_STREAM_IDENTIFIER not in sent, "what the client sent after an answer turning on snappy, "
          "which it did not ask for", "no snappy stream (it closes, or stays in plain text)",
          f"a snappy stream, then {' | '.join(command.describe() for command in connection.commands()[1:]) or '-'}")


async def _through(run, layer: str, feature: str):
    """A consumer told to ask for ``layer`` on a broker that offers it: IDENTIFY asks for it, then SUB, RDY and
    the FIN of a message come through it."""
    run.driver.require(feature)
    broker = await run.nsqd()
    broker.offers = {layer}
    await run.consumer(broker, layers=(feature,))
    connection = await broker.next_connection(timeout=STARTS_WITHIN_S)
    await connection.expect(b"IDENTIFY", timeout=5.0, why="the consumer identifies")
    check((connection.identify or {}).get(layer) is True, f"IDENTIFY's {layer} (the driver was told to ask)",
          "true", repr((connection.identify or {}).get(layer)))
    await connection.subscribed(timeout=10.0)
    check(connection.layers == (layer,), "the layers agreed", layer, ", ".join(connection.layers) or "none")
    message_id = await connection.send_message(contract.instruction(contract.FINISH))
    fin = await connection.expect(b"FIN", timeout=5.0, why=f"the message is finished through {layer}")
    check(fin.params == (message_id,), f"the FIN through {layer}", f"FIN {message_id.decode()}", fin.describe())


@pytest.mark.nsqc("NSQC-NEG-003")
async def test_snappy(run):
    await _through(run, "snappy", "snappy")


@pytest.mark.nsqc("NSQC-NEG-004")
async def test_deflate(run):
    await _through(run, "deflate", "deflate")


@pytest.mark.nsqc("NSQC-NEG-005")
async def test_tls(run):
    await _through(run, "tls_v1", "tls")


@pytest.mark.nsqc("NSQC-NEG-006")
async def test_auth_before_sub(run):
    run.driver.require("auth")
    broker = await run.nsqd()
    broker.auth_secret = SECRET.encode()
    await run.consumer(broker, auth_secret=SECRET)
    connection = await broker.next_connection(timeout=STARTS_WITHIN_S)
    first = await connection.expect(b"AUTH", b"SUB", timeout=5.0, why="the consumer authenticates (auth_required)")
    check(first.name == b"AUTH", "the command after IDENTIFY when the answer says auth_required", "AUTH",
          first.describe())
    check(first.body == SECRET.encode(), "AUTH's body", SECRET, repr(first.body))
    await connection.subscribed(timeout=5.0)
    message_id = await connection.send_message(contract.instruction(contract.FINISH))
    fin = await connection.expect(b"FIN", timeout=5.0, why="the message is finished after AUTH")
    check(fin.params == (message_id,), "the FIN after AUTH", f"FIN {message_id.decode()}", fin.describe())
