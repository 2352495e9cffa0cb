"""The driver of gnsq (gevent): the driver contract (conformance/clients/README.md) on gnsq.Consumer and
gnsq.Producer."""
from gevent import monkey

monkey.patch_all()

import json  # noqa: E402 (after gevent's patching, as gnsq asks)
import signal  # noqa: E402
import ssl  # noqa: E402
import sys  # noqa: E402

import gevent  # noqa: E402
import gnsq  # noqa: E402
from driver_contract import emit, env, listed, max_backoff, publish_operations  # noqa: E402

addresses = listed("NSQC_NSQD_TCP_ADDRESSES")
lookupds = ["http://" + address for address in listed("NSQC_LOOKUPD_HTTP_ADDRESSES")]
poll_interval = int(env.get("NSQC_LOOKUPD_POLL_INTERVAL_MS", "60000")) / 1000  # gnsq takes seconds
# gnsq takes whole seconds and sends 1000 times them: a float (1.0) would go out as 1000.0, which nsqd refuses
heartbeat_interval = max(1, int(env.get("NSQC_HEARTBEAT_INTERVAL_MS", "30000")) // 1000)
stopped = gevent.event.Event()


def negotiation():
    """The layers and the AUTH secret the driver was told to ask for, as {library's keyword: value}."""
    settings = {name: True for name, order in (("snappy", "NSQC_SNAPPY"), ("deflate", "NSQC_DEFLATE"))
                if env.get(order) == "1"}
    if env.get("NSQC_TLS") == "1":
        settings.update(tls_v1=True, tls_options={"ca_certs": env["NSQC_TLS_CA_FILE"], "cert_reqs": ssl.CERT_REQUIRED})
    if "NSQC_AUTH_SECRET" in env:  # bytes: gnsq's docs say "a string", but AUTH's body must be bytes on Python 3
        settings["auth_secret"] = env["NSQC_AUTH_SECRET"].encode()
    return settings


class HandlerFailed(Exception):
    """gnsq's ordinary failure: a handler that raises has its message requeued."""


def handle(_consumer, message):
    order = json.loads(message.body)
    emit("message", id=message.id.decode(), attempts=message.attempts, body=message.body.decode())
    action = order["do"]
    if action == "fail":
        raise HandlerFailed("told to fail")
    if action == "fin":
        return
    message.enable_async()
    if action == "req":
        message.requeue(time_ms=order["delay_ms"], backoff=False)
    elif action == "touch":
        def touch():
            for _ in range(order["times"]):
                gevent.sleep(order["every_ms"] / 1000)
                message.touch()
            gevent.sleep(order["every_ms"] / 1000)
            message.finish()
        gevent.spawn(touch)


def consume():
    max_attempts = int(env.get("NSQC_MAX_ATTEMPTS", "0"))
    consumer = gnsq.Consumer(env["NSQC_TOPIC"], env["NSQC_CHANNEL"], nsqd_tcp_addresses=addresses,
                             lookupd_http_addresses=lookupds, lookupd_poll_interval=poll_interval,
                             message_handler=handle, max_in_flight=int(env.get("NSQC_MAX_IN_FLIGHT", "1")),
                             heartbeat_interval=heartbeat_interval, **negotiation(),
                             **({"max_tries": max_attempts} if max_attempts else {}), **max_backoff())
    consumer.start(block=False)
    return consumer.close


def publish():
    producer = gnsq.Producer(addresses, heartbeat_interval=heartbeat_interval)
    producer.start()

    def operations():
        topic = env["NSQC_TOPIC"]
        for operation in publish_operations():
            op = operation["op"]
            try:
                if op == "pub":
                    producer.publish(topic, operation["body"].encode())
                elif op == "mpub":
                    producer.multipublish(topic, [body.encode() for body in operation["bodies"]])
                elif op == "dpub":
                    producer.publish(topic, operation["body"].encode(), defer=operation["defer_ms"])
                emit("published", op=op, ok=True, error="")
            except Exception as error:  # the library's error, whatever it is, is the outcome reported
                emit("published", op=op, ok=False, error=repr(error))
    gevent.spawn(operations)
    return producer.close


close = consume() if env["NSQC_ROLE"] == "consumer" else publish()
gevent.signal_handler(signal.SIGTERM, stopped.set)
stopped.wait()
close()
gevent.sleep(0.2)  # the closes are writes on gevent's loop
emit("stopped")
sys.exit(0)
