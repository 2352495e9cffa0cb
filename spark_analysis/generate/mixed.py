"""The ``mixed`` workload: a discrete-event simulation of one nsqd and its clients on loopback. Producers (PUB,
MPUB, DPUB), consumers with RDY windows that FIN, REQ (immediate and delayed), TOUCH and sometimes leave a message to
time out (redelivered with attempts + 1), heartbeats answered by NOP, FINs of made-up IDs (E_FIN_FAILED), one
publisher with an invalid topic (E_BAD_TOPIC, fatal), one snappy and one deflate consumer, and CLS at the end.

``drop_fraction`` leaves that fraction of plain consumers' message segments out of the capture (sequence numbers
still advance, so the analyzer sees gaps). Every segment holds whole frames, so the truth is simply every count
over the *captured* events."""

from __future__ import annotations

import heapq
import json
import time

from nsq_protocol import wire
from spark_analysis.generate.capture import (
    EPOCH_NS,
    HEARTBEAT_NS,
    MS,
    MSG_TIMEOUT_NS,
    Connection,
    Consumer,
)
from spark_analysis.generate.truth import DEFINITIONS, ChannelTruth, truth_document

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


class MixedSimulation:
    def __init__(self, capture, rng, size, drop_fraction, progress):
        self.capture, self.rng, self.size, self.drop_fraction = capture, rng, size, drop_fraction
        self.progress = progress
        self.events: list = []
        self.order = 0
        self.channels: dict[tuple[str, str], ChannelTruth] = {}
        self.connections: list[tuple[Connection, str, str | None, str | None]] = []
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

    def later(self, delay_ns: int, conn: Connection, direction: str, data: bytes):
        """Send at a later time. Bytes are written at their own time, never ahead of it: within a
        stream, sequence order must be time order, as in any real capture."""
        self.at(self.now + delay_ns, self._send, conn, direction, data)

    def _send(self, conn: Connection, direction: str, data: bytes):
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

    def _connection(self, name: str) -> Connection:
        self.next_port += 1 + self.rng.randrange(3)
        conn = Connection(self.capture, name, self.next_port, self.rng.getrandbits(32))
        return conn

    def _setup(self):
        start = self.now
        for topic, (channels, _sizes, _share) in TOPICS.items():
            for channel, consumers in channels.items():
                truth = self.channels[(topic, channel)] = ChannelTruth()
                for rdy, codec in consumers:
                    conn = self._connection(f"{topic}/{channel}")
                    consumer = Consumer(conn, topic, channel, rdy, codec)
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

    def _handshake(self, conn: Connection, ts_ns: int, codec: str | None):
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

    def _publish(self, conn: Connection, command: str, topic: str):
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
    def _deliver(self, truth: ChannelTruth, msg_id: bytes, body: bytes, attempts: int, published_ns: int):
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

    def _settle(self, consumer: Consumer, truth: ChannelTruth, msg_id: bytes, event: str):
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

    def _heartbeat(self, conn: Connection, truth: ChannelTruth | None):
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
        return truth_document(DEFINITIONS, published, topics, self.connections, self.other_error_frames)
