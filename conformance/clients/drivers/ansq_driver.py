"""The driver of ansq (asyncio): the driver contract (conformance/clients/README.md) on ansq's reader and writer.
ansq has no max_in_flight setting (each connection asks RDY 1) and no max_attempts (drivers.toml: lacks)."""
import asyncio
import json
import os
import signal

import ansq
from ansq import ConnectionFeatures, ConnectionOptions


def emit(event, **fields):
    print(json.dumps({"event": event, **fields}), flush=True)


env = os.environ
addresses = [address for address in env.get("NSQC_NSQD_TCP_ADDRESSES", "").split(",") if address]
lookupds = [address for address in env.get("NSQC_LOOKUPD_HTTP_ADDRESSES", "").split(",") if address]
poll_interval = int(env.get("NSQC_LOOKUPD_POLL_INTERVAL_MS", "60000"))  # ansq takes ms
options = ConnectionOptions(features=ConnectionFeatures(
    heartbeat_interval=int(env.get("NSQC_HEARTBEAT_INTERVAL_MS", "30000"))))


async def handle(message):
    body = message.body.decode()
    order = json.loads(body)
    emit("message", id=message.id, attempts=message.attempts, body=body)
    action = order["do"]
    if action == "fin":
        await message.fin()
    elif action == "fail":
        await message.req()  # ansq's handlers say failure themselves: a requeue with its default timeout
    elif action == "req":
        await message.req(order["delay_ms"])
    elif action == "touch":
        for _ in range(order["times"]):
            await asyncio.sleep(order["every_ms"] / 1000)
            await message.touch()
        await asyncio.sleep(order["every_ms"] / 1000)
        await message.fin()


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

    async def operations():
        topic = env["NSQC_TOPIC"]
        for operation in json.loads(env.get("NSQC_PUBLISH", "[]")):
            op = operation["op"]
            try:
                if op == "pub":
                    response = await writer.pub(topic, operation["body"].encode())
                elif op == "mpub":
                    response = await writer.mpub(topic, *(body.encode() for body in operation["bodies"]))
                else:
                    response = await writer.dpub(topic, operation["body"].encode(), operation["defer_ms"])
                emit("published", op=op, ok=response.is_ok, error="" if response.is_ok else str(response))
            except Exception as error:  # the library's error, whatever it is, is the outcome reported
                emit("published", op=op, ok=False, error=repr(error))
    task = asyncio.create_task(operations())

    async def close():
        task.cancel()
        await writer.close()
    return close


async def main():
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    close = await (consume() if env["NSQC_ROLE"] == "consumer" else publish())
    await stop.wait()
    await close()
    emit("stopped")


asyncio.run(main())
