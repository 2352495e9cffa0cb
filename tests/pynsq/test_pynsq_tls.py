"""pynsq 0.9.1 over TLS (T-01, T-02, T-03, T-07): the reference broker requires TLS (--tls-required=true), a Writer and
two Readers (one plain inside TLS, one with deflate inside TLS) upgrade with IDENTIFY's tls_v1, verifying the
test CA, and every message arrives on both channels once."""
from __future__ import annotations

import collections
import pathlib
import ssl

import nsq
import tornado.ioloop

from reference_broker.launcher import running_broker
from tests.pynsq.ioloop import run_until_stopped

TLS = pathlib.Path(__file__).parents[2] / "conformance" / "tls"
TOPIC = "pynsq_tls"
MESSAGES = 40
TLS_OPTIONS = {"ca_certs": str(TLS / "ca.pem"), "cert_reqs": ssl.CERT_REQUIRED}


def test_pynsq_publishes_and_consumes_inside_tls():
    flags = (f"--tls-cert={TLS}/server.pem", f"--tls-key={TLS}/server.key", "--tls-required=true",
             "--https-address=127.0.0.1:0")
    with running_broker(*flags) as broker:
        address = f"{broker.host}:{broker.tcp_port}"
        loop = tornado.ioloop.IOLoop.current()
        expected = {f"m-{i}".encode() for i in range(MESSAGES)}
        received = {"plain": collections.Counter(), "deflate": collections.Counter()}
        errors = []

        def handler_for(channel):
            def handle(message: nsq.Message) -> bool:
                received[channel][message.body] += 1
                if all(set(counter) == expected for counter in received.values()):
                    loop.stop()
                return True
            return handle

        readers = [nsq.Reader(message_handler=handler_for(name), nsqd_tcp_addresses=[address], topic=TOPIC,
                              channel=name, max_in_flight=10, tls_v1=True, tls_options=TLS_OPTIONS, **extra)
                   for name, extra in (("plain", {}), ("deflate", {"deflate": True}))]
        writer = nsq.Writer([address], tls_v1=True, tls_options=TLS_OPTIONS)

        def publish():
            if not writer.conns or not all(reader.conns for reader in readers):
                loop.call_later(0.05, publish)
                return
            for body in sorted(expected):
                writer.pub(TOPIC, body, callback=check)

        def check(_conn, data):
            if isinstance(data, nsq.Error):
                errors.append(data)

        loop.call_later(0.2, publish)
        run_until_stopped(readers, [writer])
    assert not errors, errors
    for channel, counter in received.items():
        assert set(counter) == expected, f"{channel}: {len(counter)} of {MESSAGES}"
        assert set(counter.values()) == {1}, f"{channel}: a message came twice"
    log = "".join(broker.log)
    assert "upgrading connection to TLS" in log and "Traceback" not in log
