"""The driver of aonsq (asyncio): the driver contract (conformance/clients/README.md) on aonsq.NSQ, one per nsqd
address (an NSQ object speaks to one nsqd). aonsq's handler returns True (FIN) or False (REQ, with no delay of its
own choosing); it has no TOUCH, no max_in_flight (RDY 50), no max_attempts, no DPUB, no lookupd, no TLS, snappy,
deflate setting or AUTH (drivers.toml: lacks). Its pub() queues a body that a worker sends in an MPUB."""
import json

from aonsq import NSQ
from driver_contract import emit, env, host_ports, publish_operations, serve

addresses = host_ports("NSQC_NSQD_TCP_ADDRESSES")


async def handle(message):
    body = message.content.decode()
    order = json.loads(body)
    emit("message", id=message.id, attempts=message.attempts, body=body)
    return order["do"] == "fin"  # "fail" and "req": False, aonsq's only requeue (REQ <id>)


async def consume():
    clients = [NSQ(host=host, port=port) for host, port in addresses]
    for client in clients:
        await client.sub(env["NSQC_TOPIC"], env["NSQC_CHANNEL"], handle)

    async def close():
        for client in clients:
            await client.disconnect()
    return close


async def publish():
    (host, port), = addresses
    client = NSQ(host=host, port=port)
    await client.connect()
    topic = env["NSQC_TOPIC"]
    for operation in publish_operations():
        bodies = [operation["body"]] if operation["op"] == "pub" else operation["bodies"]
        queued = [await client.pub(topic, body.encode()) for body in bodies]
        emit("published", op=operation["op"], ok=all(queued), error="" if all(queued) else "not queued")
    return client.disconnect


serve(consume, publish)
