"""The driver of nsqio (asyncio, a rework of asyncnsq): the driver contract (conformance/clients/README.md) on
nsqio.create_reader and nsqio.create_writer. nsqio has no max_attempts and no AUTH (drivers.toml: lacks), and no
lookupd poll interval setting. On Python >= 3.10 both constructors raise TypeError (asyncio.Queue(loop=...)): the driver
uses the library as documented and reports what it does."""
import asyncio
import json
import os
import signal

import nsqio


def emit(event, **fields):
    print(json.dumps({"event": event, **fields}), flush=True)


env = os.environ
addresses = [address for address in env.get("NSQC_NSQD_TCP_ADDRESSES", "").split(",") if address]
# nsqio takes lookupds as (host, port) pairs and has no poll interval setting (it polls every 30 s)
lookupds = [(host, int(port)) for host, port in (address.rsplit(":", 1) for address in
                                                 env.get("NSQC_LOOKUPD_HTTP_ADDRESSES", "").split(",") if address)]
heartbeat_interval = int(env.get("NSQC_HEARTBEAT_INTERVAL_MS", "30000"))

# nsqio's TLS takes no CA
negotiation = {name: True for name, order in (("tls_v1", "NSQC_TLS"), ("snappy", "NSQC_SNAPPY"),
                                              ("deflate", "NSQC_DEFLATE")) if env.get(order) == "1"}


def text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


async def handle(message):
    body = text(message.body)
    order = json.loads(body)
    emit("message", id=text(message.message_id), attempts=message.attempts, body=body)
    action = order["do"]
    if action == "fin":
        await message.fin()
    elif action == "fail":
        await message.req()  # nsqio's handlers say failure themselves: a requeue with its default timeout
    elif action == "req":
        await message.req(order["delay_ms"])
    elif action == "touch":
        for _ in range(order["times"]):
            await asyncio.sleep(order["every_ms"] / 1000)
            await message.touch()
        await asyncio.sleep(order["every_ms"] / 1000)
        await message.fin()


async def consume():
    reader = await nsqio.create_reader(nsqd_tcp_addresses=addresses, lookupd_http_addresses=lookupds,
                                          max_in_flight=int(env.get("NSQC_MAX_IN_FLIGHT", "1")),
                                          heartbeat_interval=heartbeat_interval, **negotiation)
    await reader.subscribe(env["NSQC_TOPIC"], env["NSQC_CHANNEL"])

    async def loop():
        async for message in reader.messages():
            asyncio.create_task(handle(message))  # a touching handler must not hold the next message up
    task = asyncio.create_task(loop())

    async def close():
        task.cancel()
        await reader.close()
    return close


async def publish():
    host, port = addresses[0].split(":")
    writer = await nsqio.create_writer(host=host, port=int(port), heartbeat_interval=heartbeat_interval)

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
                    response = await writer.dpub(topic, operation["defer_ms"], operation["body"].encode())
                emit("published", op=op, ok=text(response) == "OK", error="" if text(response) == "OK"
                     else text(response))
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
    await asyncio.sleep(0.2)  # the closes are writes on the loop
    emit("stopped")


asyncio.run(main())
