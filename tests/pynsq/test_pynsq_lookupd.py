"""pynsq 0.9.1 finding its brokers the way most consumers do: through nsqlookupd. Two reference nsqds register
with one reference nsqlookupd; a Reader given only `lookupd_http_addresses` discovers both (R-03, L-HTTP-04),
connects to each and consumes what was published to each (the bodies name their broker), every message
once, none lost."""
from __future__ import annotations

import collections
import json
import time
import urllib.error
import urllib.request

import nsq
import tornado.ioloop

from reference_broker.launcher import running_broker, running_lookupd
from tests.pynsq.ioloop import run_until_stopped

TOPIC = "pynsq_lookupd"
PER_BROKER = 50


def _publish(broker, bodies: list[bytes]) -> None:
    url = f"http://127.0.0.1:{broker.http_port}/mpub?topic={TOPIC}"
    with urllib.request.urlopen(urllib.request.Request(url, data=b"\n".join(bodies)), timeout=5) as reply:
        assert reply.read() == b"OK"


def _producers(lookupd) -> list[int]:
    url = f"http://127.0.0.1:{lookupd.http_port}/lookup?topic={TOPIC}"
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return sorted(p["tcp_port"] for p in json.load(reply)["producers"])
    except urllib.error.HTTPError:
        return []


def test_pynsq_reader_finds_both_brokers_through_nsqlookupd():
    with running_lookupd() as lookupd:
        lookupd_tcp = f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}"
        with running_broker(lookupd_tcp, "--broadcast-address=127.0.0.1") as first, \
                running_broker(lookupd_tcp, "--broadcast-address=127.0.0.1") as second:
            expected = {}
            for name, broker in (("first", first), ("second", second)):
                bodies = [f"{name}-{i}".encode() for i in range(PER_BROKER)]
                _publish(broker, bodies)
                expected.update(dict.fromkeys(bodies))
            deadline = time.monotonic() + 10
            while _producers(lookupd) != sorted((first.tcp_port, second.tcp_port)) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _producers(lookupd) == sorted((first.tcp_port, second.tcp_port))

            loop = tornado.ioloop.IOLoop.current()
            received: collections.Counter = collections.Counter()

            def handle(message: nsq.Message) -> bool:
                received[message.body] += 1
                if set(received) == set(expected):
                    loop.stop()
                return True

            reader = nsq.Reader(message_handler=handle, lookupd_http_addresses=[f"http://127.0.0.1:{lookupd.http_port}"],
                                topic=TOPIC, channel="c", max_in_flight=20, lookupd_poll_interval=1)
            run_until_stopped([reader])
    assert set(received) == set(expected), f"{len(received)} of {len(expected)} received"
    assert set(received.values()) == {1}, "a message was delivered twice"
