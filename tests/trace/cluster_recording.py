"""A capture of the rest of NSQ's traffic, for the trace decoder: an nsqd registering with an nsqlookupd ("  V1":
IDENTIFY, REGISTER, UNREGISTER, PING), a client upgrading to TLS, and plain clients beside them. It writes the pcap
and its truth, which counts what the client below does and what nsqd tells nsqlookupd about it (R-01, R-02, R-03, R-04,
R-05, R-06, R-07).

    python tests/trace/cluster_recording.py -o pcaps/cluster.pcap                      # the reference programs
    python tests/trace/cluster_recording.py -o pcaps/cluster.pcap --nsqd BIN --nsqlookupd BIN   # e.g. nsq's own

Capturing needs root. ``pcaps/cluster.pcap`` was recorded with nsqd and nsqlookupd v1.3.0 built from source.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TLS = REPO / "conformance" / "tls"
NSQD_TCP, NSQD_HTTP, NSQD_HTTPS, LOOKUPD_TCP, LOOKUPD_HTTP = 24150, 24151, 24152, 24160, 24161
TOPIC, CHANNEL, EPHEMERAL = "cluster", "c", "e#ephemeral"
PLAIN_MESSAGES, TLS_MESSAGES = 5, 3
PING_WAIT = 16.5  # nsqd PINGs every lookupd every 15 s

# The captured command: plain producer and consumer, an ephemeral consumer that leaves, a TLS producer.
CLIENT = r"""
import json, socket, ssl, struct, sys, time, urllib.request

def connect():
    s = socket.create_connection(("127.0.0.1", NSQD_TCP))
    s.sendall(b"  V2")
    return s

def frame(s):
    size = struct.unpack(">i", recv(s, 4))[0]
    data = recv(s, size)
    return struct.unpack(">i", data[:4])[0], data[4:]

def recv(s, n):
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        assert chunk, "closed"
        data += chunk
    return data

def command(s, line, body=None):
    s.sendall(line + (b"" if body is None else struct.pack(">i", len(body)) + body))

consumer = connect()
command(consumer, b"SUB TOPIC CHANNEL\n")
assert frame(consumer) == (0, b"OK")
ephemeral = connect()
command(ephemeral, b"SUB TOPIC EPHEMERAL\n")
assert frame(ephemeral) == (0, b"OK")
producer = connect()
for i in range(PLAIN_MESSAGES):
    command(producer, b"PUB TOPIC\n", b"plain %d" % i)
    assert frame(producer) == (0, b"OK")
command(consumer, b"RDY %d\n" % PLAIN_MESSAGES)
for _ in range(PLAIN_MESSAGES):
    kind, data = frame(consumer)
    assert kind == 2, data
    command(consumer, b"FIN " + data[10:26] + b"\n")
ephemeral.close()  # its channel goes with its last client: UNREGISTER (R-06)

secure = connect()
command(secure, b"IDENTIFY\n", json.dumps({"feature_negotiation": True, "tls_v1": True}).encode())
kind, data = frame(secure)
assert kind == 0 and json.loads(data)["tls_v1"], data
context = ssl.create_default_context(cafile=CA)
context.check_hostname = False
secure = context.wrap_socket(secure)
assert frame(secure) == (0, b"OK")
for i in range(TLS_MESSAGES):
    command(secure, b"PUB TOPIC\n", b"inside tls %d" % i)
    assert frame(secure) == (0, b"OK")
secure.close()
time.sleep(PING_WAIT)
for s in (consumer, producer):
    s.close()
"""


def truth() -> dict:
    """What the capture holds, in the analysis' terms. The TLS producer's publishes are encrypted, so not counted,
    but the plain consumer, whose RDY still allows them, receives those messages too (and does not FIN them)."""
    return {
        "totals": {"messages_published": PLAIN_MESSAGES, "deliveries": PLAIN_MESSAGES + TLS_MESSAGES,
                   "fin": PLAIN_MESSAGES, "req": 0, "touch": 0, "tcp_connections_nsqd_tcp_port": 4},
        "tls_connections": 1,
        "errors": {"tls_opaque": 2},  # both directions of the TLS connection, after the upgrade
        "lookupd": {
            "connections": 1,
            "producers": [f"127.0.0.1:{NSQD_TCP}"],
            # REGISTER for the topic and each channel; R-06: the ephemeral channel's UNREGISTER; R-08: PING
            "commands": {"IDENTIFY": 1, "REGISTER": 3, "UNREGISTER": 1, "PING": 1},
            "registrations": sorted([["REGISTER", TOPIC, ""], ["REGISTER", TOPIC, CHANNEL],
                                     ["REGISTER", TOPIC, EPHEMERAL], ["UNREGISTER", TOPIC, EPHEMERAL]]),
        },
    }


def record(output: Path, nsqd: str, nsqlookupd: str) -> None:
    """Capture nsqd's and nsqlookupd's TCP ports while ``run`` starts both and the client talks to them, so that
    every connection is whole, nsqd's to nsqlookupd from its magic on."""
    from spark_analysis.capture import capture

    command = [sys.executable, __file__, "--run", "--nsqd", nsqd, "--nsqlookupd", nsqlookupd, "-o", str(output)]
    status = capture([NSQD_TCP, LOOKUPD_TCP], str(output), command)
    if status:
        raise SystemExit(f"the recorded run failed (exit status {status})")
    output.with_suffix(".truth.json").write_text(json.dumps(truth(), indent=1) + "\n")


def run(nsqd: list[str], nsqlookupd: list[str]) -> None:
    client = CLIENT
    for name, value in {"NSQD_TCP": NSQD_TCP, "PLAIN_MESSAGES": PLAIN_MESSAGES, "TLS_MESSAGES": TLS_MESSAGES,
                        "PING_WAIT": PING_WAIT, "CA": repr(str(TLS / "ca.pem"))}.items():
        client = client.replace(name, str(value))
    client = client.replace("TOPIC", TOPIC).replace("CHANNEL", CHANNEL).replace("EPHEMERAL", EPHEMERAL)
    with tempfile.TemporaryDirectory() as data_path:
        lookupd = subprocess.Popen([*nsqlookupd, f"--tcp-address=127.0.0.1:{LOOKUPD_TCP}",
                                    f"--http-address=127.0.0.1:{LOOKUPD_HTTP}"], stderr=subprocess.DEVNULL)
        broker = None
        try:
            _wait_for(LOOKUPD_HTTP)  # not a captured port: a probe of the TCP one would be a connection of its own
            broker = subprocess.Popen([*nsqd, f"--tcp-address=127.0.0.1:{NSQD_TCP}",
                                       f"--http-address=127.0.0.1:{NSQD_HTTP}",
                                       f"--https-address=127.0.0.1:{NSQD_HTTPS}", f"--data-path={data_path}",
                                       f"--tls-cert={TLS / 'server.pem'}", f"--tls-key={TLS / 'server.key'}",
                                       "--broadcast-address=127.0.0.1",
                                       f"--lookupd-tcp-address=127.0.0.1:{LOOKUPD_TCP}"], stderr=subprocess.DEVNULL)
            _wait_for(NSQD_HTTP)
            subprocess.run([sys.executable, "-c", client], check=True, timeout=120)
        finally:
            for process in (broker, lookupd):
                if process:
                    process.terminate()
                    process.wait(10)


def _wait_for(port: int) -> None:
    deadline = time.monotonic() + 15
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path, required=True)
    parser.add_argument("--nsqd", default=f"{sys.executable} -m reference_broker")
    parser.add_argument("--nsqlookupd", default=f"{sys.executable} -m reference_broker.nsqlookupd")
    parser.add_argument("--run", action="store_true", help=argparse.SUPPRESS)  # the captured part
    args = parser.parse_args()
    if args.run:
        run(args.nsqd.split(), args.nsqlookupd.split())
    else:
        record(args.output, args.nsqd, args.nsqlookupd)


if __name__ == "__main__":
    main()
