"""TLS over real sockets where the recordings stop: a handshake that fails or never comes costs only its own
connection, and the pump's heartbeats wait for the handshake instead of breaking into it. NSQD_BINARY runs
the same expectations against nsqd v1.3.0 (built locally)."""
from __future__ import annotations

import json
import pathlib
import socket
import ssl
import struct
import subprocess
import sys
import time

import pytest

from .target import running_target

TLS = pathlib.Path(__file__).parents[2] / "conformance" / "tls"
TLS_FLAGS = (f"--tls-cert={TLS}/server.pem", f"--tls-key={TLS}/server.key", "--https-address=127.0.0.1:0")


def _frame(sock) -> tuple[int, bytes]:
    header = _exactly(sock, 8)
    size, frame_type = struct.unpack(">ii", header)
    return frame_type, _exactly(sock, size - 4)


def _exactly(sock, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {size} bytes")
        data += chunk
    return data


def _identify(sock, **fields) -> dict:
    body = json.dumps({"feature_negotiation": True, "tls_v1": True, **fields}).encode()
    sock.sendall(b"  V2IDENTIFY\n" + struct.pack(">i", len(body)) + body)
    frame_type, data = _frame(sock)
    assert frame_type == 0, data
    return json.loads(data)


def _closed(sock) -> bool:
    """EOF, or a reset where unread input was left behind."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _client_context() -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(TLS / "ca.pem"))


def _tls_connection(broker, **fields) -> ssl.SSLSocket:
    sock = socket.create_connection(broker.tcp_address, timeout=5)
    assert _identify(sock, **fields)["tls_v1"] is True
    tls = _client_context().wrap_socket(sock, server_hostname="127.0.0.1")
    assert _frame(tls) == (0, b"OK")
    return tls


def _published_within(broker, seconds: float) -> bool:
    started = time.monotonic()
    tls = _tls_connection(broker)
    tls.sendall(b"PUB tls_other\n" + struct.pack(">i", 2) + b"hi")
    answer = _frame(tls)
    tls.close()
    return answer == (0, b"OK") and time.monotonic() - started < seconds


@pytest.fixture
def broker():
    with running_target(*TLS_FLAGS) as running:
        yield running
    assert "Traceback" not in "".join(running.log)


def test_plain_bytes_into_the_handshake_close_that_connection_only(broker):
    sock = socket.create_connection(broker.tcp_address, timeout=5)
    _identify(sock)
    sock.sendall(b"PUB t\n" + struct.pack(">i", 2) + b"hi" + b"\x00" * 600)
    frame_type, data = _frame(sock)  # in plain text: the TLS layer never came up
    assert frame_type == 1 and data.startswith(b"E_IDENTIFY_FAILED IDENTIFY failed"), data
    assert _closed(sock)
    assert _published_within(broker, 1.0)


def test_a_client_that_never_starts_the_handshake_is_closed_after_five_seconds_and_stalls_nobody(broker):
    silent = socket.create_connection(broker.tcp_address, timeout=10)
    _identify(silent)
    started = time.monotonic()
    assert _published_within(broker, 1.0)
    frame_type, data = _frame(silent)  # UpgradeTLS's 5 s deadline
    assert frame_type == 1 and data.startswith(b"E_IDENTIFY_FAILED IDENTIFY failed"), data
    assert 4.5 <= time.monotonic() - started <= 7.0
    assert _closed(silent)


def test_heartbeats_wait_for_a_slow_handshake_and_go_out_inside_tls(broker):
    sock = socket.create_connection(broker.tcp_address, timeout=5)
    _identify(sock, heartbeat_interval=1000)
    time.sleep(1.5)  # a heartbeat falls due before the handshake starts
    tls = _client_context().wrap_socket(sock, server_hostname="127.0.0.1")
    frames = [_frame(tls) for _ in range(2)]
    assert (0, b"OK") in frames and all(frame_type == 0 and data in (b"OK", b"_heartbeat_")
                                        for frame_type, data in frames), frames
    tls.sendall(b"NOP\n")
    assert _frame(tls) == (0, b"_heartbeat_")  # the ticker goes on inside TLS


def test_plain_http_to_the_https_port_costs_that_request_only(broker):
    https_port = _https_port(broker)
    with socket.create_connection(("127.0.0.1", https_port), timeout=5) as plain:
        plain.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
        reply = plain.recv(4096)
    assert not reply.startswith(b"HTTP/1.1 200")
    with _client_context().wrap_socket(socket.create_connection(("127.0.0.1", https_port), timeout=5),
                                       server_hostname="127.0.0.1") as tls:
        tls.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert tls.recv(4096).startswith(b"HTTP/1.1 200 OK")


def _https_port(broker) -> int:
    """The port the HTTPS listener took (port 0 in the flags): nsqd logs it."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        for line in list(broker.log):
            if "HTTPS: listening on" in line:
                return int(line.rsplit(":", 1)[1])
        time.sleep(0.05)
    raise AssertionError("no HTTPS listener in the log:\n" + "".join(broker.log))


def test_a_certificate_that_cannot_be_read_is_one_line_and_exit_one(tmp_path):
    result = subprocess.run([sys.executable, "-m", "reference_broker", "--tls-cert=/nonexistent.pem",
                             "--tls-key=/nonexistent.key", f"--data-path={tmp_path}"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "failed to build TLS config" in result.stderr, result.stderr
