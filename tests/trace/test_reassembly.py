"""TCP reassembly policy and NSQ decoding across gaps, on hand-built segments (no Spark)."""

from __future__ import annotations

import pyarrow as pa

from nsq_protocol import wire
from spark_analysis.decode.v2 import decode_connection
from spark_analysis.read.reassembly import Gap, reassemble

CLIENT, SERVER = ("10.0.0.1", 50000), ("10.0.0.2", 4150)
SYN, SYNACK, PSH = 0x02, 0x12, 0x18
PORTS = frozenset({4150})


def reassembled(segments, window_bytes=None):
    """The reassembly takes segments in capture-time order, as the analysis's sort hands them over."""
    return list(reassemble("f", sorted(segments, key=lambda segment: segment[0]), PORTS, window_bytes))


def seg(ts, direction, seq, payload=b"", flags=PSH):
    src, dst = (CLIENT, SERVER) if direction == "c2s" else (SERVER, CLIENT)
    return (ts, src[0], dst[0], src[1], dst[1], seq % (1 << 32), flags, payload)


def test_out_of_order_retransmitted_and_overlapping_segments():
    isn = (1 << 32) - 3  # sequence numbers wrap during the stream
    segments = [
        seg(1, "c2s", isn, flags=SYN),
        seg(5, "c2s", isn + 1 + 4, b"EFGH"),
        seg(3, "c2s", isn + 1, b"ABCD"),
        seg(6, "c2s", isn + 1, b"ABCD"),
        seg(7, "c2s", isn + 1 + 2, b"CDEFxy"),
    ]
    [conn] = reassembled(segments)
    stream = conn.c2s
    # Policy: lowest sequence number first; placed bytes are never overwritten, so the later
    # segment at offset 4 ("EFGH") loses to the earlier-starting overlap ("CDEFxy"), counted as conflict.
    assert [(o, d) for o, d, _ in stream.chunks] == [(0, b"ABCD"), (4, b"EFxy")]
    assert stream.gaps == []
    assert (stream.retransmitted_bytes, stream.conflicting_bytes) == (4 + 2 + 4, 2)
    # a chunk is usable once every byte up to its end has been captured
    assert [ts for _, _, ts in stream.chunks] == [3, 7]


def test_missing_bytes_become_an_explicit_gap():
    segments = [seg(1, "c2s", 100, flags=SYN), seg(2, "c2s", 101, b"abc"), seg(4, "c2s", 110, b"xyz")]
    [conn] = reassembled(segments)
    assert conn.c2s.gaps == [Gap(3, 6, 4)]
    assert conn.c2s.window_pieces == [(0, b"abc", 2), Gap(3, 6, 4), (9, b"xyz", 4)]


ACK, FINACK = 0x10, 0x11


def acked(ts, direction, seq, ack, flags=ACK, payload=b""):
    """A segment carrying the ACK number (the tuple's ninth field, as the analysis reads it)."""
    return (*seg(ts, direction, seq, payload, flags), ack)


def test_bytes_the_peer_acknowledged_but_the_capture_lost_at_a_streams_end_are_a_gap():
    """A sniffer that dropped the server's answer and all after it: no later byte reveals the hole, the client's ACK
    does (10 bytes, by the ACK's time); an ACK of a FIN alone reveals nothing. Windows give what a whole reading
    gives."""
    segments = [seg(1, "c2s", 100, flags=SYN), seg(1, "s2c", 500, flags=SYNACK), seg(2, "c2s", 101, b"abc"),
                seg(3, "s2c", 501, b"ok"), acked(4, "c2s", 104, 513)]
    [whole] = reassembled(segments)
    assert whole.s2c.gaps == [Gap(2, 10, 4)]
    windowed = [piece for conn in reassemble("f", segments, PORTS, window_bytes=1) for piece in conn.s2c.gaps]
    assert windowed == [Gap(2, 10, 4)]
    closed = [*segments[:4], seg(5, "s2c", 503, flags=FINACK), acked(6, "c2s", 104, 504, flags=FINACK)]
    [clean] = reassembled(closed)
    assert clean.s2c.gaps == [] and clean.c2s.gaps == []


def test_an_ack_within_what_was_captured_reveals_nothing():
    segments = [seg(1, "c2s", 100, flags=SYN), seg(1, "s2c", 500, flags=SYNACK), seg(2, "s2c", 501, b"hello"),
                acked(3, "c2s", 101, 504), acked(4, "c2s", 101, 506)]
    [conn] = reassembled(segments)
    assert conn.s2c.gaps == [] and [data for _, data, _ in conn.s2c.chunks] == [b"hello"]


def test_new_syn_starts_a_new_connection_and_retransmitted_syn_does_not():
    segments = [
        seg(1, "c2s", 10, flags=SYN),
        seg(2, "c2s", 10, flags=SYN),
        seg(3, "c2s", 11, b"a"),
        seg(9, "c2s", 5000, flags=SYN),
        seg(10, "c2s", 5001, b"b"),
    ]
    conns = reassembled(segments)
    assert [(c.epoch, c.c2s.chunks[0][1]) for c in conns] == [(0, b"a"), (1, b"b")]


def test_client_and_server_are_found_without_a_handshake():
    [conn] = reassembled([seg(1, "s2c", 77, wire.encode_frame(0, b"OK"))])
    assert (conn.client, conn.server) == (CLIENT, SERVER)


def message(msg_id: bytes, attempts=1) -> bytes:
    return wire.encode_frame(2, wire.encode_message(123, attempts, msg_id, b"body"))


def decoded(segments) -> list[tuple]:
    [conn] = reassembled(segments)
    table = decode_connection(conn, PORTS)
    return [
        (r["kind"], r["name"], r["msg_id"]) for r in table.to_pylist() if r["kind"] not in ("connection", "inflight")
    ]


def test_decoding_resumes_after_a_gap_at_the_next_frame():
    frames = [message(b"%016x" % i) for i in range(3)]
    server = [
        seg(1, "s2c", 0, flags=SYNACK),
        seg(2, "s2c", 1, frames[0]),
        seg(4, "s2c", 1 + len(frames[0]) + len(frames[1]), frames[2]),
    ]  # frames[1] not captured
    client = [seg(0, "c2s", 500, flags=SYN), seg(1, "c2s", 501, wire.MAGIC_V2 + b"SUB t c\nRDY 5\n")]
    rows = decoded(server + client)
    assert [r for r in rows if r[0] in ("frame", "gap", "error")] == [
        ("frame", "message", "0000000000000000"),
        ("gap", "gap", None),
        ("frame", "message", "0000000000000002"),
    ]


def test_capture_started_mid_connection_resyncs_both_directions():
    tail = message(b"%016x" % 9)
    server = [seg(5, "s2c", 1000, tail[7:] + message(b"%016x" % 10))]  # starts inside a frame
    client = [seg(6, "c2s", 2000, b"0000009\nFIN 000000000000000a\nNOP\n")]  # starts inside a FIN line
    rows = decoded(server + client)
    assert ("frame", "message", "000000000000000a") in rows
    assert [r for r in rows if r[0] == "command"] == [
        ("command", "FIN", "000000000000000a"),
        ("command", "NOP", None),
    ]
    assert sum(1 for r in rows if r[:2] == ("error", "undecodable_bytes")) == 2


def test_pairs_answers_in_command_order_and_fin_failures_by_id():
    client = [
        seg(0, "c2s", 10, flags=SYN),
        seg(
            1,
            "c2s",
            11,
            wire.MAGIC_V2
            + wire.encode_command("PUB", "t", body=b"x")
            + wire.encode_command("PUB", "bad!", body=b"y")
            + b"FIN 00000000000000ff\n",
        ),
    ]
    server = [
        seg(0, "s2c", 50, flags=SYNACK),
        seg(
            2,
            "s2c",
            51,
            wire.encode_frame(0, b"OK")
            + wire.encode_frame(1, b"E_FIN_FAILED FIN 00000000000000ff failed ID not in flight")
            + wire.encode_frame(1, b"E_BAD_TOPIC x"),
        ),
    ]
    [conn] = reassembled(client + server)
    table = decode_connection(conn, PORTS)
    rows = [r for r in table.to_pylist() if r["kind"] in ("command", "publish")]
    assert [(r["kind"], r["name"], r["status"], r["code"]) for r in rows] == [
        ("command", "PUB", "ok", None),
        ("publish", "PUB", "ok", None),
        ("command", "PUB", "error", "E_BAD_TOPIC"),
        ("publish", "PUB", "error", None),
        ("command", "FIN", "failed", "E_FIN_FAILED"),
    ]
    assert isinstance(table, pa.Table)


def test_tls_after_identify_is_reported_as_opaque():
    identify = wire.encode_command("IDENTIFY", body=wire.identify_body({"feature_negotiation": True, "tls_v1": True}))
    client = [seg(0, "c2s", 10, flags=SYN), seg(1, "c2s", 11, wire.MAGIC_V2 + identify + b"\x16\x03\x01\x02\x00")]
    server = [
        seg(0, "s2c", 50, flags=SYNACK),
        seg(2, "s2c", 51, wire.encode_frame(0, b'{"tls_v1":true,"snappy":false}') + b"\x16\x03\x03\x00\x7a"),
    ]
    [conn] = reassembled(client + server)
    rows = decode_connection(conn, PORTS).to_pylist()
    assert [(r["direction"], r["name"]) for r in rows if r["kind"] == "error"] == [
        ("s2c", "tls_opaque"),
        ("c2s", "tls_opaque"),
    ]
    assert [r["name"] for r in rows if r["kind"] == "command"] == ["IDENTIFY"]
    assert [r for r in rows if r["kind"] == "connection"][0]["connection"]["codec"] == "tls"
