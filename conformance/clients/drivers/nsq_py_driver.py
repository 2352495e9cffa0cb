"""The driver of nsq-py (pure sockets, synchronous): the driver contract (conformance/clients/README.md) on
nsq.Reader, iterated as its README shows, and nsq.client.Client for publishing. nsq-py's package is `nsq`, as
pynsq's: it is installed apart and found on NSQC_NSQ_PY_PATH (drivers.toml `path`). No max_attempts and no DPUB
(drivers.toml: lacks); no lookupd poll interval either: its ConnectionChecker polls every 60 s, whatever the user
wants, so NSQC_LOOKUPD_POLL_INTERVAL_MS cannot be passed on."""
import json
import signal
import sys
import time

from driver_contract import emit, env, listed, publish_operations
from nsq.client import Client
from nsq.reader import Reader
from nsq.response import Error, Message


class Stop(Exception):
    """SIGTERM: leave the read loop."""


class HandlerFailed(Exception):
    """The handler's ordinary failure: raised inside Message.handle(), which requeues the message."""


def stop(*_):
    raise Stop


addresses = listed("NSQC_NSQD_TCP_ADDRESSES")
lookupds = ["http://" + address for address in listed("NSQC_LOOKUPD_HTTP_ADDRESSES")]
identify = {"heartbeat_interval": int(env.get("NSQC_HEARTBEAT_INTERVAL_MS", "30000"))}  # sent as given: ms


def negotiation():
    """The layers and the AUTH secret the driver was told to ask for, as {library's keyword: value}; nsq-py's TLS
    takes no CA (TLSSocket.wrap_socket: ssl.wrap_socket, PROTOCOL_TLSv1, no verification)."""
    settings = {name: True for name, order in (("snappy", "NSQC_SNAPPY"), ("deflate", "NSQC_DEFLATE"),
                                                ("tls_v1", "NSQC_TLS")) if env.get(order) == "1"}
    if "NSQC_AUTH_SECRET" in env:
        settings["auth_secret"] = env["NSQC_AUTH_SECRET"].encode()  # bytes, as every argument nsq-py writes
    return settings


def handle(message):
    body = message.body.decode()
    order = json.loads(body)
    emit("message", id=message.id.decode(), attempts=message.attempts, body=body)
    try:
        with message.handle():  # FIN when the block ends, REQ with Message.delay() when it raises
            if order["do"] == "fail":
                raise HandlerFailed
            if order["do"] == "req":
                message.req(order["delay_ms"])
            elif order["do"] == "touch":
                for _ in range(order["times"]):
                    time.sleep(order["every_ms"] / 1000)
                    message.touch()
                time.sleep(order["every_ms"] / 1000)
    except HandlerFailed:
        pass


def consume():
    # nsq-py joins the command line from bytes: topic and channel are bytes on Python 3
    reader = Reader(env["NSQC_TOPIC"].encode(), env["NSQC_CHANNEL"].encode(), lookupd_http_addresses=lookupds or None,
                    nsqd_tcp_addresses=addresses or None, max_in_flight=int(env.get("NSQC_MAX_IN_FLIGHT", "1")),
                    **identify, **negotiation())
    messages = iter(reader)  # the iteration runs the connection checker thread, which closing it stops
    try:
        for message in messages:
            handle(message)
    finally:
        messages.close()
        reader.close()


def publish():
    client = Client(nsqd_tcp_addresses=addresses, **identify)
    topic = env["NSQC_TOPIC"].encode()
    try:
        while not any(connection.alive() for connection in client.connections()):
            time.sleep(0.02)
        for operation in publish_operations():
            if operation["op"] == "pub":
                answers = client.pub(topic, operation["body"].encode())
            else:
                answers = client.mpub(topic, *(body.encode() for body in operation["bodies"]))
            errors = [answer for answer in answers if isinstance(answer, Error)]
            emit("published", op=operation["op"], ok=not errors, error=str(errors[0]) if errors else "")
        while True:
            for answer in client.read():  # read() answers heartbeats with NOP
                if isinstance(answer, Message):
                    answer.fin()
    finally:
        client.close()


signal.signal(signal.SIGTERM, stop)
try:
    consume() if env["NSQC_ROLE"] == "consumer" else publish()
except Stop:
    pass
emit("stopped")
sys.exit(0)
