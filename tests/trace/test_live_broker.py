"""A live capture of the reference broker, analysed end to end: the counts are what the client did."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from trace_helpers import REPO

from reference_broker.launcher import running_broker

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="capturing needs root (raw sockets)")

MESSAGES = 3

# One consumer subscribes first (so the channel exists), a producer publishes, the consumer takes
# every message with RDY, FINs it and closes with CLS.
CLIENT = """
import socket, struct

def connect():
    s = socket.create_connection(("127.0.0.1", {port}))
    s.sendall(b"  V2")
    return s, s.makefile("rb")

def frame(reader):
    size = struct.unpack(">i", reader.read(4))[0]
    data = reader.read(size)
    return struct.unpack(">i", data[:4])[0], data[4:]

consumer, consumer_in = connect()
consumer.sendall(b"SUB live ch\\n")
assert frame(consumer_in) == (0, b"OK")
producer, producer_in = connect()
for i in range({messages}):
    body = b"message %d" % i
    producer.sendall(b"PUB live\\n" + struct.pack(">i", len(body)) + body)
    assert frame(producer_in) == (0, b"OK")
consumer.sendall(b"RDY {messages}\\n")
for _ in range({messages}):
    kind, data = frame(consumer_in)
    assert kind == 2, data
    consumer.sendall(b"FIN " + data[10:26] + b"\\n")
consumer.sendall(b"CLS\\n")
assert frame(consumer_in) == (0, b"CLOSE_WAIT")
consumer.close()
producer.close()
"""


def test_live_capture_of_the_reference_broker_counts_what_the_client_did(tmp_path, analyse):
    output = tmp_path / "live.pcap"
    with running_broker() as broker:
        client = textwrap.dedent(CLIENT).format(port=broker.tcp_port, messages=MESSAGES)
        result = subprocess.run(
            [sys.executable, "-m", "spark_analysis", "capture", "--port", str(broker.tcp_port), "-o", str(output)]
            + ["--", sys.executable, "-c", client],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 0, result.stderr

    summary = analyse("live-broker", [output], nsq_ports=frozenset({broker.tcp_port}))
    totals = summary["totals"]
    assert (totals["messages_published"], totals["deliveries"], totals["fin"]) == (MESSAGES,) * 3
    assert totals["tcp_connections_nsqd_tcp_port"] == 2
    channel = summary["topics"]["live"]["channels"]["ch"]
    assert channel["unique_messages_finished"] == MESSAGES
    assert channel["deliveries_by_attempts"] == {"1": MESSAGES}
    assert summary["topics"]["live"]["published"]["PUB"] == MESSAGES
    assert summary["errors"] == {} and summary["violations"] == {} and summary["error_frames"] == {}
