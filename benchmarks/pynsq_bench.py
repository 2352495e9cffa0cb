"""nsq's bench_writer and bench_reader as a user would write them with pynsq, the official Python client, for a capture
(trace_pynsq_recording.py runs this under the sniffer): Writers, one connection each, MPUB batches of 200 distinct,
seeded 100-300 B bodies; one Reader with max_in_flight 2500 FINs every message. It stops when every message is FINed
and nsqd's /stats counts every FIN, or fails at its time limit, and writes what the clients observed as JSON.

    python benchmarks/pynsq_bench.py --tcp-port 4150 --http-port 4151 --messages 20000 --observed out.json

Paced for a Python sniffer: one batch goes out at a time (its deliveries, ~48 KB, stay below a full loopback
segment, whose frame a 65,535-byte read would cut short), and none while the sniffer's receive queue is long. Imports
only pynsq, tornado and the standard library: it runs in the interpreter that has pynsq.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys
import time
import urllib.request
from collections import Counter

import nsq
import tornado.ioloop

TOPIC, CHANNEL = "pynsq_bench", "ch"
BATCH = 200  # bench_writer's --batch-size
BODY = (100, 300)  # body lengths, the number prefix included
MAX_IN_FLIGHT = 2500  # bench_reader's --rdy, nsqd's max_rdy_count
WRITERS = 2
BACKLOG = BATCH  # messages published and not yet FINed beyond which the Writers wait
SNIFFER_BACKLOG = 1 << 20  # bytes queued for the sniffer beyond which the Writers wait (its buffer: 8 MiB)
NICE = 19  # the clients yield the CPU to the sniffer: short of it, they slow down instead of packets being lost
PROGRESS_SECONDS = 2.0
SETTLE_POLLS = 100  # /stats polls, 50 ms apart, for the broker to count the last FINs


class _Observing:
    """What a client saw: connections, heartbeats, error frames by code. A connection closing before the end fails
    the run (pynsq would reconnect: a connection the truth does not know)."""

    def _observe(self, run: _Run) -> None:
        self.run = run
        self.observed = {"connections": 0, "heartbeats": 0, "errors": Counter()}

    def _on_connection_ready(self, conn, **kwargs):
        self.observed["connections"] += 1
        conn.on("close", lambda conn, **_: self.run.fail(f"{conn} closed during the run"))
        super()._on_connection_ready(conn, **kwargs)

    def heartbeat(self, conn):
        self.observed["heartbeats"] += 1

    def _on_connection_error(self, conn, error, **kwargs):
        if type(error) is nsq.Error:  # an error frame; its subclasses are the client's own failures
            self.observed["errors"][str(error).split()[0]] += 1
        super()._on_connection_error(conn, error, **kwargs)

    def summary(self) -> dict:
        return {"connections": self.observed["connections"], "heartbeats": self.observed["heartbeats"],
                "errors": dict(self.observed["errors"])}


class _Reader(_Observing, nsq.Reader):
    """bench_reader: FINs every message (the handler returns True), counting deliveries, attempts and IDs."""

    def __init__(self, run: _Run, address: str):
        self._observe(run)
        self.deliveries, self.fin, self.redelivered = 0, 0, 0
        self.attempts: Counter = Counter()
        self.delivered: set[bytes] = set()
        super().__init__(message_handler=self.handle, topic=TOPIC, channel=CHANNEL, nsqd_tcp_addresses=[address],
                         max_in_flight=MAX_IN_FLIGHT)

    def handle(self, message) -> bool:
        self.deliveries += 1
        self.attempts[message.attempts] += 1
        if message.id in self.delivered:  # no REQ here: only a msg_timeout expiry delivers an ID again
            self.redelivered += 1
        self.delivered.add(message.id)
        self.fin += 1
        self.run.finished_one()
        return True  # pynsq sends FIN

    def summary(self) -> dict:
        return super().summary() | {
            "deliveries": self.deliveries,
            "deliveries_by_attempts": {str(k): v for k, v in sorted(self.attempts.items())},
            "unique_delivered": len(self.delivered),
            "fin": self.fin,
            "req": 0,
            "redelivered": self.redelivered,
        }


class _Writer(_Observing, nsq.Writer):
    """bench_writer: MPUB batches, counted when answered OK."""

    def __init__(self, run: _Run, address: str):
        self._observe(run)
        self.published = self.mpub_commands = self.in_flight = 0
        super().__init__([address])

    def ready(self) -> bool:
        return bool(self.conns) and not self.in_flight

    def send(self, batch: list[bytes]) -> None:
        self.in_flight += 1
        self.mpub(TOPIC, batch, callback=lambda conn, data: self.answered(data, len(batch)))

    def answered(self, data, count: int) -> None:
        self.in_flight -= 1
        if data != b"OK":
            self.run.fail(f"MPUB answered {data!r}")
            return
        self.published += count
        self.mpub_commands += 1
        self.run.published += count
        self.run.pump()

    def summary(self) -> dict:
        return super().summary() | {"published": self.published, "mpub_commands": self.mpub_commands}


class _Run:
    """The Writers and the Reader on one IOLoop; the Writers take turns, one batch at a time."""

    def __init__(self, tcp_port: int, http_port: int, messages: int, seed: int, quiet: bool):
        self.http_port, self.messages, self.quiet = http_port, messages, quiet
        self.loop = tornado.ioloop.IOLoop.current()
        self.sniffer = _SnifferQueue(os.getppid())
        self.bodies = _bodies(seed)
        self.sent = self.published = self.finished = self.batches = 0
        self.failure: str | None = None
        self.stats: dict | None = None
        self.started = time.monotonic()
        address = f"127.0.0.1:{tcp_port}"
        self.reader = _Reader(self, address)
        self.writers = [_Writer(self, address) for _ in range(WRITERS)]

    def go(self, timeout: float) -> float:
        tornado.ioloop.PeriodicCallback(self.pump, 5).start()  # the start, and a short sniffer queue again
        tornado.ioloop.PeriodicCallback(self.report, PROGRESS_SECONDS * 1000).start()
        limit = self.loop.call_later(timeout, lambda: self.fail(f"not done within {timeout:.0f} s"))
        self.loop.start()
        self.loop.remove_timeout(limit)
        seconds = time.monotonic() - self.started
        self.report()
        self.reader.close()
        for writer in self.writers:
            for conn in list(writer.conns.values()):
                conn.close()
        return seconds

    def pump(self) -> None:
        writer = self.writers[self.batches % WRITERS]
        if (writer.ready() and self.sent < self.messages and self.sent - self.finished < BACKLOG
                and self.sniffer.backlog() < SNIFFER_BACKLOG):
            self.batches += 1
            self.sent += BATCH
            writer.send([next(self.bodies) for _ in range(BATCH)])

    def finished_one(self) -> None:
        self.finished += 1
        if self.finished == self.messages:
            self.loop.add_callback(self.settle, SETTLE_POLLS)
        elif self.finished == self.sent:
            self.loop.add_callback(self.pump)

    def settle(self, polls: int) -> None:
        """The last FIN is sent; the broker counts it a moment later: poll /stats until it shows every one (the loop
        keeps running meanwhile, to write what the sockets have not taken yet)."""
        stats = _channel_stats(self.http_port)
        clients = stats["channel"]["clients"] if stats["channel"] else []
        if sum(c["finish_count"] for c in clients) >= self.messages and stats["channel"]["in_flight_count"] == 0:
            self.stats = stats
            self.loop.stop()
        elif polls:
            self.loop.call_later(0.05, self.settle, polls - 1)
        else:
            self.fail(f"the broker did not count every FIN: {stats}")

    def fail(self, reason: str) -> None:
        if self.stats is None:  # the clients' own closes at the end are no failure
            self.failure = self.failure or reason
            self.loop.stop()

    def report(self) -> None:
        if not self.quiet:
            elapsed = time.monotonic() - self.started
            print(f"  {elapsed:5.1f}s  published {self.published:,} / {self.messages:,}, FINed {self.finished:,} "
                  f"({self.finished / elapsed:,.0f} messages/s)", file=sys.stderr, flush=True)


class _SnifferQueue:
    """The bytes waiting in the parent's (the recorder's) packet sockets, the sniffer's receive queue
    (/proc/net/packet's Rmem): the Writers publish only while it is short, so the run goes as fast as the sniffer
    keeps up, no faster. Without a parent sniffing, always 0."""

    def __init__(self, recorder_pid: int):
        self.inodes = set()
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{recorder_pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{recorder_pid}/fd/{fd}")
                    if target.startswith("socket:["):
                        self.inodes.add(target[8:-1])

    def backlog(self) -> int:
        with open("/proc/net/packet") as table:
            next(table)  # sk RefCnt Type Proto Iface R Rmem User Inode
            rows = [line.split() for line in table]
        return sum(int(row[6]) for row in rows if row[8] in self.inodes)


def _bodies(seed: int):
    """Distinct bodies of 100-300 bytes: a running number, then letters and digits from a seeded pool."""
    rng = random.Random(seed)
    pool = bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(1 << 16))
    number = 0
    while True:
        head = b"%d:" % number
        length = rng.randrange(*BODY) - len(head)
        start = rng.randrange(len(pool) - length)
        yield head + pool[start : start + length]
        number += 1


def _channel_stats(http_port: int) -> dict:
    """nsqd's /stats of the topic, its channel (with the Reader's connections) and the producers (the Writers')."""
    url = f"http://127.0.0.1:{http_port}/stats?format=json&topic={TOPIC}&channel={CHANNEL}"
    with urllib.request.urlopen(url, timeout=10) as response:
        document = json.load(response)
    [topic] = document["topics"]
    channels = topic.pop("channels")
    return {"topic": topic, "channel": channels[0] if channels else None, "producers": document["producers"] or []}


def run(tcp_port: int, http_port: int, messages: int, seed: int, timeout: float, quiet: bool = False) -> dict:
    """Publish ``messages`` (a multiple of the batch) and FIN them all; return what the clients observed and the
    broker's /stats for the topic and channel (its clients included) at the end."""
    if messages <= 0 or messages % BATCH:
        raise ValueError(f"messages must be a positive multiple of the batch size {BATCH}, got {messages}")
    os.nice(NICE)
    bench = _Run(tcp_port, http_port, messages, seed, quiet)
    seconds = bench.go(timeout)
    if bench.failure:
        raise RuntimeError(bench.failure)
    return {
        "client": f"pynsq {nsq.__version__}, tornado {tornado.version}",
        "topic": TOPIC,
        "channel": CHANNEL,
        "seed": seed,
        "seconds": round(seconds, 2),
        "reader": bench.reader.summary(),
        "writers": [writer.summary() for writer in bench.writers],
        "broker_stats": bench.stats,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tcp-port", type=int, required=True, help="nsqd's TCP port on 127.0.0.1")
    parser.add_argument("--http-port", type=int, required=True, help="nsqd's HTTP port on 127.0.0.1 (/stats)")
    parser.add_argument("--messages", type=int, required=True, help=f"a multiple of {BATCH}")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--timeout", type=float, required=True, help="seconds the run may take")
    parser.add_argument("--observed", required=True, help="where the observations go (JSON)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    args = parser.parse_args(argv)
    try:
        observed = run(args.tcp_port, args.http_port, args.messages, args.seed, args.timeout, args.quiet)
    except (RuntimeError, ValueError) as exc:
        print(f"pynsq bench failed: {exc}", file=sys.stderr)
        return 1
    with open(args.observed, "w") as handle:
        json.dump(observed, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
