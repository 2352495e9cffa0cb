"""nsq-trace capture records real loopback traffic that the decoder then reads back."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import textwrap
import threading

import pytest
from trace_helpers import REPO, walk

from nsq_protocol import wire
from spark_analysis.analysis import SEGMENT_COLUMNS
from spark_analysis.decode.v2 import decode_connection
from spark_analysis.read.reassembly import reassemble

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="capturing needs root (raw sockets)")


def tiny_nsqd(listener: socket.socket):
    """Answers the magic and one PUB with OK (C-13) and closes: enough NSQ to capture."""
    conn, _ = listener.accept()
    with conn:
        decoder = wire.CommandDecoder()
        commands = []
        while not commands:
            commands = decoder.feed(conn.recv(65536))
        conn.sendall(wire.encode_frame(wire.FRAME_RESPONSE, b"OK"))


def test_capture_of_a_command_decodes_back(tmp_path):
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    server = threading.Thread(target=tiny_nsqd, args=(listener,), daemon=True)
    server.start()
    client = textwrap.dedent(f"""
        import socket
        s = socket.create_connection(("127.0.0.1", {port}))
        s.sendall(b"  V2PUB captured\\n\\x00\\x00\\x00\\x05hello")
        assert s.recv(100) == b"\\x00\\x00\\x00\\x06\\x00\\x00\\x00\\x00OK"
        s.close()
    """)
    output = tmp_path / "live.pcap"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "spark_analysis",
            "capture",
            "--port",
            str(port),
            "-o",
            str(output),
            "--",
            sys.executable,
            "-c",
            client,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    table = walk(output)
    segments = [row for row in table.to_pylist() if row["error"] is None]
    [conn] = reassemble(
        segments[0]["flow"],
        [tuple(r[name] for name in SEGMENT_COLUMNS) for r in segments],
        frozenset(),
    )
    rows = decode_connection(conn, frozenset()).to_pylist()
    assert [(r["kind"], r["name"], r["status"]) for r in rows if r["kind"] in ("command", "publish")] == [
        ("command", "PUB", "ok"),
        ("publish", "PUB", "ok"),
    ]
    listener.close()


def test_frames_longer_than_65535_bytes_are_captured_whole(tmp_path):
    """Loopback frames reach 65,549 bytes (MTU 65,536 and the link header), past a 65,535-byte read: none is cut,
    and every byte sent is in the capture."""
    sent = 8_000_000
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def drain():
        conn, _ = listener.accept()
        with conn:
            while conn.recv(1 << 20):
                pass
    server = threading.Thread(target=drain, daemon=True)
    server.start()
    client = textwrap.dedent(f"""
        import socket
        s = socket.create_connection(("127.0.0.1", {port}))
        s.sendall(b"x" * {sent})
        s.close()
    """)
    output = tmp_path / "large.pcap"
    result = subprocess.run([sys.executable, "-m", "spark_analysis", "capture", "--port", str(port), "-o", str(output),
                             "--", sys.executable, "-c", client], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    rows = walk(output).to_pylist()
    assert [row["error"] for row in rows if row["error"] is not None] == []
    [conn] = reassemble(rows[0]["flow"], [tuple(row[name] for name in SEGMENT_COLUMNS) for row in rows], frozenset())
    assert (conn.c2s.gap_count, sum(len(data) for _, data, _ in conn.c2s.chunks)) == (0, sent)
    lengths = pcap_record_lengths(output.read_bytes())
    assert [(kept, original) for kept, original in lengths if kept != original] == []
    assert max(original for _, original in lengths) > 65_535, "no frame longer than 65,535 bytes: no test"
    listener.close()


def pcap_record_lengths(data: bytes) -> list[tuple[int, int]]:
    """Each record's captured and original length (a little-endian pcap, as the capture writes)."""
    lengths, offset = [], 24
    while offset < len(data):
        kept, original = struct.unpack_from("<II", data, offset + 8)
        lengths.append((kept, original))
        offset += 16 + kept
    return lengths
