"""The official Python client, pynsq 0.9.1, publishing and consuming through the reference broker.

A Writer publishes with PUB, MPUB and DPUB; two Readers with max_in_flight > 1 consume on two channels
(one of them deflate-compressed); the handler fails the first delivery of every fifth message, so pynsq
sends REQ and the message comes back with attempts 2."""
from __future__ import annotations

import collections
import time

import nsq
import pytest
import tornado.ioloop

from reference_broker.launcher import running_broker
from tests.pynsq.ioloop import run_until_stopped

TOPIC = "pynsq"
PUBS, MPUB_SIZE = 20, 30
DEFER_MS = 1500


@pytest.fixture(scope="module")
def broker():
    with running_broker() as running:
        yield running


def _run(broker, channels: dict[str, dict]) -> tuple[dict, dict, float]:
    loop = tornado.ioloop.IOLoop.current()
    address = f"{broker.host}:{broker.tcp_port}"
    expected = {f"pub-{i}".encode() for i in range(PUBS)} | {f"mpub-{i}".encode() for i in range(MPUB_SIZE)}
    expected.add(b"dpub")
    finished: dict[str, dict[bytes, int]] = {name: {} for name in channels}
    deliveries: dict[str, collections.Counter] = {name: collections.Counter() for name in channels}
    timing = {}

    def handler_for(channel):
        def handle(message: nsq.Message) -> bool:
            deliveries[channel][message.body] += 1
            if message.body == b"dpub":
                timing.setdefault(channel, time.monotonic() - timing["dpub_sent"])
            index = int(message.body.split(b"-")[1]) if b"-" in message.body else 1
            if index % 5 == 0 and message.attempts == 1:
                return False  # a failing handler: pynsq answers REQ
            finished[channel][message.body] = message.attempts
            if all(set(f) == expected for f in finished.values()):
                loop.stop()
            return True
        return handle

    readers = [nsq.Reader(message_handler=handler_for(name), nsqd_tcp_addresses=[address], topic=TOPIC,
                          channel=name, max_in_flight=10, requeue_delay=0, max_backoff_duration=0.2,
                          heartbeat_interval=1, **extra)
               for name, extra in channels.items()]
    writer = nsq.Writer([address])
    errors = []

    def check(_conn, data):
        if isinstance(data, nsq.Error):
            errors.append(data)

    def publish():
        if not writer.conns:
            loop.call_later(0.05, publish)
            return
        for i in range(PUBS):
            writer.pub(TOPIC, f"pub-{i}".encode(), callback=check)
        writer.mpub(TOPIC, [f"mpub-{i}".encode() for i in range(MPUB_SIZE)], callback=check)
        timing["dpub_sent"] = time.monotonic()
        writer.dpub(TOPIC, DEFER_MS, b"dpub", callback=check)

    loop.call_later(0.5, publish)  # readers have subscribed by then, so every channel gets every message
    run_until_stopped(readers, [writer])
    assert not errors, errors
    return finished, deliveries, timing


def test_pynsq_reader_and_writer(broker):
    finished, deliveries, timing = _run(broker, {"plain": {}, "deflated": {"deflate": True}})
    expected_count = PUBS + MPUB_SIZE + 1
    for channel in ("plain", "deflated"):
        assert len(finished[channel]) == expected_count, f"{channel}: {len(finished[channel])} finished"
        for body, attempts in finished[channel].items():
            failed_first = b"-" in body and int(body.split(b"-")[1]) % 5 == 0
            assert attempts == (2 if failed_first else 1), (channel, body, attempts)  # C-12 after REQ
            assert deliveries[channel][body] == attempts  # delivered once per attempt, none lost
        assert DEFER_MS / 1000 - 0.05 <= timing[channel] <= DEFER_MS / 1000 + 1.0  # D-30, 100 ms scan tick
