"""The driver of ansq (asyncio): the driver contract (conformance/clients/README.md) on ansq's reader and writer.
ansq has no max_in_flight setting (each connection asks RDY 1) and no max_attempts (drivers.toml: lacks)."""
import asyncio
import json

import ansq
from ansq import ConnectionFeatures, ConnectionOptions
from driver_contract import carry_out, emit, env, listed, publish_each, serve

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

    async def loop():
        async for message in reader.messages():
            asyncio.create_task(handle(message))  # a touching handler must not hold the next message up
    task = asyncio.create_task(loop())

    async def close():
        task.cancel()
        await reader.close()
    return close


async def publish():
    writer = await ansq.create_writer(nsqd_tcp_addresses=addresses, connection_options=options)
    topic = env["NSQC_TOPIC"]

    async def one(operation):
        op = operation["op"]
        if op == "pub":
            response = await writer.pub(topic, operation["body"].encode())
        elif op == "mpub":
            response = await writer.mpub(topic, *(body.encode() for body in operation["bodies"]))
        else:
            response = await writer.dpub(topic, operation["body"].encode(), operation["defer_ms"])
        return "" if response.is_ok else str(response)
    task = asyncio.create_task(publish_each(one))

    async def close():
        task.cancel()
        await writer.close()
    return close


serve(consume, publish)
