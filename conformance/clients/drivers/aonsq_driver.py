"""The driver of aonsq (asyncio): the driver contract (conformance/clients/README.md) on aonsq.NSQ, one per nsqd
address (an NSQ object speaks to one nsqd). aonsq's handler returns True (FIN) or False (REQ, with no delay of its
own choosing); it has no TOUCH, no max_in_flight (RDY 50), no max_attempts, no DPUB, no lookupd, no TLS, snappy,
deflate setting or AUTH (drivers.toml: lacks). Its pub() queues a body that a worker sends in an MPUB."""
import asyncio
import json
import os
import signal

from aonsq import NSQ


def emit(event, **fields):
    print(json.dumps({"event": event, **fields}), flush=True)


env = os.environ
addresses = [address.rsplit(":", 1) for address in env.get("NSQC_NSQD_TCP_ADDRESSES", "").split(",") if address]


async def handle(message):
    body = message.content.decode()
    order = json.loads(body)
    emit("message", id=message.id, attempts=message.attempts, body=body)
    return order["do"] == "fin"  # "fail" and "req": False, aonsq's only requeue (REQ <id>)


async def consume():
    clients = [NSQ(host=host, port=int(port)) for host, port in addresses]
    for client in clients:
        await client.sub(env["NSQC_TOPIC"], env["NSQC_CHANNEL"], handle)

    async def close():
        for client in clients:
            await client.disconnect()
    return close


async def publish():
    (host, port), = addresses
    client = NSQ(host=host, port=int(port))
    await client.connect()
    topic = env["NSQC_TOPIC"]
    for operation in json.loads(env.get("NSQC_PUBLISH", "[]")):
        bodies = [operation["body"]] if operation["op"] == "pub" else operation["bodies"]
        queued = [await client.pub(topic, body.encode()) for body in bodies]
        emit("published", op=operation["op"], ok=all(queued), error="" if all(queued) else "not queued")
    return client.disconnect


async def main():
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    close = await (consume() if env["NSQC_ROLE"] == "consumer" else publish())
    await stop.wait()
    await close()
    emit("stopped")


asyncio.run(main())
