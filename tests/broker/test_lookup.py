"""What the broker sends to nsqlookupd (R-01, R-02, R-03, R-04, R-05, R-06, R-07, R-08, R-09, R-10, R-11 in
conformance/spec/registration.toml), seen by a fake lookupd: a real TCP listener speaking V1 that logs every command
and answers as nsqlookupd does, plus an HTTP listener for the `/channels` query a new topic makes. With NSQD_BINARY
set, the same tests run against nsqd v1.3.0 (tests/broker/target.py); they were checked that way.

The 15 s PING ticker (R-08, R-10's reconnection at the next tick) is covered by the recorded transcripts
(test_cluster_transcripts.py); here a reconnection is triggered by the next notification instead, which is
the same code path in nsqd (any command reconnects a peer that lost its connection).
"""
from __future__ import annotations

import http.client
import http.server
import json
import queue
import socket
import struct
import threading
import time
import urllib.parse

import pytest

from .target import running_target

HOSTNAME = socket.gethostname()


class FakeLookupd:
    """Accepts nsqd's connections, numbered from 1 in accept order, and logs ("magic", n, bytes),
    ("line", n, text, body) and ("closed", n). Replies: `reply(line, body)` returns the V1 frame's data, or
    None for no reply at all."""

    def __init__(self, channels: list[str] | None = None):
        self.channels = channels or []  # what GET /channels answers
        self.http_queries: queue.Queue[str] = queue.Queue()
        self.http = self._serve_http()
        self.events: queue.Queue[tuple] = queue.Queue()
        self._connections: list[socket.socket] = []
        self._count = 0
        self._listener: socket.socket | None = None
        self.port = 0
        self.reply = self.answer_like_nsqlookupd
        self.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def answer_like_nsqlookupd(self, line: str, body: bytes | None) -> bytes | None:
        if line == "IDENTIFY":
            return json.dumps({"broadcast_address": "127.0.0.1", "hostname": "fake-lookupd",
                               "http_port": self.http.server_address[1], "tcp_port": self.port,
                               "version": "1.3.0"}).encode()
        return b"OK"

    def start(self) -> None:
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", self.port))
        self._listener.listen(16)
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, args=(self._listener,), daemon=True).start()

    def stop(self) -> None:
        """The lookupd goes away: listener and connections closed."""
        for connection in [self._listener, *self._connections]:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            connection.close()  # after shutdown, which is what wakes a thread blocked in accept or recv
        self._connections = []

    def close(self) -> None:
        self.stop()
        self.http.shutdown()
        self.http.server_close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            self._count += 1
            self._connections.append(connection)
            threading.Thread(target=self._serve, args=(connection, self._count), daemon=True).start()

    def _serve(self, connection: socket.socket, number: int) -> None:
        reader = connection.makefile("rb")
        try:
            self.events.put(("magic", number, reader.read(4)))
            while True:
                line = reader.readline(4096)
                if not line.endswith(b"\n"):
                    break
                text, body = line[:-1].decode(), None
                if text == "IDENTIFY":
                    (size,) = struct.unpack(">i", reader.read(4))
                    body = reader.read(size)
                self.events.put(("line", number, text, body))
                data = self.reply(text, body)
                if data is not None:
                    connection.sendall(struct.pack(">i", len(data)) + data if isinstance(data, bytes) else data())
        except (OSError, struct.error, ValueError):
            pass
        self.events.put(("closed", number))

    def _serve_http(self) -> http.server.ThreadingHTTPServer:
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                fake.http_queries.put(self.path)
                body = json.dumps({"channels": fake.channels}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    # -- bounded waits ------------------------------------------------------------------------------------

    def expect(self, *expected: tuple, unordered: bool = False, within: float = 5.0) -> list[tuple]:
        """The next len(expected) events, compared without IDENTIFY's body (see `expect_connection`)."""
        deadline = time.monotonic() + within
        seen = []
        while len(seen) < len(expected):
            try:
                seen.append(self.events.get(timeout=max(deadline - time.monotonic(), 0.001)))
            except queue.Empty:
                break
        brief = [event[:3] for event in seen]
        if unordered:
            assert sorted(brief) == sorted(expected), f"expected {expected} in any order, got {seen}"
        else:
            assert brief == list(expected), f"expected {expected}, got {seen}"
        return seen

    def wait_for(self, expected: tuple, within: float) -> None:
        """Events until ``expected``, others passed over: for an event of one connection whose order with the next
        connection's is a race between the fake's threads (a close seen after the reconnection's magic)."""
        deadline = time.monotonic() + within
        seen = []
        while time.monotonic() < deadline:
            try:
                event = self.events.get(timeout=max(deadline - time.monotonic(), 0.001))
            except queue.Empty:
                break
            if event[: len(expected)] == expected:
                return
            seen.append(event)
        raise AssertionError(f"no {expected} within {within} s; saw {seen}")

    def expect_silence(self, seconds: float) -> None:
        try:
            event = self.events.get(timeout=seconds)
        except queue.Empty:
            return
        raise AssertionError(f"expected nothing for {seconds} s, got {event}")

    def expect_connection(self, number: int = 1, topics: bool = False) -> dict:
        """R-01: the magic, then IDENTIFY; returns IDENTIFY's body. Then R-02's silence while there are no
        topics, which also lets the REGISTERs of the connect callback go before a test creates a topic (one
        created while they are gathered would be registered twice: once there, once by its notification)."""
        events = self.expect(("magic", number, b"  V1"), ("line", number, "IDENTIFY"))
        if not topics:
            self.expect_silence(0.3)
        return json.loads(events[1][3])


@pytest.fixture
def fake():
    lookupd = FakeLookupd()
    yield lookupd
    lookupd.close()


def _pub(target, topic: str, body: bytes = b"x") -> float:
    """PUB over TCP; returns the seconds until the OK."""
    with socket.create_connection(target.tcp_address, timeout=10) as sock:
        started = time.monotonic()
        sock.sendall(b"  V2PUB %s\n" % topic.encode() + struct.pack(">I", len(body)) + body)
        assert _read_frame(sock) == (0, b"OK")
        return time.monotonic() - started


def _read_frame(sock: socket.socket) -> tuple[int, bytes]:
    return _read_frames(sock, 1)[0]


def _read_frames(sock: socket.socket, count: int) -> list[tuple[int, bytes]]:
    data, frames = b"", []
    while len(frames) < count:
        while len(data) < 8 or len(data) < 4 + struct.unpack_from(">I", data)[0]:
            chunk = sock.recv(4096)
            if not chunk:
                raise ConnectionError("closed by the broker")
            data += chunk
        end = 4 + struct.unpack_from(">I", data)[0]
        frames.append((struct.unpack_from(">i", data, 4)[0], data[8:end]))
        data = data[end:]
    return frames


def _http(target, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", target.http_port, timeout=10)
    try:
        connection.request(method, path, body=body)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def _channels(target, topic: str) -> list[str]:
    status, body = _http(target, "GET", f"/stats?format=json&topic={urllib.parse.quote(topic)}")
    assert status == 200, body
    return sorted(channel["channel_name"] for t in json.loads(body)["topics"] for channel in t["channels"])


# -- connection and IDENTIFY ------------------------------------------------------------------

def test_identify_at_startup_has_exactly_nsqds_fields_in_go_map_order(fake):
    with running_target(f"--lookupd-tcp-address={fake.address}") as target:
        events = fake.expect(("magic", 1, b"  V1"), ("line", 1, "IDENTIFY"))
        assert events[1][3] == (
            b'{"broadcast_address":%s,"hostname":%s,"http_port":%d,"tcp_port":%d,"topology_region":"",'
            b'"topology_zone":"","version":"1.3.0"}'
            % (json.dumps(HOSTNAME).encode(), json.dumps(HOSTNAME).encode(), target.http_port, target.tcp_port))
        fake.expect_silence(0.5)  # nothing else while there are no topics
        assert _http(target, "GET", "/config/broadcast_http_port") == (200, b"%d" % target.http_port)
        assert _http(target, "GET", "/config/broadcast_tcp_port") == (200, b"%d" % target.tcp_port)


def test_broadcast_flags_are_what_lookupd_is_told(fake):
    flags = (f"--lookupd-tcp-address={fake.address}", "--broadcast-address=127.0.0.1",
             "--broadcast-tcp-port=1234", "--broadcast-http-port=5678")
    with running_target(*flags) as target:
        assert fake.expect_connection() == {"broadcast_address": "127.0.0.1", "hostname": HOSTNAME,
                                            "http_port": 5678, "tcp_port": 1234, "topology_region": "",
                                            "topology_zone": "", "version": "1.3.0"}
        status, body = _http(target, "GET", "/info")
        info = json.loads(body)
        # /info names the listeners' own ports, whatever is broadcast
        assert (info["broadcast_address"], info["tcp_port"], info["http_port"]) == (
            "127.0.0.1", target.tcp_port, target.http_port)
        assert _http(target, "GET", "/config/broadcast_tcp_port") == (200, b"1234")


def test_every_lookupd_address_gets_its_own_connection(fake):
    second = FakeLookupd()
    try:
        with running_target(f"--lookupd-tcp-address={fake.address}", f"--lookupd-tcp-address={second.address}"):
            fake.expect_connection()
            second.expect_connection()
    finally:
        second.close()


@pytest.mark.parametrize("reply", [b"E_INVALID", b"not json", b"[1]", b'{"tcp_port":"x"}', b"[" * 100_000],
                         ids=["E_INVALID", "not-json", "array", "wrong-type", "deep"])
def test_a_bad_identify_reply_closes_the_connection_and_nothing_is_registered(fake, reply):
    fake.reply = lambda line, body: reply if line == "IDENTIFY" else b"OK"
    with running_target(f"--lookupd-tcp-address={fake.address}") as target:
        fake.expect(("magic", 1, b"  V1"), ("line", 1, "IDENTIFY"), ("closed", 1))
        _pub(target, "bad-reply")
        # the notification reconnects, the callback fails again, and the REGISTER is not sent
        fake.expect(("magic", 2, b"  V1"), ("line", 2, "IDENTIFY"), ("closed", 2))
        fake.expect_silence(0.3)
        assert "Traceback" not in "".join(target.log)


def test_a_reply_larger_than_max_body_size_is_not_read(fake):
    # 2 GiB announced: nsqd refuses before reading a byte of it, and memory stays bounded
    fake.reply = lambda line, body: (lambda: struct.pack(">i", 0x7FFFFFFF) + b"x" * 1000) \
        if line == "IDENTIFY" else b"OK"
    with running_target(f"--lookupd-tcp-address={fake.address}", "--max-body-size=1000") as target:
        fake.expect(("magic", 1, b"  V1"), ("line", 1, "IDENTIFY"), ("closed", 1))
        assert _pub(target, "big-reply") < 5


# -- REGISTER and UNREGISTER
# ------------------------------------------------------------------

def test_new_topic_and_channel_are_registered_once(fake):
    with running_target(f"--lookupd-tcp-address={fake.address}") as target:
        fake.expect_connection()
        _pub(target, "r03")
        fake.expect(("line", 1, "REGISTER r03"))
        with socket.create_connection(target.tcp_address, timeout=10) as consumer:
            consumer.sendall(b"  V2SUB r03 c1\n")
            assert _read_frame(consumer) == (0, b"OK")
            fake.expect(("line", 1, "REGISTER r03 c1"))
            _pub(target, "r03")  # nothing for later activity
            fake.expect_silence(0.3)


def test_http_create_and_delete(fake):
    with running_target(f"--lookupd-tcp-address={fake.address}") as target:
        fake.expect_connection()
        assert _http(target, "POST", "/topic/create?topic=r04")[0] == 200
        fake.expect(("line", 1, "REGISTER r04"))
        assert _http(target, "POST", "/channel/create?topic=r04&channel=c1")[0] == 200
        assert _http(target, "POST", "/channel/create?topic=r04&channel=c2")[0] == 200
        fake.expect(("line", 1, "REGISTER r04 c1"), ("line", 1, "REGISTER r04 c2"))
        assert _http(target, "POST", "/channel/delete?topic=r04&channel=c1")[0] == 200
        fake.expect(("line", 1, "UNREGISTER r04 c1"))
        assert _http(target, "POST", "/topic/delete?topic=r04")[0] == 200
        fake.expect(("line", 1, "UNREGISTER r04 c2"), ("line", 1, "UNREGISTER r04"), unordered=True)
        fake.expect_silence(0.3)


def test_ephemeral_channel_and_topic_go_with_their_last_consumer(fake):
    with running_target(f"--lookupd-tcp-address={fake.address}") as target:
        fake.expect_connection()
        consumers = []
        for topic in ("r06", "r07#ephemeral"):
            consumer = socket.create_connection(target.tcp_address, timeout=10)
            consumer.sendall(b"  V2SUB %s e#ephemeral\n" % topic.encode())
            assert _read_frame(consumer) == (0, b"OK")
            fake.expect(("line", 1, f"REGISTER {topic}"), ("line", 1, f"REGISTER {topic} e#ephemeral"))
            consumers.append(consumer)
        consumers[0].close()
        fake.expect(("line", 1, "UNREGISTER r06 e#ephemeral"))  # the topic stays
        consumers[1].close()
        fake.expect(("line", 1, "UNREGISTER r07#ephemeral e#ephemeral"), ("line", 1, "UNREGISTER r07#ephemeral"),
                    unordered=True)


# -- reconnection and live peer changes --------------------------------------------------------

def test_after_a_lookupd_restart_the_next_command_reconnects_and_registers_everything(fake):
    with running_target(f"--lookupd-tcp-address={fake.address}") as target:
        fake.expect_connection()
        _pub(target, "r10-a")
        fake.expect(("line", 1, "REGISTER r10-a"))
        fake.stop()
        fake.expect(("closed", 1))
        fake.start()
        _pub(target, "r10-b")  # written to the dead connection, which fails: lost, not retried
        fake.expect_silence(0.5)
        _pub(target, "r10-c")  # the next command connects again; the callback registers every topic
        assert fake.expect_connection(2, topics=True)["tcp_port"] == target.tcp_port
        fake.expect(("line", 2, "REGISTER r10-a"), ("line", 2, "REGISTER r10-b"), ("line", 2, "REGISTER r10-c"),
                    unordered=True)
        fake.expect(("line", 2, "REGISTER r10-c"))  # then the notification that reconnected
        fake.expect_silence(0.3)


def test_put_config_lookupd_addresses_changes_peers_at_once(fake):
    second = FakeLookupd()
    try:
        with running_target(f"--lookupd-tcp-address={fake.address}") as target:
            fake.expect_connection()
            assert _http(target, "POST", "/topic/create?topic=r11")[0] == 200
            assert _http(target, "POST", "/channel/create?topic=r11&channel=c1")[0] == 200
            fake.expect(("line", 1, "REGISTER r11"), ("line", 1, "REGISTER r11 c1"))
            new = json.dumps([second.address]).encode()
            assert _http(target, "PUT", "/config/nsqlookupd_tcp_addresses", new) == (200, new.replace(b" ", b""))
            fake.expect(("closed", 1))
            second.expect_connection(topics=True)
            second.expect(("line", 1, "REGISTER r11 c1"))
            assert _http(target, "GET", "/config/nsqlookupd_tcp_addresses") == (200, new)
            # a bad value changes nothing
            assert _http(target, "PUT", "/config/nsqlookupd_tcp_addresses", b"{}") == (
                400, b'{"message":"INVALID_VALUE"}')
            assert _http(target, "GET", "/config/nsqlookupd_tcp_addresses") == (200, new)
            _pub(target, "r11-b")
            second.expect(("line", 1, "REGISTER r11-b"))
            fake.expect_silence(0.3)
    finally:
        second.close()


# -- nothing waits for a lookupd ----------------------------------------------------------------------------

def test_a_lookupd_that_never_answers_blocks_no_publisher(fake):
    fake.reply = lambda line, body: None  # every round trip waits for nsqd's 1 s read deadline
    with running_target(f"--lookupd-tcp-address={fake.address}") as target:
        fake.expect(("magic", 1, b"  V1"), ("line", 1, "IDENTIFY"))
        started = time.monotonic()
        for index in range(10):  # ten new topics: ten notifications, each a new connection and a 1 s wait
            _pub(target, f"slow-{index}")
        assert time.monotonic() - started < 2.0
        fake.wait_for(("closed", 1), within=3)  # the IDENTIFY's read deadline; the next connection may show first
        deadline = time.monotonic() + 10
        while not any("IDENTIFY - read tcp" in line and "i/o timeout" in line for line in target.log):
            assert time.monotonic() < deadline, "".join(target.log[-20:])
            time.sleep(0.05)


def test_an_unreachable_lookupd_is_logged_and_blocks_no_publisher():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        address = "127.0.0.1:%d" % probe.getsockname()[1]  # nothing listens there
    with running_target(f"--lookupd-tcp-address={address}") as target:
        assert _pub(target, "nobody-home") < 1.0
        deadline = time.monotonic() + 10
        while not any(f"LOOKUPD({address}): REGISTER nobody-home - dial tcp {address}" in line for line in target.log):
            assert time.monotonic() < deadline, "".join(target.log[-20:])
            time.sleep(0.05)


# -- nsqd.go GetTopic: a new topic first gets the channels lookupd knows -------------------------------------

def test_a_new_topic_gets_the_channels_lookupd_knows_except_ephemeral_ones(fake):
    fake.channels = ["pre", "e#ephemeral"]
    with running_target(f"--lookupd-tcp-address={fake.address}") as target:
        fake.expect_connection()
        _pub(target, "pre-created")
        assert fake.http_queries.get(timeout=5) == "/channels?topic=pre-created"
        fake.expect(("line", 1, "REGISTER pre-created"), ("line", 1, "REGISTER pre-created pre"))
        assert _channels(target, "pre-created") == ["pre"]
        with socket.create_connection(target.tcp_address, timeout=10) as consumer:
            consumer.sendall(b"  V2SUB pre-created pre\nRDY 1\n")
            (ok, (frame_type, data)) = _read_frames(consumer, 2)
            assert ok == (0, b"OK")
            assert (frame_type, data[26:]) == (2, b"x")  # the first message was kept for the channel
