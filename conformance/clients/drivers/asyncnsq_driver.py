"""The driver of asyncnsq (asyncio): the driver contract (conformance/clients/README.md) on asyncnsq's reader and
writer. asyncnsq has no max_attempts (drivers.toml: lacks); a publish error is raised (asyncnsq.exceptions)."""
import asyncio
import json

import asyncnsq
from driver_contract import carry_out, emit, env, handle_each, host_ports, listed, publish_each, published, serve

addresses = listed("NSQC_NSQD_TCP_ADDRESSES")
lookupds = host_ports("NSQC_LOOKUPD_HTTP_ADDRESSES")  # asyncnsq takes (host, port) pairs, and no poll interval
heartbeat_interval = int(env.get("NSQC_HEARTBEAT_INTERVAL_MS", "30000"))

# asyncnsq's TLS takes no CA: its context is ssl.SSLContext(PROTOCOL_TLSv1), verifying nothing
negotiation = {name: True for name, order in (("tls_v1", "NSQC_TLS"), ("snappy", "NSQC_SNAPPY"),
                                              ("deflate", "NSQC_DEFLATE")) if env.get(order) == "1"}
if "NSQC_AUTH_SECRET" in env:
    negotiation["auth_secret"] = env["NSQC_AUTH_SECRET"]


def text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


async def handle(message):
    body = text(message.body)
    emit("message", id=text(message.message_id), attempts=message.attempts, body=body)
    # asyncnsq's handlers say failure themselves: req() requeues with its default timeout
    await carry_out(json.loads(body), message.fin, message.req, message.touch)


async def consume():
    reader = await asyncnsq.create_reader(nsqd_tcp_addresses=addresses, lookupd_http_addresses=lookupds,
                                          max_in_flight=int(env.get("NSQC_MAX_IN_FLIGHT", "1")),
                                          heartbeat_interval=heartbeat_interval, **negotiation)
    await reader.subscribe(env["NSQC_TOPIC"], env["NSQC_CHANNEL"])
    task = handle_each(reader.messages(), handle)

    async def close():
        task.cancel()
        reader.close()
    return close


async def publish():
    (host, port), *_ = host_ports("NSQC_NSQD_TCP_ADDRESSES")
    writer = await asyncnsq.create_writer(host=host, port=port, heartbeat_interval=heartbeat_interval)
    topic = env["NSQC_TOPIC"]

    async def one(operation):
        response = await published(operation, lambda body: writer.pub(topic, body),
                                   lambda bodies: writer.mpub(topic, *bodies),
                                   lambda body, defer_ms: writer.dpub(topic, defer_ms, body))
        return "" if text(response) == "OK" else text(response)
    task = asyncio.create_task(publish_each(one))

    async def close():
        task.cancel()
        writer.close()
    return close


serve(consume, publish, settle_s=0.2)  # the closes are writes on the loop
