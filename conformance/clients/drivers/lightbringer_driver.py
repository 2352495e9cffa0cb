"""The driver of lightbringer (asyncio): the driver contract (conformance/clients/README.md) on lightbringer.Reader
(an async context manager iterated for messages, each finished or requeued by the caller) and lightbringer.Writer.
lightbringer's max_in_flight is each connection's RDY; it has no max_attempts, no TOUCH of the caller's (a message
touches itself every 30 s), no MPUB, no TLS, snappy, deflate or AUTH (IDENTIFY's feature_negotiation is always
false) (drivers.toml: lacks)."""
import asyncio
import json
import os
import signal

import lightbringer


def emit(event, **fields):
    print(json.dumps({"event": event, **fields}), flush=True)


env = os.environ
addresses = [address for address in env.get("NSQC_NSQD_TCP_ADDRESSES", "").split(",") if address]
lookupds = [address for address in env.get("NSQC_LOOKUPD_HTTP_ADDRESSES", "").split(",") if address]
identify = {"heartbeat_interval": int(env.get("NSQC_HEARTBEAT_INTERVAL_MS", "30000"))}


async def handle(message):
    body = message.body.decode()
    order = json.loads(body)
    emit("message", id=message.mid, attempts=message.attempts, body=body)
    action = order["do"]
    if action == "fin":
        await message.fin()
    elif action == "fail":
        await message.req()  # lightbringer's requeue of a failed message: req() with its default timeout
    elif action == "req":
        await message.req(order["delay_ms"])


async def consume(stop):
    reader = lightbringer.Reader(
        topic=env["NSQC_TOPIC"], channel=env["NSQC_CHANNEL"], nsqd_tcp_addresses=addresses,
        lookupd_http_addresses=["http://" + address for address in lookupds],
        lookupd_refresh_interval=int(env.get("NSQC_LOOKUPD_POLL_INTERVAL_MS", "10000")) / 1000,
        max_in_flight=int(env.get("NSQC_MAX_IN_FLIGHT", "1")), identify_opts=identify)
    async with reader:
        async def loop():
            async for message in reader:
                asyncio.create_task(handle(message))
        task = asyncio.create_task(loop())
        await stop.wait()
        task.cancel()


async def publish(stop):
    async with lightbringer.Writer(addresses[0], topic=env["NSQC_TOPIC"], identify_opts=identify) as writer:
        for operation in json.loads(env.get("NSQC_PUBLISH", "[]")):
            try:
                if operation["op"] == "pub":
                    await writer.pub(operation["body"].encode())
                else:
                    await writer.dpub(operation["defer_ms"], operation["body"].encode())
                emit("published", op=operation["op"], ok=True, error="")
            except Exception as error:  # the library's error, whatever it is, is the outcome reported
                emit("published", op=operation["op"], ok=False, error=repr(error))
        await stop.wait()


async def main():
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await (consume(stop) if env["NSQC_ROLE"] == "consumer" else publish(stop))
    emit("stopped")


asyncio.run(main())
