"""The driver of pynsq (tornado): the driver contract (conformance/clients/README.md) on nsq.Reader and nsq.Writer."""
import json
import signal
import ssl
import sys

import nsq
import tornado.ioloop
from driver_contract import emit, env, listed, max_backoff, publish_operations

loop = tornado.ioloop.IOLoop.current()
addresses = listed("NSQC_NSQD_TCP_ADDRESSES")
lookupds = ["http://" + address for address in listed("NSQC_LOOKUPD_HTTP_ADDRESSES")]
poll_interval = max(1, int(env.get("NSQC_LOOKUPD_POLL_INTERVAL_MS", "60000")) // 1000)  # whole seconds
heartbeat_interval = max(1, int(env.get("NSQC_HEARTBEAT_INTERVAL_MS", "30000")) // 1000)  # whole seconds


def negotiation():
    """The layers and the AUTH secret the driver was told to ask for, as {library's keyword: value}."""
    settings = {name: True for name, order in (("snappy", "NSQC_SNAPPY"), ("deflate", "NSQC_DEFLATE"))
                if env.get(order) == "1"}
    if env.get("NSQC_TLS") == "1":
        settings.update(tls_v1=True, tls_options={"ca_certs": env["NSQC_TLS_CA_FILE"], "cert_reqs": ssl.CERT_REQUIRED})
    if "NSQC_AUTH_SECRET" in env:
        settings["auth_secret"] = env["NSQC_AUTH_SECRET"]
    return settings


def handle(message):
    order = json.loads(message.body)
    emit("message", id=message.id.decode(), attempts=message.attempts, body=message.body.decode())
    action = order["do"]
    if action == "fin":
        return True
    if action == "fail":
        return False
    message.enable_async()
    if action == "req":
        message.requeue(time_ms=order["delay_ms"], backoff=False)
    elif action == "touch":
        def touch(left):
            if left:
                message.touch()
                loop.call_later(order["every_ms"] / 1000, touch, left - 1)
            else:
                message.finish()
        loop.call_later(order["every_ms"] / 1000, touch, order["times"])


def consume():
    max_attempts = int(env.get("NSQC_MAX_ATTEMPTS", "0"))
    reader = nsq.Reader(topic=env["NSQC_TOPIC"], channel=env["NSQC_CHANNEL"], message_handler=handle,
                        nsqd_tcp_addresses=addresses, lookupd_http_addresses=lookupds,
                        lookupd_poll_interval=poll_interval, max_in_flight=int(env.get("NSQC_MAX_IN_FLIGHT", "1")),
                        heartbeat_interval=heartbeat_interval, **({"max_tries": max_attempts} if max_attempts else {}),
                        **max_backoff(),
                        **negotiation())
    return reader.close


def publish():
    writer = nsq.Writer(addresses, heartbeat_interval=heartbeat_interval)
    operations = iter(publish_operations())

    def done(operation):
        def callback(_conn, data):
            failed = isinstance(data, nsq.Error)
            emit("published", op=operation["op"], ok=not failed, error=str(data) if failed else "")
            loop.add_callback(next_operation)
        return callback

    def next_operation():
        operation = next(operations, None)
        if operation is None:
            return
        topic, op = env["NSQC_TOPIC"], operation["op"]
        if op == "pub":
            writer.pub(topic, operation["body"].encode(), callback=done(operation))
        elif op == "mpub":
            writer.mpub(topic, [body.encode() for body in operation["bodies"]], callback=done(operation))
        elif op == "dpub":
            writer.dpub(topic, operation["defer_ms"], operation["body"].encode(), callback=done(operation))

    def when_connected():
        if writer.conns:
            next_operation()
        else:
            loop.call_later(0.02, when_connected)

    when_connected()

    def close():
        for conn in list(writer.conns.values()):
            conn.close()
    return close


close = consume() if env["NSQC_ROLE"] == "consumer" else publish()


def stop():
    close()
    loop.call_later(0.2, loop.stop)  # the closes are writes on the loop


signal.signal(signal.SIGTERM, lambda *_: loop.add_callback_from_signal(stop))
loop.start()
emit("stopped")
sys.exit(0)
