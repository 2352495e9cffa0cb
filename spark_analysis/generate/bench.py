"""The ``bench`` workload, the traffic of nsq's bench_writer and bench_reader: few long-lived connections, small
messages in MPUB batches, consumers with RDY 2500 FINing every one. There the per-message cost of an analysis
shows, where the mixed workload's large bodies hide it. The ``long`` workload puts that traffic on one connection
that publishes and consumes: a connection as long as the trace, for the analysis's memory per connection."""

from __future__ import annotations

import json
import time

from nsq_protocol import wire
from spark_analysis.generate.capture import EPOCH_NS, HEARTBEAT_NS, MAX_SEGMENT, MS, Connection, Consumer
from spark_analysis.generate.truth import DEFINITIONS, ChannelTruth, truth_document

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


class BenchSimulation:
    """The Go bench tools' traffic: producers MPUB batches of small messages back to back, consumers
    with RDY 2500 take them in whole-frame segments and FIN every one. Time advances one MPUB
    round at a time; within a round, every stream's bytes go out in time order."""

    definitions = BENCH_DEFINITIONS

    def __init__(self, capture, rng, size, drop_fraction, progress):
        self.capture, self.rng, self.size, self.drop_fraction = capture, rng, size, drop_fraction
        self.progress = progress
        self.now = EPOCH_NS
        self.next_port = 40000
        self.producers: list[Connection] = []
        self.consumers: list[Connection] = []
        self.published = {"PUB": 0, "MPUB": 0, "MPUB_commands": 0, "DPUB": 0, "total": 0, "publish_commands": 0}
        self.channel = ChannelTruth()
        self.delivered = 0  # captured deliveries: each message is delivered once, so also unique ones
        self.body_pool = bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(1 << 16))
        self.next_heartbeat = self.now + HEARTBEAT_NS
        self.last_report = 0.0

    def _connection(self, name: str) -> Connection:
        self.next_port += 1 + self.rng.randrange(3)
        return Connection(self.capture, name, self.next_port, self.rng.getrandbits(32))

    def _open(self):
        for number in range(BENCH_CONSUMERS):
            self._subscribe(self._connection(f"bench_reader-{number}"))
        for number in range(BENCH_PRODUCERS):
            conn = self._connection(f"bench_writer-{number}")
            self.producers.append(conn)
            self._start(conn)
            self.now += 1 * MS

    def _subscribe(self, conn: Connection):
        self.consumers.append(conn)
        self.channel.consumers.append(Consumer(conn, BENCH_TOPIC, BENCH_CHANNEL, BENCH_RDY, None))
        self._start(conn)
        conn.send("c2s", self.now + 300_000, wire.encode_command("SUB", BENCH_TOPIC, BENCH_CHANNEL))
        conn.send("s2c", self.now + 340_000, wire.encode_frame(wire.FRAME_RESPONSE, b"OK"))
        conn.send("c2s", self.now + 380_000, wire.encode_command("RDY", BENCH_RDY))
        self.now += 1 * MS

    def _connections(self) -> list[Connection]:
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

    def _start(self, conn: Connection):
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
            "max_msg_timeout": 900000,
            "msg_timeout": 60000,
            "tls_v1": False,
            "deflate": False,
            "deflate_level": 6,
            "max_deflate_level": 6,
            "snappy": False,
            "sample_rate": 0,
            "auth_required": False,
            "output_buffer_size": 16384,
            "output_buffer_timeout": 250,
        }
        conn.send("s2c", self.now + 200_000, wire.encode_frame(wire.FRAME_RESPONSE, json.dumps(response).encode()))

    def _deliver(self, consumer: Connection, ids: list[bytes], bodies: list[bytes], ts_ns: int):
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

    def _delivery_segment(self, consumer: Connection, ts_ns: int, frames: list[bytes], count: int):
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
        return truth_document(self.definitions, self.published["total"], topics, connections, 0)


class LongSimulation(BenchSimulation):
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

    def _connections(self) -> list[Connection]:
        return self.consumers
