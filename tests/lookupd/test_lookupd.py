"""The reference nsqlookupd over real sockets, where the recordings stop: hostile and slow clients, many
producers, the command line. NSQLOOKUPD_BINARY=/path/to/nsqlookupd runs the socket-level tests against the real
nsqlookupd v1.3.0 (built locally, never committed), where the expectation is nsqlookupd's; the ones that hold
only for the reference (where nsqlookupd panics or keeps what a peer claims) say so."""
from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from reference_broker.launcher import RunningBroker, running_lookupd
from tests.broker.target import running_go_program

REAL = os.environ.get("NSQLOOKUPD_BINARY")
reference_only = pytest.mark.skipif(bool(REAL), reason="nsqlookupd v1.3.0 differs here on purpose")
IDENTIFY = {"broadcast_address": "127.0.0.1", "tcp_port": 4150, "http_port": 4151, "version": "1.3.0"}


@pytest.fixture
def lookupd():
    with (running_go_program(REAL) if REAL else running_lookupd()) as running:
        yield running
    assert "Traceback" not in "".join(running.log), "".join(running.log)


class V1:
    """A client of the V1 protocol: replies are a 4-byte size and the data (L-TCP-02)."""

    def __init__(self, lookupd: RunningBroker):
        self.sock = socket.create_connection(lookupd.tcp_address, timeout=5)
        self.sock.sendall(b"  V1")

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def reply(self) -> bytes:
        size = struct.unpack(">i", self._exactly(4))[0]
        return self._exactly(size)

    def command(self, data: bytes) -> bytes:
        self.send(data)
        return self.reply()

    def identify(self, **fields) -> bytes:
        body = json.dumps({**IDENTIFY, **fields}).encode()
        return self.command(b"IDENTIFY\n" + struct.pack(">i", len(body)) + body)

    def closed(self) -> bool:
        """The server closed the connection, within the socket's timeout, sending nothing more."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def _exactly(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise ConnectionError(f"closed after {len(data)} of {size} bytes")
            data += chunk
        return data


def _http(lookupd: RunningBroker, path: str, method: str = "GET", timeout: float = 5) -> tuple[int, bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{lookupd.http_port}{path}", method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _until(condition, timeout: float = 5.0):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.02)


@pytest.mark.parametrize("body, reply", [
    (b"not json", b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (b"\xef\xbb\xbf" + json.dumps(IDENTIFY).encode(), b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (json.dumps(IDENTIFY).encode("utf-16"), b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (b"[" * 100_000 + b"]" * 100_000, b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (json.dumps({**IDENTIFY, "tcp_port": "4150"}).encode(), b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (json.dumps({**IDENTIFY, "tcp_port": 1 << 70}).encode(), b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (json.dumps({**IDENTIFY, "version": ""}).encode(), b"E_BAD_BODY IDENTIFY missing fields"),
    (b"null", b"E_BAD_BODY IDENTIFY missing fields"),
], ids=["garbage", "bom", "utf16", "nested", "port-as-string", "port-overflow", "no-version", "null"])
def test_bad_identify_bodies_get_the_error_and_a_close(lookupd, body, reply):
    """L-TCP-07, L-TCP-21: Go's json.Unmarshal decides; every error is fatal."""
    client = V1(lookupd)
    assert client.command(b"IDENTIFY\n" + struct.pack(">i", len(body)) + body) == reply
    assert client.closed()
    assert _http(lookupd, "/ping") == (200, b"OK")


def test_identify_keys_fold_case_and_unknown_keys_are_ignored(lookupd):
    client = V1(lookupd)
    reply = json.loads(client.identify(TCP_PORT=4999, surprise=[1, {"x": None}]))
    assert sorted(reply) == ["broadcast_address", "hostname", "http_port", "tcp_port", "version"]
    assert client.command(b"REGISTER t1\n") == b"OK"
    status, body = _http(lookupd, "/lookup?topic=t1")
    assert status == 200 and [p["tcp_port"] for p in json.loads(body)["producers"]] == [4999]


def test_a_line_of_eight_mebibytes_is_an_unknown_command(lookupd):
    """L-TCP-10; the reference keeps the line's first 64 KiB (nsqlookupd all of it) and echoes those."""
    client = V1(lookupd)
    client.send(b"X" * (8 << 20) + b"\n")
    reply = client.reply()
    assert reply.startswith(b"E_INVALID invalid command XXXX") and len(reply) <= (8 << 20) + 26
    assert client.closed()
    assert _http(lookupd, "/ping") == (200, b"OK")


def test_an_identify_that_claims_two_gibibytes_and_goes_away_costs_nothing(lookupd):
    client = V1(lookupd)
    client.send(b"IDENTIFY\n" + struct.pack(">i", (1 << 31) - 1) + b"{" * 1000)
    client.sock.close()
    other = V1(lookupd)
    assert json.loads(other.identify())["version"] == "1.3.0"
    assert other.command(b"PING\n") == b"OK"


@reference_only
def test_a_negative_identify_size_is_a_body_that_cannot_be_read(lookupd):
    """nsqlookupd v1.3.0 panics on it (make([]byte, -1)) and the whole process exits."""
    client = V1(lookupd)
    assert client.command(b"IDENTIFY\n" + struct.pack(">i", -1)) == b"E_BAD_BODY IDENTIFY failed to read body"
    assert client.closed()
    assert _http(lookupd, "/ping") == (200, b"OK")


def test_a_client_that_stops_mid_command_or_stops_reading_stalls_nobody(lookupd):
    """One thread per connection, no lock across a socket write: a stuck client only stalls itself."""
    half_line = V1(lookupd)
    half_line.send(b"REGIS")
    half_body = V1(lookupd)
    half_body.send(b"IDENTIFY\n" + struct.pack(">i", 100) + b'{"broad')
    deaf = V1(lookupd)
    deaf.identify()
    deaf.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    pings = threading.Thread(target=lambda: contextlib.suppress(OSError) or _send_forever(deaf.sock, b"PING\n"),
                             daemon=True)
    pings.start()
    time.sleep(0.5)  # the deaf client's replies fill both socket buffers
    started = time.monotonic()
    client = V1(lookupd)
    client.identify()
    assert client.command(b"REGISTER t2 c2\n") == b"OK"
    assert _http(lookupd, "/lookup?topic=t2", timeout=2)[0] == 200
    assert _http(lookupd, "/debug", timeout=2)[0] == 200
    assert time.monotonic() - started < 1.0
    deaf.sock.close()


def _send_forever(sock: socket.socket, data: bytes) -> None:
    with contextlib.suppress(OSError):
        sock.settimeout(None)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            sock.sendall(data * 1000)


def test_two_hundred_producers_register_and_leave(lookupd):
    """L-TCP-13, L-TCP-18: each producer listed once per topic; all gone when their connections close."""
    clients = []
    for port in range(200):
        client = V1(lookupd)
        client.identify(tcp_port=10000 + port)
        assert client.command(b"REGISTER crowd c\n") == b"OK"
        clients.append(client)
    producers = json.loads(_http(lookupd, "/lookup?topic=crowd")[1])["producers"]
    assert sorted(p["tcp_port"] for p in producers) == list(range(10000, 10200))
    assert len(json.loads(_http(lookupd, "/nodes")[1])["producers"]) == 200
    for client in clients:
        client.sock.close()
    assert _until(lambda: json.loads(_http(lookupd, "/nodes")[1])["producers"] == [])
    assert _until(lambda: json.loads(_http(lookupd, "/lookup?topic=crowd")[1])["producers"] == [])
    assert json.loads(_http(lookupd, "/lookup?topic=crowd")[1]) == {"channels": ["c"], "producers": []}


def _lookupd_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reference_broker.nsqlookupd", *args], capture_output=True,
                          text=True, timeout=30)


@pytest.mark.parametrize("args, message", [
    (["--tombstone-lifetime=soon"], "invalid duration"),
    (["--log-level=loud"], "invalid log level"),
    (["--no-such-flag"], "unrecognized arguments"),
    (["--config=nsqlookupd.cfg"], "--config is not implemented by this reference nsqlookupd"),
])
def test_a_bad_or_unimplemented_flag_is_one_line_and_exit_two(args, message):
    result = _lookupd_cli(*args)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


def test_version():
    result = _lookupd_cli("--version")
    assert result.returncode == 0 and result.stdout.startswith("nsqlookupd v1.3.0")


def test_a_taken_port_is_one_line_and_exit_one():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = _lookupd_cli(f"--tcp-address=127.0.0.1:{taken.getsockname()[1]}", "--http-address=127.0.0.1:0")
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "listen failed" in result.stderr, result.stderr
