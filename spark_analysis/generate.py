"""Seeded synthetic NSQ traffic as a pcap, with the exact truth a correct analyzer must report.

A discrete-event simulation of one nsqd and its clients on loopback: producers (PUB, MPUB, DPUB),
consumers with RDY windows that FIN, REQ (immediate and delayed), TOUCH and sometimes leave a
message to time out (redelivered with attempts + 1), heartbeats answered by NOP, FINs of made-up
IDs (E_FIN_FAILED), one publisher with an invalid topic (E_BAD_TOPIC, fatal), one snappy and one
deflate consumer, and CLS at the end. Bytes are written with struct (no per-packet objects).

``drop_fraction`` leaves that fraction of plain consumers' message segments out of the capture
(sequence numbers still advance, so the analyzer sees gaps). Every segment holds whole frames, so
the truth is simply every count over the *captured* events, computed with the definitions of the
recorded truth files (``DEFINITIONS``).

The ``bench`` workload is the traffic of nsq's bench_writer and bench_reader instead: few
long-lived connections, small messages in MPUB batches, consumers with RDY 2500 FINing every one.
There the per-message cost of an analysis shows, where the mixed workload's large bodies hide it.
The ``long`` workload puts that traffic on one connection that publishes and consumes: a connection as long as
the trace, for the analysis's memory per connection.
"""

from __future__ import annotations

import heapq
import json
import os
import random
import struct
import time

from conformance import wire

DEFINITIONS = {
    "note": "counts over what the capture holds: frames in dropped segments do not exist for the analyzer",
    "published.PUB/MPUB/DPUB": "messages accepted (OK received) per command type; MPUB_commands counts commands",
    "deliveries": "message frames captured on connections subscribed to the channel",
    "unique_messages_delivered / unique_messages_finished": "distinct IDs delivered / with a captured "
    "delivery "
    "directly followed by a successful FIN",
    "fin, req, touch": "successful FIN / REQ / TOUCH commands (made-up-ID FINs fail and are excluded)",
    "timeouts_redelivered": "captured deliveries directly followed by another captured delivery of the same "
    "message on the channel (no FIN/REQ between); noack_deliberate = the same here",
    "abandoned_by_disconnect": "always 0: every consumer ends with CLS",
    "e_fin_failed": "E_FIN_FAILED frames; all answer made-up IDs",
}

EPOCH_NS = 1_800_000_000 * 10**9
MS = 1_000_000
HEARTBEAT_NS = 1000 * MS
MSG_TIMEOUT_NS = 1000 * MS
MAX_SEGMENT = 65535 - 54  # Ethernet+IPv4+TCP frames of at most 65535 bytes, as many pcap readers (scapy) expect
SERVER = ("127.0.0.1", 4150)
BOGUS_FIN_EVERY = 3000  # a made-up-ID FIN after every n-th delivery of a consumer

# topic -> (channels {name: [(rdy, codec), ...]}, body size range, share of publishes)
TOPICS = {
    "orders": (
        {"billing": [(40, None), (25, None), (60, None)], "audit": [(50, None), (50, None)]},
        (400, 2400),
        0.35,
    ),
    "clicks": (
        {"analytics": [(100, None), (80, None)], "archive": [(100, None), (60, "snappy")]},
        (2000, 12000),
        0.5,
    ),
    "metrics": ({"rollup": [(30, None), (30, None)], "alerts": [(40, "deflate")]}, (80, 400), 0.15),
}
PRODUCERS = [
    ("PUB", "orders"),
    ("MPUB", "clicks"),
    ("MPUB", "orders"),
    ("DPUB", "orders"),
    ("MPUB", "metrics"),
    ("PUB", "metrics"),
]

# fraction of the publish rate each producer of a topic carries
PRODUCER_SHARE = {topic: share / sum(1 for _, t in PRODUCERS if t == topic) for topic, (_, _, share) in TOPICS.items()}

_PCAP_RECORD = struct.Struct("<IIII")
_TCP = struct.Struct(">HHIIBBHHH")
_IP_LENGTH = struct.Struct(">H")
_PCAPNG_EPB = struct.Struct("<IIIIIII")


class _Capture:
    """Packets to a pcap or pcapng file through an 8 MiB write buffer."""

    def __init__(self, path: str, file_format: str):
        self.handle = open(path, "wb")
        self.pcapng = file_format == "pcapng"
        self.buffer: list[bytes] = []
        self.buffered = 0
        self.bytes_written = 0
        if self.pcapng:
            shb = struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)
            idb = struct.pack("<HHI", 1, 0, 262144) + struct.pack("<HHB3xHH", 9, 1, 9, 0, 0)
            self._out(struct.pack("<II", 0x0A0D0D0A, 28) + shb + struct.pack("<I", 28))
            self._out(struct.pack("<II", 1, 32) + idb + struct.pack("<I", 32))
        else:
            self._out(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))

    def packet(self, ts_ns: int, frame: bytes):
        if self.pcapng:
            padding = -len(frame) % 4
            total = 32 + len(frame) + padding
            self._out(_PCAPNG_EPB.pack(6, total, 0, ts_ns >> 32, ts_ns & 0xFFFFFFFF, len(frame), len(frame)))
            self._out(frame + b"\0" * padding + struct.pack("<I", total))
        else:
            self._out(_PCAP_RECORD.pack(ts_ns // 10**9, ts_ns % 10**9 // 1000, len(frame), len(frame)))
            self._out(frame)

    def _out(self, data: bytes):
        self.buffer.append(data)
        self.buffered += len(data)
        if self.buffered >= 8 << 20:
            self.flush()

    def flush(self):
        self.handle.write(b"".join(self.buffer))
        self.bytes_written += self.buffered
        self.buffer, self.buffered = [], 0

    def close(self):
        self.flush()
        self.handle.close()


class _Connection:
    """One TCP connection: headers prebuilt per direction, sequence numbers, optional compression."""

    def __init__(self, capture: _Capture, name: str, client_port: int, isn: int):
        self.capture = capture
        self.name = name
        self.port = client_port
        self.seq = {"c2s": isn, "s2c": (isn * 7919) & 0xFFFFFFFF}
        ether = b"\0" * 12 + b"\x08\x00"
        address = bytes([127, 0, 0, 1])
        self.ip_tail = b"\0\0\x40\0\x40\x06\0\0" + address + address
        self.ether = ether
        self.ports = {"c2s": (client_port, SERVER[1]), "s2c": (SERVER[1], client_port)}
        self.encoders = {}
        self.closed = False
        self.delivered = 0  # all deliveries, captured or not
        self.counts = {
            "heartbeats": 0,
            "nops": 0,
            "deliveries": 0,
            "fin": 0,
            "req": 0,
            "touch": 0,
            "fin_failed": 0,
            "publish_commands": 0,
            "messages_published": 0,
            "cls": 0,
        }

    def _segment(self, direction: str, ts_ns: int, flags: int, payload: bytes = b"", captured: bool = True):
        sport, dport = self.ports[direction]
        other = "s2c" if direction == "c2s" else "c2s"
        seq = self.seq[direction]
        if captured:
            tcp = _TCP.pack(sport, dport, seq, self.seq[other], 0x50, flags, 65535, 0, 0)
            ip = b"\x45\x00" + _IP_LENGTH.pack(40 + len(payload)) + self.ip_tail
            self.capture.packet(ts_ns, self.ether + ip + tcp + payload)
        self.seq[direction] = (seq + len(payload) + (1 if flags & 0x03 else 0)) & 0xFFFFFFFF

    def open(self, ts_ns: int):
        self._segment("c2s", ts_ns, 0x02)
        self._segment("s2c", ts_ns + 20_000, 0x12)
        self._segment("c2s", ts_ns + 40_000, 0x10)

    def close(self, ts_ns: int):
        self._segment("c2s", ts_ns, 0x11)
        self._segment("s2c", ts_ns + 30_000, 0x11)
        self._segment("c2s", ts_ns + 60_000, 0x10)

    def send(self, direction: str, ts_ns: int, data: bytes, captured: bool = True):
        encoder = self.encoders.get(direction)
        if encoder is not None:
            data = encoder.encode(data)
        for start in range(0, len(data), MAX_SEGMENT):
            self._segment(direction, ts_ns, 0x18, data[start : start + MAX_SEGMENT], captured)

    def compress(self, codec: str):
        for direction in ("c2s", "s2c"):
            self.encoders[direction] = wire.SnappyStreamEncoder() if codec == "snappy" else wire.DeflateStreamEncoder(6)


class _Consumer:
    def __init__(self, conn: _Connection, topic: str, channel: str, rdy: int, codec: str | None):
        self.conn, self.topic, self.channel, self.rdy, self.codec = conn, topic, channel, rdy, codec
        self.in_flight = 0


class _ChannelTruth:
    def __init__(self):
        self.counts = {
            "deliveries": 0,
            "fin": 0,
            "req": 0,
            "req_delay0": 0,
            "req_delayed": 0,
            "touch": 0,
            "timeouts_redelivered": 0,
            "e_fin_failed": 0,
            "heartbeats": 0,
            "nops": 0,
        }
        self.by_attempts: dict[int, int] = {}
        self.delivered: set[bytes] = set()
        self.finished: set[bytes] = set()
        self.last_event: dict[bytes, str] = {}  # captured lifecycle position per message
        self.consumers: list[_Consumer] = []
        self.next_consumer = 0

    def as_truth(self, unique_delivered: int, unique_finished: int) -> dict:
        counts = self.counts
        return {
            "deliveries": counts["deliveries"],
            "deliveries_by_attempts": {str(k): v for k, v in sorted(self.by_attempts.items())},
            "unique_messages_delivered": unique_delivered,
            "unique_messages_finished": unique_finished,
            "fin": counts["fin"],
            "req": counts["req"],
            "req_delay0": counts["req_delay0"],
            "req_delayed": counts["req_delayed"],
            "touch": counts["touch"],
            "timeouts_redelivered": counts["timeouts_redelivered"],
            "noack_deliberate": counts["timeouts_redelivered"],
            "abandoned_by_disconnect": 0,
            "e_fin_failed": counts["e_fin_failed"],
            "e_fin_failed_deliberate_unknown_id": counts["e_fin_failed"],
            "e_fin_failed_unexpected": 0,
            "tcp_connections": len(self.consumers),
            "consumer_connections": [c.conn.name for c in self.consumers],
            "heartbeats": counts["heartbeats"],
            "nops": counts["nops"],
        }


def _truth_document(
    definitions: dict, messages_published: int, topics: dict, connections: list, other_error_frames: int
) -> dict:
    """The truth file of either workload: ``topics`` {topic: {"published": ..., "channels": {name: truth}}},
    ``connections`` [(connection, role, topic, channel)]."""
    channels = [c for t in topics.values() for c in t["channels"].values()]
    totals = {
        "messages_published": messages_published,
        "deliveries": sum(c["deliveries"] for c in channels),
        "fin": sum(c["fin"] for c in channels),
        "req": sum(c["req"] for c in channels),
        "touch": sum(c["touch"] for c in channels),
        "timeouts_redelivered": sum(c["timeouts_redelivered"] for c in channels),
        "e_fin_failed": sum(c["e_fin_failed"] for c in channels),
        "other_error_frames": other_error_frames,
        "heartbeats_all_connections": sum(conn.counts["heartbeats"] for conn, *_ in connections),
        "tcp_connections_nsqd_tcp_port": len(connections),
    }
    documented = [
        dict(conn.counts, name=conn.name, port=conn.port, role=role, topic=topic, channel=channel)
        for conn, role, topic, channel in connections
    ]
    return {"definitions": definitions, "totals": totals, "topics": topics, "connections": documented}


def generate(
    path: str,
    size: int,
    seed: int = 7,
    drop_fraction: float = 0.0,
    file_format: str = "pcap",
    progress: bool = False,
    workload: str = "mixed",
) -> dict:
    """Write ``path`` (about ``size`` bytes) and ``<stem>.truth.json``; return the truth.

    ``workload``: ``mixed`` (every feature, ~6 KB messages at ~3,000/s), ``bench`` (nsq's bench
    tools: 100-300 B messages in MPUB batches of 200, two producers and two RDY 2500 consumers) or
    ``long`` (the same traffic on a single connection that publishes and consumes)."""
    if workload not in WORKLOADS:
        raise ValueError(f"workload must be one of {', '.join(WORKLOADS)}, got {workload!r}")
    started = time.monotonic()
    rng = random.Random(seed)
    capture = _Capture(path, file_format)
    simulation = WORKLOADS[workload](capture, rng, size, drop_fraction, progress)
    simulation.run()
    capture.close()
    truth = simulation.truth()
    truth["file"] = {
        "path": path,
        "bytes": os.path.getsize(path),
        "format": file_format,
        "seed": seed,
        "drop_fraction": drop_fraction,
        "workload": workload,
        "generated_seconds": round(time.monotonic() - started, 3),
        "truth": os.path.splitext(path)[0] + ".truth.json",
    }
    with open(truth["file"]["truth"], "w") as handle:
        json.dump(truth, handle, indent=1)
    return truth


class _Simulation:
    def __init__(self, capture, rng, size, drop_fraction, progress):
        self.capture, self.rng, self.size, self.drop_fraction = capture, rng, size, drop_fraction
        self.progress = progress
        self.events: list = []
        self.order = 0
        self.channels: dict[tuple[str, str], _ChannelTruth] = {}
        self.connections: list[tuple[_Connection, str, str | None, str | None]] = []
        self.published = {
            t: {"PUB": 0, "MPUB": 0, "MPUB_commands": 0, "DPUB": 0, "total": 0, "publish_commands": 0} for t in TOPICS
        }
        self.id_counter = {t: 0 for t in TOPICS}
        self.other_error_frames = 0
        self.publishing = True
        self.body_pool = bytes(rng.choice(b'abcdefghijklmnopqrstuvwxyz0123456789 ,:{}"') for _ in range(1 << 16))
        self.next_port = 40000
        self.now = EPOCH_NS
        self.last_report = 0.0

    # -- scheduling -------------------------------------------------------------------------
    def at(self, ts_ns: int, action, *args):
        self.order += 1
        heapq.heappush(self.events, (ts_ns, self.order, action, args))

    def later(self, delay_ns: int, conn: _Connection, direction: str, data: bytes):
        """Send at a later time. Bytes are written at their own time, never ahead of it: within a
        stream, sequence order must be time order, as in any real capture."""
        self.at(self.now + delay_ns, self._send, conn, direction, data)

    def _send(self, conn: _Connection, direction: str, data: bytes):
        if not conn.closed:
            conn.send(direction, self.now, data)

    def run(self):
        self._setup()
        while self.events:
            self.now, _, action, args = heapq.heappop(self.events)
            action(*args)
            if self.publishing and self.capture.bytes_written + self.capture.buffered >= self.size:
                self.publishing = False
                self.at(self.now + 3000 * MS, self._finish)
            if self.progress and time.monotonic() - self.last_report > 2:
                self.last_report = time.monotonic()
                print(
                    f"  generated {(self.capture.bytes_written + self.capture.buffered) / 1e6:,.0f} MB",
                    flush=True,
                )

    def _connection(self, name: str) -> _Connection:
        self.next_port += 1 + self.rng.randrange(3)
        conn = _Connection(self.capture, name, self.next_port, self.rng.getrandbits(32))
        return conn

    def _setup(self):
        start = self.now
        for topic, (channels, _sizes, _share) in TOPICS.items():
            for channel, consumers in channels.items():
                truth = self.channels[(topic, channel)] = _ChannelTruth()
                for rdy, codec in consumers:
                    conn = self._connection(f"{topic}/{channel}")
                    consumer = _Consumer(conn, topic, channel, rdy, codec)
                    truth.consumers.append(consumer)
                    self.connections.append((conn, "consumer", topic, channel))
                    start += 2 * MS
                    self._handshake(conn, start, codec)
                    conn.send("c2s", start + 1 * MS, wire.encode_command("SUB", topic, channel))
                    conn.send("s2c", start + 1 * MS + 40_000, wire.encode_frame(wire.FRAME_RESPONSE, b"OK"))
                    conn.send("c2s", start + 1 * MS + 80_000, wire.encode_command("RDY", rdy))
                    self.at(start + HEARTBEAT_NS, self._heartbeat, conn, truth)
        for number, (command, topic) in enumerate(PRODUCERS):
            conn = self._connection(f"producer-{number}")
            self.connections.append((conn, "producer", topic, None))
            start += 2 * MS
            self._handshake(conn, start, None)
            self.at(start + HEARTBEAT_NS, self._heartbeat, conn, None)
            self.at(start + 200 * MS, self._publish, conn, command, topic)
        self.at(start + 500 * MS, self._bad_topic)

    def _handshake(self, conn: _Connection, ts_ns: int, codec: str | None):
        conn.open(ts_ns)
        identify = {
            "client_id": conn.name,
            "feature_negotiation": True,
            "heartbeat_interval": 1000,
            "msg_timeout": 1000,
            "snappy": codec == "snappy",
            "deflate": codec == "deflate",
            "deflate_level": 6,
        }
        conn.send(
            "c2s",
            ts_ns + 100_000,
            wire.MAGIC_V2 + wire.encode_command("IDENTIFY", body=wire.identify_body(identify)),
        )
        response = {
            "max_rdy_count": 2500,
            "version": "1.3.0",
            "max_msg_timeout": 900000,
            "msg_timeout": 1000,
            "tls_v1": False,
            "deflate": codec == "deflate",
            "deflate_level": 6,
            "max_deflate_level": 6,
            "snappy": codec == "snappy",
            "sample_rate": 0,
            "auth_required": False,
            "output_buffer_size": 16384,
            "output_buffer_timeout": 250,
        }
        conn.send("s2c", ts_ns + 200_000, wire.encode_frame(wire.FRAME_RESPONSE, json.dumps(response).encode()))
        if codec:
            conn.compress(codec)
            # ID-30: the OK already goes through the new layer
            conn.send("s2c", ts_ns + 250_000, wire.encode_frame(wire.FRAME_RESPONSE, b"OK"))

    def _bad_topic(self):
        conn = self._connection("bad-topic")
        self.connections.append((conn, "producer", None, None))
        conn.open(self.now)
        conn.send("c2s", self.now + 100_000, wire.MAGIC_V2 + wire.encode_command("PUB", "bad!topic", body=b"x"))
        conn.send(
            "s2c",
            self.now + 200_000,
            wire.encode_frame(wire.FRAME_ERROR, b'E_BAD_TOPIC PUB topic name "bad!topic" is not valid'),
        )
        conn.counts["publish_commands"] += 1
        self.other_error_frames += 1
        conn._segment("s2c", self.now + 300_000, 0x11)  # C-23: fatal, nsqd closes
        conn._segment("c2s", self.now + 350_000, 0x11)

    # -- producers ----------------------------------------------------------------------------
    def _body(self, topic: str) -> bytes:
        low, high = TOPICS[topic][1]
        length = self.rng.randrange(low, high)
        start = self.rng.randrange(len(self.body_pool) - length)
        return b"%s-%d:" % (topic.encode(), self.id_counter[topic]) + self.body_pool[start : start + length]

    def _publish(self, conn: _Connection, command: str, topic: str):
        if not self.publishing:
            return
        if command == "MPUB":
            bodies = [self._body(topic) for _ in range(self.rng.randrange(5, 60))]
            data = wire.encode_command("MPUB", topic, body=wire.mpub_body(bodies))
            defer = 0
        else:
            bodies = [self._body(topic)]
            defer = self.rng.randrange(100, 2500) if command == "DPUB" else 0
            data = wire.encode_command(command, topic, *([defer] if command == "DPUB" else []), body=bodies[0])
        conn.send("c2s", self.now, data)
        self.later(60_000, conn, "s2c", wire.encode_frame(wire.FRAME_RESPONSE, b"OK"))
        conn.counts["publish_commands"] += 1
        conn.counts["messages_published"] += len(bodies)
        entry = self.published[topic]
        entry[command] += len(bodies)
        entry["total"] += len(bodies)
        entry["publish_commands"] += 1
        entry["MPUB_commands"] += command == "MPUB"
        for body in bodies:
            self.id_counter[topic] += 1
            msg_id = b"%016x" % (0x0A000000000000 + self.id_counter[topic])
            for (name, _channel), truth in self.channels.items():
                if name == topic:
                    self.at(self.now + 80_000 + defer * MS, self._deliver, truth, msg_id, body, 1, self.now)
        # ~3000 messages/s in all: consumers keep up within their RDY windows (D-01)
        pause = int(len(bodies) * 333_333 / PRODUCER_SHARE[topic]) + self.rng.randrange(50_000)
        self.at(self.now + pause, self._publish, conn, command, topic)

    # -- deliveries and consumers ----------------------------------------------------------------
    def _deliver(self, truth: _ChannelTruth, msg_id: bytes, body: bytes, attempts: int, published_ns: int):
        consumers = truth.consumers
        for step in range(len(consumers)):
            consumer = consumers[(truth.next_consumer + step) % len(consumers)]
            if consumer.in_flight < consumer.rdy:  # D-01
                truth.next_consumer = (truth.next_consumer + step + 1) % len(consumers)
                break
        else:
            self.at(self.now + 5 * MS, self._deliver, truth, msg_id, body, attempts, published_ns)
            return
        consumer.in_flight += 1
        conn = consumer.conn
        frame = wire.encode_frame(wire.FRAME_MESSAGE, wire.encode_message(published_ns, attempts, msg_id, body))
        captured = consumer.codec is not None or self.rng.random() >= self.drop_fraction
        conn.send("s2c", self.now, frame, captured)
        conn.delivered += 1
        if captured:
            conn.counts["deliveries"] += 1
            truth.counts["deliveries"] += 1
            truth.by_attempts[attempts] = truth.by_attempts.get(attempts, 0) + 1
            truth.delivered.add(msg_id)
            if truth.last_event.get(msg_id) == "deliver":
                truth.counts["timeouts_redelivered"] += 1
            truth.last_event[msg_id] = "deliver"
        if conn.delivered % BOGUS_FIN_EVERY == 0:
            self.at(self.now + 150_000, self._bogus_fin, consumer, truth)
        roll = self.rng.random() if attempts < 3 else 1.0
        react = self.now + self.rng.randrange(100_000, 2 * MS)
        if roll < 0.04:
            delay_ms = 0 if roll < 0.02 else self.rng.randrange(300, 1500)
            self.at(react, self._req, consumer, truth, msg_id, body, attempts, published_ns, delay_ms)
        elif roll < 0.05:
            self.at(self.now + 400 * MS, self._touch, consumer, truth, msg_id)
            self.at(self.now + 1100 * MS, self._fin, consumer, truth, msg_id)
        elif roll < 0.055:
            # left un-FINed: nsqd's queue scan times it out (D-11, D-14) and redelivers it
            self.at(
                self.now + MSG_TIMEOUT_NS + self.rng.randrange(100 * MS),
                self._timeout,
                consumer,
                truth,
                msg_id,
                body,
                attempts,
                published_ns,
            )
        else:
            self.at(react, self._fin, consumer, truth, msg_id)

    def _settle(self, consumer: _Consumer, truth: _ChannelTruth, msg_id: bytes, event: str):
        consumer.in_flight -= 1
        if truth.last_event.get(msg_id) == "deliver" and event == "FIN":
            truth.finished.add(msg_id)
        if event == "FIN":
            truth.last_event.pop(msg_id, None)
        else:
            truth.last_event[msg_id] = event

    def _fin(self, consumer, truth, msg_id):
        consumer.conn.send("c2s", self.now, b"FIN " + msg_id + b"\n")
        consumer.conn.counts["fin"] += 1
        truth.counts["fin"] += 1
        self._settle(consumer, truth, msg_id, "FIN")

    def _req(self, consumer, truth, msg_id, body, attempts, published_ns, delay_ms):
        consumer.conn.send("c2s", self.now, b"REQ %s %d\n" % (msg_id, delay_ms))
        consumer.conn.counts["req"] += 1
        truth.counts["req"] += 1
        truth.counts["req_delay0" if delay_ms == 0 else "req_delayed"] += 1
        self._settle(consumer, truth, msg_id, "REQ")
        self.at(self.now + delay_ms * MS + 200_000, self._deliver, truth, msg_id, body, attempts + 1, published_ns)

    def _touch(self, consumer, truth, msg_id):
        consumer.conn.send("c2s", self.now, b"TOUCH " + msg_id + b"\n")
        consumer.conn.counts["touch"] += 1
        truth.counts["touch"] += 1

    def _timeout(self, consumer, truth, msg_id, body, attempts, published_ns):
        consumer.in_flight -= 1
        self._deliver(truth, msg_id, body, attempts + 1, published_ns)

    def _bogus_fin(self, consumer, truth):
        if consumer.conn.closed:
            return
        made_up = b"%016x" % (0xDEAD0000 + consumer.conn.delivered)
        consumer.conn.send("c2s", self.now, b"FIN " + made_up + b"\n")
        self.later(
            50_000,
            consumer.conn,
            "s2c",
            wire.encode_frame(wire.FRAME_ERROR, b"E_FIN_FAILED FIN " + made_up + b" failed ID not in flight"),
        )  # P-FIN-04
        consumer.conn.counts["fin"] += 1
        consumer.conn.counts["fin_failed"] += 1
        truth.counts["e_fin_failed"] += 1

    def _heartbeat(self, conn: _Connection, truth: _ChannelTruth | None):
        if conn.closed:
            return
        conn.send("s2c", self.now, wire.encode_frame(wire.FRAME_RESPONSE, wire.HEARTBEAT))  # C-26
        self.later(150_000, conn, "c2s", b"NOP\n")
        conn.counts["heartbeats"] += 1
        conn.counts["nops"] += 1
        if truth is not None:
            truth.counts["heartbeats"] += 1
            truth.counts["nops"] += 1
        self.at(self.now + HEARTBEAT_NS, self._heartbeat, conn, truth)

    def _finish(self):
        busy = any(c.in_flight for t in self.channels.values() for c in t.consumers) or any(
            action in (self._deliver, self._send) for _, _, action, _ in self.events
        )
        if busy:
            self.at(self.now + 500 * MS, self._finish)
            return
        for conn, role, _topic, _channel in self.connections:
            if conn.closed or conn.name == "bad-topic":
                continue
            if role == "consumer":
                conn.send("c2s", self.now, b"CLS\n")
                conn.send("s2c", self.now + 50_000, wire.encode_frame(wire.FRAME_RESPONSE, b"CLOSE_WAIT"))  # P-CLS-02
                conn.counts["cls"] += 1
            conn.close(self.now + 100_000)
            conn.closed = True
            self.now += 1 * MS
        self.events = [e for e in self.events if e[2] != self._heartbeat]
        heapq.heapify(self.events)

    # -- truth ----------------------------------------------------------------------------------
    def truth(self) -> dict:
        topics = {}
        for (topic, channel), truth in self.channels.items():
            entry = topics.setdefault(topic, {"published": self.published[topic], "channels": {}})
            entry["channels"][channel] = truth.as_truth(len(truth.delivered), len(truth.finished))
        published = sum(p["total"] for p in self.published.values())
        return _truth_document(DEFINITIONS, published, topics, self.connections, self.other_error_frames)


# -- the bench workload ------------------------------------------------------------------------------
BENCH_TOPIC, BENCH_CHANNEL = "sub_bench", "ch"
BENCH_PRODUCERS, BENCH_CONSUMERS = 2, 2
BENCH_BATCH = 200  # bench_writer's --batch-size
BENCH_BODY = (100, 300)
BENCH_RDY = 2500  # bench_reader's --rdy, nsqd's max_rdy_count
BENCH_ROUND_NS = 1 * MS  # one MPUB per round, producers in turn: 200,000 messages/s
BENCH_DEFINITIONS = {
    **DEFINITIONS,
    "workload": "bench: few long-lived connections as nsq's bench_writer and bench_reader make them; every "
    "message is delivered once to one consumer of the channel and FINed",
    "abandoned_by_disconnect": "always 0: every consumer ends with CLS",
}


class _BenchSimulation:
    """The Go bench tools' traffic: producers MPUB batches of small messages back to back, consumers
    with RDY 2500 take them in whole-frame segments and FIN every one. Time advances one MPUB
    round at a time; within a round, every stream's bytes go out in time order."""

    definitions = BENCH_DEFINITIONS

    def __init__(self, capture, rng, size, drop_fraction, progress):
        self.capture, self.rng, self.size, self.drop_fraction = capture, rng, size, drop_fraction
        self.progress = progress
        self.now = EPOCH_NS
        self.next_port = 40000
        self.producers: list[_Connection] = []
        self.consumers: list[_Connection] = []
        self.published = {"PUB": 0, "MPUB": 0, "MPUB_commands": 0, "DPUB": 0, "total": 0, "publish_commands": 0}
        self.channel = _ChannelTruth()
        self.delivered = 0  # captured deliveries: each message is delivered once, so also unique ones
        self.body_pool = bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(1 << 16))
        self.next_heartbeat = self.now + HEARTBEAT_NS
        self.last_report = 0.0

    def _connection(self, name: str) -> _Connection:
        self.next_port += 1 + self.rng.randrange(3)
        return _Connection(self.capture, name, self.next_port, self.rng.getrandbits(32))

    def _open(self):
        for number in range(BENCH_CONSUMERS):
            self._subscribe(self._connection(f"bench_reader-{number}"))
        for number in range(BENCH_PRODUCERS):
            conn = self._connection(f"bench_writer-{number}")
            self.producers.append(conn)
            self._start(conn)
            self.now += 1 * MS

    def _subscribe(self, conn: _Connection):
        self.consumers.append(conn)
        self.channel.consumers.append(_Consumer(conn, BENCH_TOPIC, BENCH_CHANNEL, BENCH_RDY, None))
        self._start(conn)
        conn.send("c2s", self.now + 300_000, wire.encode_command("SUB", BENCH_TOPIC, BENCH_CHANNEL))
        conn.send("s2c", self.now + 340_000, wire.encode_frame(wire.FRAME_RESPONSE, b"OK"))
        conn.send("c2s", self.now + 380_000, wire.encode_command("RDY", BENCH_RDY))
        self.now += 1 * MS

    def _connections(self) -> list[_Connection]:
        return self.consumers + self.producers

    def run(self):
        self._open()
        message_number = 0
        rounds = 0
        while self.capture.bytes_written + self.capture.buffered < self.size:
            if self.now >= self.next_heartbeat:
                self._heartbeats()
            producer = self.producers[rounds % len(self.producers)]
            bodies = []
            for _ in range(BENCH_BATCH):
                length = self.rng.randrange(*BENCH_BODY)
                start = self.rng.randrange(len(self.body_pool) - length)
                bodies.append(b"%d:" % message_number + self.body_pool[start : start + length])
                message_number += 1
            producer.send("c2s", self.now, wire.encode_command("MPUB", BENCH_TOPIC, body=wire.mpub_body(bodies)))
            producer.send("s2c", self.now + 40_000, wire.encode_frame(wire.FRAME_RESPONSE, b"OK"))
            producer.counts["publish_commands"] += 1
            producer.counts["messages_published"] += len(bodies)
            for key in ("MPUB", "total"):
                self.published[key] += len(bodies)
            self.published["MPUB_commands"] += 1
            self.published["publish_commands"] += 1
            first_id = message_number - len(bodies)
            # nsqd hands the batch to the channel's consumers; each takes its share within RDY (D-01)
            share = -(-len(bodies) // len(self.consumers))
            for index, consumer in enumerate(self.consumers):
                mine = bodies[index * share : (index + 1) * share]
                ids = [b"%016x" % (0x0B000000000000 + first_id + index * share + k) for k in range(len(mine))]
                self._deliver(consumer, ids, mine, self.now + 60_000 + index * 10_000)
                consumer.send("c2s", self.now + 300_000 + index * 10_000, b"".join(b"FIN %s\n" % i for i in ids))
                consumer.counts["fin"] += len(ids)
                self.channel.counts["fin"] += len(ids)
            self.now += BENCH_ROUND_NS
            rounds += 1
            if self.progress and time.monotonic() - self.last_report > 2:
                self.last_report = time.monotonic()
                print(f"  generated {(self.capture.bytes_written + self.capture.buffered) / 1e6:,.0f} MB", flush=True)
        for conn in self.consumers:
            conn.send("c2s", self.now, b"CLS\n")
            conn.send("s2c", self.now + 50_000, wire.encode_frame(wire.FRAME_RESPONSE, b"CLOSE_WAIT"))  # P-CLS-02
            conn.counts["cls"] += 1
        for conn in self._connections():
            conn.close(self.now + 100_000)
            self.now += 1 * MS

    def _start(self, conn: _Connection):
        conn.open(self.now)
        identify = {"client_id": conn.name, "feature_negotiation": True, "heartbeat_interval": 1000}
        conn.send(
            "c2s",
            self.now + 100_000,
            wire.MAGIC_V2 + wire.encode_command("IDENTIFY", body=wire.identify_body(identify)),
        )
        response = {
            "max_rdy_count": BENCH_RDY,
            "version": "1.3.0",
            "msg_timeout": 60000,
            "tls_v1": False,
            "deflate": False,
            "snappy": False,
            "output_buffer_size": 16384,
            "output_buffer_timeout": 250,
        }
        conn.send("s2c", self.now + 200_000, wire.encode_frame(wire.FRAME_RESPONSE, json.dumps(response).encode()))

    def _deliver(self, consumer: _Connection, ids: list[bytes], bodies: list[bytes], ts_ns: int):
        """Message frames in segments of whole frames, so a dropped segment drops whole deliveries."""
        segment: list[bytes] = []
        size = count = 0
        for msg_id, body in zip(ids, bodies, strict=True):
            frame = wire.encode_frame(wire.FRAME_MESSAGE, wire.encode_message(ts_ns - 60_000, 1, msg_id, body))
            if size + len(frame) > MAX_SEGMENT:
                self._delivery_segment(consumer, ts_ns, segment, count)
                segment, size, count = [], 0, 0
            segment.append(frame)
            size += len(frame)
            count += 1
        if segment:
            self._delivery_segment(consumer, ts_ns, segment, count)

    def _delivery_segment(self, consumer: _Connection, ts_ns: int, frames: list[bytes], count: int):
        captured = self.rng.random() >= self.drop_fraction
        consumer.send("s2c", ts_ns, b"".join(frames), captured)
        consumer.delivered += count
        if captured:
            consumer.counts["deliveries"] += count
            self.channel.counts["deliveries"] += count
            self.delivered += count
            self.channel.by_attempts[1] = self.channel.by_attempts.get(1, 0) + count

    def _heartbeats(self):
        for conn in self._connections():
            conn.send("s2c", self.now, wire.encode_frame(wire.FRAME_RESPONSE, wire.HEARTBEAT))  # C-26
            conn.send("c2s", self.now + 20_000, b"NOP\n")
            conn.counts["heartbeats"] += 1
            conn.counts["nops"] += 1
        self.channel.counts["heartbeats"] += len(self.consumers)
        self.channel.counts["nops"] += len(self.consumers)
        self.next_heartbeat += HEARTBEAT_NS
        self.now += 40_000

    def truth(self) -> dict:
        # every delivery is FINed, and every FIN captured: the unique messages finished are the ones delivered
        channel = self.channel.as_truth(self.delivered, self.delivered)
        topics = {BENCH_TOPIC: {"published": self.published, "channels": {BENCH_CHANNEL: channel}}}
        connections = [(conn, "consumer", BENCH_TOPIC, BENCH_CHANNEL) for conn in self.consumers]
        connections += [(conn, "producer", BENCH_TOPIC, None) for conn in self.producers
                        if conn not in self.consumers]
        return _truth_document(self.definitions, self.published["total"], topics, connections, 0)


class _LongSimulation(_BenchSimulation):
    """One connection for the whole trace: it publishes MPUB batches and consumes them (RDY 2500, a FIN for each),
    as a client that both publishes and subscribes does. A connection longer than anything decoded at once."""

    definitions = {
        **BENCH_DEFINITIONS,
        "workload": "long: one connection publishes MPUB batches of small messages and consumes them, FINing "
        "every one, for the whole trace",
    }

    def _open(self):
        conn = self._connection("publisher_and_reader")
        self._subscribe(conn)
        self.producers.append(conn)

    def _connections(self) -> list[_Connection]:
        return self.consumers


WORKLOADS = {"mixed": _Simulation, "bench": _BenchSimulation, "long": _LongSimulation}
