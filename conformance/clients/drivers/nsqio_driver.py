"""The driver of nsqio (asyncio, a rework of asyncnsq): the driver contract (conformance/clients/README.md) on
nsqio.create_reader and nsqio.create_writer. nsqio has no max_attempts and no AUTH (drivers.toml: lacks), and no
lookupd poll interval setting. On Python >= 3.10 both constructors raise TypeError (asyncio.Queue(loop=...)): the driver
uses the library as documented and reports what it does."""
import asyncio
import json

import nsqio
from driver_contract import carry_out, emit, env, handle_each, host_ports, listed, publish_each, published, serve

addresses = listed("NSQC_NSQD_TCP_ADDRESSES")
# nsqio takes (host, port) pairs, and has no poll interval setting (it polls every 30 s)
lookupds = host_ports("NSQC_LOOKUPD_HTTP_ADDRESSES")
heartbeat_interval = int(env.get("NSQC_HEARTBEAT_INTERVAL_MS", "30000"))

# nsqio's TLS takes no CA
negotiation = {name: True for name, order in (("tls_v1", "NSQC_TLS"), ("snappy", "NSQC_SNAPPY"),
                                              ("deflate", "NSQC_DEFLATE")) if env.get(order) == "1"}


def text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


async def handle(message):
    body = text(message.body)
    emit("message", id=text(message.message_id), attempts=message.attempts, body=body)
    # nsqio's handlers say failure themselves: req() requeues with its default timeout
    await carry_out(json.loads(body), message.fin, message.req, message.touch)


async def consume():
    reader = await nsqio.create_reader(nsqd_tcp_addresses=addresses, lookupd_http_addresses=lookupds,
                                          max_in_flight=int(env.get("NSQC_MAX_IN_FLIGHT", "1")),
                                          heartbeat_interval=heartbeat_interval, **negotiation)
    await reader.subscribe(env["NSQC_TOPIC"], env["NSQC_CHANNEL"])
    task = handle_each(reader.messages(), handle)

    async def close():
        task.cancel()
        await reader.close()
    return close


async def publish():
    (host, port), *_ = host_ports("NSQC_NSQD_TCP_ADDRESSES")
    writer = await nsqio.create_writer(host=host, port=port, heartbeat_interval=heartbeat_interval)
    topic = env["NSQC_TOPIC"]

    async def one(operation):
        response = await published(operation, lambda body: writer.pub(topic, body),
                                   lambda bodies: writer.mpub(topic, *bodies),
                                   lambda body, defer_ms: writer.dpub(topic, defer_ms, body))
        return "" if text(response) == "OK" else text(response)
    task = asyncio.create_task(publish_each(one))

    async def close():
        task.cancel()
        await writer.close()
    return close


serve(consume, publish, settle_s=0.2)  # the closes are writes on the loop
