"""The driver contract (conformance/clients/README.md) as the Python drivers share it: the orders the harness puts in
the environment, the events a driver prints, and for the asyncio libraries a handler's order carried out, the
publishes done one after another and the run until SIGTERM. What is a library's own stays in its driver."""
import asyncio
import json
import os
import signal

env = os.environ


def emit(event, **fields):
    print(json.dumps({"event": event, **fields}), flush=True)


def listed(name):
    """The addresses the harness lists in ``name`` (NSQC_NSQD_TCP_ADDRESSES, NSQC_LOOKUPD_HTTP_ADDRESSES)."""
    return [address for address in env.get(name, "").split(",") if address]


def host_ports(name):
    return [(host, int(port)) for host, port in (address.rsplit(":", 1) for address in listed(name))]


def max_backoff():
    """pynsq's and gnsq's setting of the longest backoff, in seconds, where NSQC_MAX_BACKOFF_MS gives one."""
    return {"max_backoff_duration": int(env["NSQC_MAX_BACKOFF_MS"]) / 1000} if env.get("NSQC_MAX_BACKOFF_MS") else {}


def publish_operations():
    return json.loads(env.get("NSQC_PUBLISH", "[]"))


async def carry_out(order, fin, req, touch):
    """The handler's order (the message body): fin; fail (the library's own requeue, with its default delay); req
    with the delay asked; touch ``times`` times, ``every_ms`` apart, then fin."""
    action = order["do"]
    if action == "fin":
        await fin()
    elif action == "fail":
        await req()
    elif action == "req":
        await req(order["delay_ms"])
    elif action == "touch":
        for _ in range(order["times"]):
            await asyncio.sleep(order["every_ms"] / 1000)
            await touch()
        await asyncio.sleep(order["every_ms"] / 1000)
        await fin()


def handle_each(messages, handle):
    """The task that hands each message of the async iterator ``messages`` to ``handle`` in a task of its own (a
    touching handler must not hold the next message up)."""
    async def loop():
        async for message in messages:
            asyncio.create_task(handle(message))
    return asyncio.create_task(loop())


async def published(operation, pub, mpub, dpub):
    """The library's answer to one publish the harness asked for: ``pub(body)``, ``mpub(bodies)`` or
    ``dpub(body, defer_ms)``, the bodies as bytes."""
    if operation["op"] == "pub":
        return await pub(operation["body"].encode())
    if operation["op"] == "mpub":
        return await mpub([body.encode() for body in operation["bodies"]])
    return await dpub(operation["body"].encode(), operation["defer_ms"])


async def publish_each(publish):
    """Each publish the harness asks for, in order, through ``publish(operation)``, which returns the library's
    error text ("" for success); whatever the library raises is the outcome reported too."""
    for operation in publish_operations():
        try:
            error = await publish(operation)
        except Exception as raised:  # the library's error, whatever it is, is the outcome reported
            error = repr(raised)
        emit("published", op=operation["op"], ok=not error, error=error)


def serve(consume, publish, settle_s=0.0):
    """Start the role the harness gives (``consume()`` or ``publish()``, each returning its close), run until
    SIGTERM, close, and after ``settle_s`` (for closes that are writes still on the loop) say so."""
    async def main():
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        close = await (consume() if env["NSQC_ROLE"] == "consumer" else publish())
        await stop.wait()
        await close()
        await asyncio.sleep(settle_s)
        emit("stopped")
    asyncio.run(main())
