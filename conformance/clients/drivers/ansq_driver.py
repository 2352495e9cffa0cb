"""The driver of ansq (asyncio): the driver contract (conformance/clients/README.md) on ansq's reader and writer.
ansq has no max_in_flight setting (each connection asks RDY 1) and no max_attempts (drivers.toml: lacks)."""
import asyncio
import json

import ansq
from ansq import ConnectionFeatures, ConnectionOptions
from driver_contract import carry_out, emit, env, handle_each, listed, publish_each, published, serve

addresses = listed("NSQC_NSQD_TCP_ADDRESSES")
lookupds = listed("NSQC_LOOKUPD_HTTP_ADDRESSES")
poll_interval = int(env.get("NSQC_LOOKUPD_POLL_INTERVAL_MS", "60000"))  # ansq takes ms
options = ConnectionOptions(features=ConnectionFeatures(
    heartbeat_interval=int(env.get("NSQC_HEARTBEAT_INTERVAL_MS", "30000"))))


async def handle(message):
    body = message.body.decode()
    emit("message", id=message.id, attempts=message.attempts, body=body)
    # ansq's handlers say failure themselves: req() requeues with its default timeout
    await carry_out(json.loads(body), message.fin, message.req, message.touch)


async def consume():
    reader = await ansq.create_reader(topic=env["NSQC_TOPIC"], channel=env["NSQC_CHANNEL"],
                                      nsqd_tcp_addresses=addresses, lookupd_http_addresses=lookupds or None,
                                      lookupd_poll_interval=poll_interval, connection_options=options)
    task = handle_each(reader.messages(), handle)

    async def close():
        task.cancel()
        await reader.close()
    return close


async def publish():
    writer = await ansq.create_writer(nsqd_tcp_addresses=addresses, connection_options=options)
    topic = env["NSQC_TOPIC"]

    async def one(operation):
        response = await published(operation, lambda body: writer.pub(topic, body),
                                   lambda bodies: writer.mpub(topic, *bodies),
                                   lambda body, defer_ms: writer.dpub(topic, body, defer_ms))
        return "" if response.is_ok else str(response)
    task = asyncio.create_task(publish_each(one))

    async def close():
        task.cancel()
        await writer.close()
    return close


serve(consume, publish)
