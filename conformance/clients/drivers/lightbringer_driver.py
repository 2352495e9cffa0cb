"""The driver of lightbringer (asyncio): the driver contract (conformance/clients/README.md) on lightbringer.Reader
(an async context manager iterated for messages, each finished or requeued by the caller) and lightbringer.Writer.
lightbringer's max_in_flight is each connection's RDY; it has no max_attempts, no TOUCH of the caller's (a message
touches itself every 30 s), no MPUB, no TLS, snappy, deflate or AUTH (IDENTIFY's feature_negotiation is always
false) (drivers.toml: lacks)."""
import asyncio
import json
import signal

import lightbringer
from driver_contract import carry_out, emit, env, handle_each, listed, publish_each

addresses = listed("NSQC_NSQD_TCP_ADDRESSES")
lookupds = listed("NSQC_LOOKUPD_HTTP_ADDRESSES")
identify = {"heartbeat_interval": int(env.get("NSQC_HEARTBEAT_INTERVAL_MS", "30000"))}


async def handle(message):
    body = message.body.decode()
    emit("message", id=message.mid, attempts=message.attempts, body=body)
    # lightbringer's requeue of a failed message: req() with its default timeout; no TOUCH (lacks: touch)
    await carry_out(json.loads(body), message.fin, message.req, touch=None)


async def consume(stop):
    reader = lightbringer.Reader(
        topic=env["NSQC_TOPIC"], channel=env["NSQC_CHANNEL"], nsqd_tcp_addresses=addresses,
        lookupd_http_addresses=["http://" + address for address in lookupds],
        lookupd_refresh_interval=int(env.get("NSQC_LOOKUPD_POLL_INTERVAL_MS", "10000")) / 1000,
        max_in_flight=int(env.get("NSQC_MAX_IN_FLIGHT", "1")), identify_opts=identify)
    async with reader:
        task = handle_each(reader, handle)
        await stop.wait()
        task.cancel()


async def publish(stop):
    async with lightbringer.Writer(addresses[0], topic=env["NSQC_TOPIC"], identify_opts=identify) as writer:
        async def one(operation):  # an error is raised
            if operation["op"] == "pub":
                await writer.pub(operation["body"].encode())
            else:
                await writer.dpub(operation["defer_ms"], operation["body"].encode())
            return ""
        await publish_each(one)
        await stop.wait()


async def main():
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await (consume(stop) if env["NSQC_ROLE"] == "consumer" else publish(stop))
    emit("stopped")


asyncio.run(main())
