"""Faults around connections, over real sockets: the broker runs out of file descriptors, a consumer stops
reading, and a crowd of connections comes and goes at once. Each expectation is what nsqd v1.3.0 does, from its
source (named at the test) and from running these same tests against the real binary.

NSQD_BINARY=/path/to/nsqd runs them against nsqd instead: all passed against nsqd v1.3.0 (3103474b, go1.19.8).
The time bounds are generous on purpose, for a loaded machine; they tell "served" from "stalled for a heartbeat
interval", nothing finer. Speed targets live in benchmarks/broker_connections.py, not here."""
from __future__ import annotations

import itertools
import json
import os
import resource
import socket
import struct
import threading
import time
import urllib.request

from .target import running_target

STALL_BOUND = 2.0  # seconds: far below a heartbeat interval (30 s), far above a loaded machine's hiccups
BIG_BODY = b"m" * (64 * 1024)
FRAME_RESPONSE, FRAME_ERROR, FRAME_MESSAGE = 0, 1, 2
HEARTBEAT = b"_heartbeat_"


def http(target, method: str, path: str, timeout: float = 10.0) -> bytes:
    request = urllib.request.Request(f"http://127.0.0.1:{target.http_port}{path}", method=method,
                                     data=b"" if method == "POST" else None)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.read()


def channel_stats(target, topic: str, channel: str, timeout: float = 10.0) -> dict:
    body = json.loads(http(target, "GET", f"/stats?format=json&topic={topic}&channel={channel}", timeout))
    return body["topics"][0]["channels"][0]


def pub(topic: str, body: bytes) -> bytes:
    return f"PUB {topic}\n".encode() + struct.pack(">I", len(body)) + body


def mpub(topic: str, bodies: list[bytes]) -> bytes:
    payload = struct.pack(">I", len(bodies)) + b"".join(struct.pack(">I", len(b)) + b for b in bodies)
    return f"MPUB {topic}\n".encode() + struct.pack(">I", len(payload)) + payload


def identify(fields: dict) -> bytes:
    body = json.dumps(fields).encode()
    return b"IDENTIFY\n" + struct.pack(">I", len(body)) + body


class Peer:
    """One V2 connection; `receive_buffer` shrinks the kernel's buffer so that a peer that stops reading fills
    up after a few MiB."""

    def __init__(self, target, receive_buffer: int | None = None):
        self.sock = socket.socket()
        if receive_buffer is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        self.sock.connect(target.tcp_address)
        self.sock.sendall(b"  V2")
        self._data = b""

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def next_frame(self, timeout: float) -> tuple[int, bytes] | None:
        """The next frame, or None if none came in `timeout` seconds or the connection closed."""
        deadline = time.monotonic() + timeout
        while True:
            if len(self._data) >= 8:
                size, frame_type = struct.unpack_from(">Ii", self._data)
                if len(self._data) >= 4 + size:
                    data, self._data = self._data[8:4 + size], self._data[4 + size:]
                    return frame_type, data
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(1 << 16)
            except TimeoutError:
                return None
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                return None
            self._data += chunk

    def frame(self, timeout: float) -> tuple[int, bytes] | None:
        """The next frame other than a heartbeat (those are answered with NOP)."""
        deadline = time.monotonic() + timeout
        while (frame := self.next_frame(deadline - time.monotonic())) == (FRAME_RESPONSE, HEARTBEAT):
            self.send(b"NOP\n")
        return frame

    def answered_ok(self, timeout: float) -> bool:
        return self.frame(timeout) == (FRAME_RESPONSE, b"OK")


class HeartbeatWatcher:
    """A connection with a 1 s heartbeat interval, answered from a thread: when each heartbeat came."""

    def __init__(self, target):
        self.peer = Peer(target)
        self.peer.send(identify({"heartbeat_interval": 1000}))
        assert self.peer.answered_ok(timeout=10.0)
        self.heartbeats: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._answer, daemon=True)

    def __enter__(self) -> HeartbeatWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()
        self.peer.close()

    def _answer(self) -> None:
        while not self._stop.is_set():
            if self.peer.next_frame(timeout=0.1) == (FRAME_RESPONSE, HEARTBEAT):
                self.heartbeats.append(time.monotonic())
                self.peer.send(b"NOP\n")


def served_publisher(target, topic: str, timeout: float) -> Peer | None:
    """A new connection whose PUB is acknowledged within `timeout` seconds, or None."""
    peer = Peer(target)
    peer.send(pub(topic, b"hello"))
    if peer.answered_ok(timeout):
        return peer
    peer.close()
    return None


# -- item 1: file descriptors run out ------------------------------------------------------------------------

SPARE_FILE_DESCRIPTORS = 12


def test_accept_resumes_once_file_descriptors_free_up():
    """internal/protocol/tcp_server.go: a temporary Accept() error (EMFILE is one: syscall.Errno.Temporary) is
    logged as `temporary Accept() failure` and the loop goes on; the connection waits in the listen backlog and is
    served once a descriptor is free. /ping's health is about the disk queues only: it answers OK again as soon
    as its own connection can be accepted."""
    with running_target() as target:
        first = served_publisher(target, "fds", timeout=10.0)  # the topic exists before descriptors run out
        assert first is not None
        pid = target.process.pid
        limit = len(os.listdir(f"/proc/{pid}/fd")) + SPARE_FILE_DESCRIPTORS
        _, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, hard))
        held = [first]
        while len(os.listdir(f"/proc/{pid}/fd")) < limit:
            peer = served_publisher(target, "fds", timeout=10.0)
            assert peer is not None, "a connection was not served while descriptors were free"
            held.append(peer)
            assert len(held) <= 2 * SPARE_FILE_DESCRIPTORS, "the descriptor limit is not reached"
        assert len(held) - 1 >= SPARE_FILE_DESCRIPTORS - 2  # one descriptor per connection, as nsqd
        waiting = Peer(target)
        waiting.send(pub("fds", b"hello"))
        assert not waiting.answered_ok(timeout=1.0)  # accept() fails: the connection waits in the listen backlog

        for peer in held[-4:]:  # room for the waiting connection, a new one and /ping's
            peer.close()
        assert waiting.answered_ok(timeout=10.0), "the connection in the backlog was never served"
        assert served_publisher(target, "fds", timeout=10.0) is not None
        assert http(target, "GET", "/ping") == b"OK"
        assert "temporary Accept() failure" in "".join(target.log)
        for peer in held[:-4] + [waiting]:
            peer.close()


# -- item 4: a consumer that stops reading ----------------------------------------------------------------

STUCK_READY = 100  # what the stuck consumer may hold in flight: 6.4 MiB, more than its socket buffers take
MESSAGES = 200  # so the rest of the 12.5 MiB published is for another consumer


def fill_a_stuck_consumer(target, topic: str, stuck_fields: dict | None = None) -> tuple[Peer, Peer]:
    """A consumer (RDY 100, small receive buffer) that never reads, and 200 messages of 64 KiB published: more
    than its socket can hold, so the broker's writes to it cannot complete. Returns (stuck, publisher)."""
    http(target, "POST", f"/topic/create?topic={topic}")
    http(target, "POST", f"/channel/create?topic={topic}&channel=c")
    stuck = Peer(target, receive_buffer=4096)
    if stuck_fields:
        stuck.send(identify(stuck_fields))
        assert stuck.answered_ok(timeout=10.0)
    stuck.send(f"SUB {topic} c\nRDY {STUCK_READY}\n".encode())
    assert stuck.answered_ok(timeout=10.0)
    publisher = Peer(target)
    for _ in range(MESSAGES // 20):
        publisher.send(mpub(topic, [BIG_BODY] * 20))
        assert publisher.answered_ok(timeout=10.0)
    # Once the broker waits for the stuck consumer's socket, its in-flight count stops growing: nsqd's pump
    # took 43 messages (2.7 MiB) before its write blocked, and left the rest queued.
    deadline, in_flight = time.monotonic() + 10.0, -1
    while (now := channel_stats(target, topic, "c")["in_flight_count"]) != in_flight or not now:
        assert time.monotonic() < deadline, "the stuck consumer's share never settled"
        in_flight = now
        time.sleep(0.5)
    return stuck, publisher


def test_a_consumer_that_stops_reading_stalls_no_one():
    """nsqd: each connection's messagePump goroutine writes its messages and heartbeats, blocking only itself
    (protocol_v2.go Send, under the client's own writeLock); publishing only queues (topic.go PutMessage). A
    consumer whose socket is full, and which then PUBlishes itself (its own OK cannot be written), delays no
    other publisher, no /stats, no other connection's heartbeats, and no other consumer: what its pump cannot
    take goes to the others."""
    with running_target() as target, HeartbeatWatcher(target) as watcher:
        stuck, publisher = fill_a_stuck_consumer(target, "stuck")
        stuck.send(pub("stuck", b"from the stuck consumer"))  # its OK waits behind the unread messages
        stalled_since = time.monotonic()
        time.sleep(0.5)

        started = time.monotonic()
        other_publisher = served_publisher(target, "stuck", timeout=STALL_BOUND)
        assert other_publisher is not None, "a publisher of the same topic was stalled"
        publisher.send(pub("stuck", b"again"))
        assert publisher.answered_ok(timeout=STALL_BOUND), "a connected publisher was stalled"
        stats = channel_stats(target, "stuck", "c", timeout=STALL_BOUND)
        assert stats["client_count"] == 1
        other = Peer(target)
        other.send(b"SUB stuck c\nRDY 1\n")
        assert other.answered_ok(timeout=STALL_BOUND)
        frame = other.frame(timeout=STALL_BOUND)
        assert frame is not None and frame[0] == FRAME_MESSAGE, "another consumer of the channel was stalled"
        assert time.monotonic() - started < 3 * STALL_BOUND
        time.sleep(max(stalled_since + 3.0 - time.monotonic(), 0))
        beats = [when for when in watcher.heartbeats if when > stalled_since]
        gaps = [later - earlier for earlier, later in itertools.pairwise([stalled_since, *beats])]
        assert len(beats) >= 2 and max(gaps) < STALL_BOUND, f"another connection's heartbeats stalled: {gaps}"
        for peer in (stuck, publisher, other_publisher, other):
            peer.close()


def test_write_deadline_ends_the_output_of_a_consumer_that_stops_reading():
    """C-31 (protocol_v2.go Send, client_v2.go Flush): every write has a deadline of one heartbeat interval. When
    the messagePump's write to a full socket times out the pump exits, and the connection's buffered writer keeps
    that error (bufio.Writer errors are sticky): no heartbeat or message is written again, and the next response
    ends the connection. Checked on nsqd v1.3.0 with a 1 s interval: a consumer that keeps sending NOPs stays
    connected, and its PUB then closes the connection without an OK."""
    with running_target() as target:
        stuck, publisher = fill_a_stuck_consumer(target, "deadline", {"heartbeat_interval": 1000})
        for _ in range(8):  # 4 s: four heartbeat intervals, so the write deadline has long passed
            stuck.send(b"NOP\n")
            time.sleep(0.5)
        assert channel_stats(target, "deadline", "c")["client_count"] == 1  # still connected, as in nsqd
        stuck.send(pub("deadline", b"from the stuck consumer"))
        deadline = time.monotonic() + 5.0
        while channel_stats(target, "deadline", "c")["client_count"] != 0:
            assert time.monotonic() < deadline, "the stuck consumer is still connected"
            time.sleep(0.1)
        stuck.close()
        publisher.close()


# -- item 5: many connections at once ---------------------------------------------------------------------

CROWD = 300


def test_a_crowd_of_consumers_is_served_and_leaves_cleanly():
    """300 consumers connect at once: every SUB is acknowledged, a PUB is acknowledged while they are open, an MPUB
    with a message for each reaches every one (RDY 1, so each takes exactly one), and once they all close /stats
    shows none left and a new publisher is served. nsqd v1.3.0 does all of it within a second."""
    with running_target() as target:
        http(target, "POST", "/topic/create?topic=crowd")
        http(target, "POST", "/channel/create?topic=crowd&channel=c")
        crowd = []
        for _ in range(CROWD):
            peer = Peer(target)
            peer.send(b"SUB crowd c\nRDY 1\n")
            crowd.append(peer)
        assert all(peer.answered_ok(timeout=20.0) for peer in crowd)
        publisher = served_publisher(target, "other", timeout=STALL_BOUND)
        assert publisher is not None
        publisher.send(mpub("crowd", [b"one each"] * CROWD))
        assert publisher.answered_ok(timeout=STALL_BOUND)
        frames = [peer.frame(timeout=10.0) for peer in crowd]
        assert all(frame is not None and frame[0] == FRAME_MESSAGE for frame in frames)

        for peer in crowd:
            peer.close()
        deadline = time.monotonic() + 10.0
        while channel_stats(target, "crowd", "c")["client_count"] != 0:
            assert time.monotonic() < deadline, "closed consumers still listed"
            time.sleep(0.05)
        assert served_publisher(target, "crowd", timeout=STALL_BOUND) is not None
        publisher.close()
