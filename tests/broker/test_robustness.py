"""Bad input against a running broker: an nsqd error frame or a silent close, never a traceback, and the
broker keeps serving everyone else."""
from __future__ import annotations

import socket
import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reference_broker.guid import GUIDFactory
from reference_broker.launcher import running_broker
from tests.broker.target import running_target

VERBS = [b"IDENTIFY", b"SUB", b"PUB", b"MPUB", b"DPUB", b"RDY", b"FIN", b"REQ", b"TOUCH", b"CLS", b"NOP",
         b"AUTH", b"nop", b""]
LINES = st.builds(lambda verb, params: b" ".join([verb, *params]) + b"\n", st.sampled_from(VERBS),
                  st.lists(st.binary(max_size=20).filter(lambda b: b"\n" not in b), max_size=3))
CHUNKS = st.one_of(LINES, st.binary(max_size=64), st.just(struct.pack(">I", 0xFFFFFFFF)),
                   st.just(struct.pack(">I", 0x7FFFFFFF)))


@pytest.fixture(scope="module")
def shared_broker():
    with running_broker("--max-body-size=100000") as broker:
        yield broker


def _read_all_frames(sock: socket.socket, seconds: float) -> list[tuple[int, bytes]]:
    sock.settimeout(seconds)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    frames, pos = [], 0
    while len(data) - pos >= 8:
        size, frame_type = struct.unpack_from(">Ii", data, pos)
        frames.append((frame_type, data[pos + 8:pos + 4 + size]))
        pos += 4 + size
    return frames


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chunks=st.lists(CHUNKS, min_size=1, max_size=6))
def test_garbage_gets_error_frames_only(shared_broker, chunks):
    with socket.create_connection(shared_broker.tcp_address) as sock:
        sock.sendall(b"  V2" + b"".join(chunks))
        sock.shutdown(socket.SHUT_WR)
        for frame_type, data in _read_all_frames(sock, 0.5):
            assert frame_type in (0, 1, 2)  # C-07
            if frame_type == 1:
                assert data.split(b" ")[0].startswith(b"E_"), data  # C-08: a machine code first
    assert "Traceback" not in "".join(shared_broker.log)
    # the broker is still there for a well-behaved client
    with socket.create_connection(shared_broker.tcp_address) as sock:
        sock.sendall(b"  V2PUB robust\n\x00\x00\x00\x02ok")
        assert _read_all_frames_until_ok(sock)


def _read_all_frames_until_ok(sock: socket.socket) -> bool:
    sock.settimeout(5)
    data = b""
    while len(data) < 10:
        data += sock.recv(64)
    return data[:10] == b"\x00\x00\x00\x06\x00\x00\x00\x00OK"


def test_a_lying_size_allocates_nothing_and_is_refused(shared_broker):
    # C-18 / P-PUB-02: the size is checked before the body is read.
    with socket.create_connection(shared_broker.tcp_address) as sock:
        sock.sendall(b"  V2PUB t\n" + struct.pack(">I", 0x7FFFFFFF))
        assert _read_all_frames(sock, 2) == [(1, b"E_BAD_MESSAGE PUB message too big 2147483647 > 1048576")]


def test_guids_increase_within_a_topic_and_are_16_hex():
    # C-10, C-11
    factory = GUIDFactory(node_id=617)
    ids = factory.new_ids(10000)
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(len(i) == 16 and int(i, 16) >> 12 & 1023 == 617 for i in ids)
    assert abs(((int(ids[0], 16) >> 22) + 1288834974288) - (time.time_ns() >> 20)) < 1000


def test_every_way_out_of_a_connection_is_logged_as_nsqd_logs_it():
    """No error ends a client's I/O loop silently: the error an error frame answers, a read that failed (here the
    heartbeat deadline, C-29), then "exiting ioloop" (nsqd's IOLoop and tcp.go Handle)."""
    with running_target() as broker:
        with socket.create_connection(broker.tcp_address) as fatal:
            fatal.sendall(b"  V2BOGUS\n")
            _read_all_frames(fatal, 1.0)
        with socket.create_connection(broker.tcp_address) as idle:
            body = b'{"heartbeat_interval":1000}'
            idle.sendall(b"  V2IDENTIFY\n" + struct.pack(">I", len(body)) + body)
            _read_all_frames(idle, 3.0)  # no NOP: the broker gives up after 2 x 1 s
        deadline = time.monotonic() + 5
        while not (any("- E_INVALID invalid command BOGUS" in line for line in broker.log)
                   and any("failed to read command - " in line for line in broker.log)
                   and sum("exiting ioloop" in line for line in broker.log) >= 2):
            assert time.monotonic() < deadline, "".join(broker.log[-20:])
            time.sleep(0.05)
