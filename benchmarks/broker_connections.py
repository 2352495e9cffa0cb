"""Connection scale (`python -m benchmarks.broker_connections`): N concurrent subscribed connections against the
reference broker and, with --nsqd-bin, the real nsqd v1.3.0. Writes bench-results/connections.json.

For each broker, a fresh process (free loopback ports, a fresh --data-path) and one asyncio client process:

connect   N consumers connect at once, each `  V2`, `SUB conns c`, `RDY 1`; measured: when the last one got its
          OK, and how many never did within the phase timeout
open      with all N subscribed, a new publisher sends PUBs one at a time (ack latency), then one MPUB of a
          message for every consumer still without one (ack latency, a PUB right behind it, and the time until
          every consumer got its message); one GET /stats?format=json is timed too
close     all N consumers shut their sockets at once (N FINs in a burst); probes (a new connection, `PUB`, its
          OK, and GET /ping) run back to back from that moment for a few seconds; measured: the slowest probe,
          and when /stats shows no consumer

Throughout, another connection PUBs to a topic without channels every 50 ms: its slowest ack in each phase is
reported too, with the broker's CPU seconds (user, system) per phase and its peak thread count. Consumers answer
heartbeats with NOP and keep what they get in flight (RDY 1), so the MPUB reaches every one.

Targets (issue): all served within 8 s, a PUB acknowledged within 0.5 s while they are open, and healthy (the
slowest probe) within 1 s after they close. The machine is shared: the load average at the start goes into the
report.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import socket
import statistics
import struct
import sys
import time
import urllib.request

from .brokers import BrokerProgram, running
from .report import add_nsqd_arguments, machine, now, nsqd_program, table, version_of

DEFAULT_OUTPUT = "bench-results/connections.json"
TOPIC, CHANNEL = "conns", "c"
SIDE_TOPIC = "conns-side"  # no channel: what goes there stays there
TARGETS = {"all_served_s": 8.0, "pub_ack_max_s": 0.5, "close_slowest_probe_s": 1.0}
FRAME_RESPONSE, FRAME_MESSAGE = 0, 2
HEARTBEAT = b"_heartbeat_"
PUB_SAMPLES = 20
PUB_INTERVAL = 0.05  # seconds between the timed PUBs


async def read_frame(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    size, frame_type = struct.unpack(">ii", await reader.readexactly(8))
    return frame_type, await reader.readexactly(size - 4)


class Consumer:
    """One subscribed connection: records when SUB was acknowledged and when its first message came."""

    def __init__(self, started: float):
        self.started = started
        self.served_at: float | None = None
        self.first_message_at: float | None = None
        self.messages = 0
        self.error: str | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def run(self, address: tuple[str, int]) -> None:
        try:
            reader, self.writer = await asyncio.open_connection(*address)
            self.writer.write(b"  V2" + f"SUB {TOPIC} {CHANNEL}\n".encode() + b"RDY 1\n")
            frame_type, data = await read_frame(reader)
            if (frame_type, data) != (FRAME_RESPONSE, b"OK"):
                raise RuntimeError(f"SUB answered {frame_type} {data[:60]!r}")
            self.served_at = time.monotonic() - self.started
            while True:
                frame_type, data = await read_frame(reader)
                if frame_type == FRAME_MESSAGE:
                    self.messages += 1
                    if self.first_message_at is None:
                        self.first_message_at = time.monotonic()
                elif data == HEARTBEAT:
                    self.writer.write(b"NOP\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # closed: by the close phase, or by the broker (then `served_at` tells)
        except (OSError, RuntimeError) as error:
            self.error = f"{type(error).__name__}: {error}"

    def close(self) -> None:
        """FIN at once (asyncio would close the socket on a later turn of its loop), then the transport."""
        if self.writer is not None:
            self.writer.transport.get_extra_info("socket").shutdown(socket.SHUT_RDWR)
            self.writer.close()


class Publisher:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, address: tuple[str, int]) -> Publisher:
        reader, writer = await asyncio.open_connection(*address)
        writer.write(b"  V2")
        return cls(reader, writer)

    async def acked(self, command: bytes) -> float:
        """Send one publish command; seconds until its OK (heartbeats on the way are answered)."""
        started = time.monotonic()
        self.writer.write(command)
        while True:
            frame_type, data = await read_frame(self.reader)
            if data == HEARTBEAT:
                self.writer.write(b"NOP\n")
                continue
            if (frame_type, data) != (FRAME_RESPONSE, b"OK"):
                raise RuntimeError(f"publish answered {frame_type} {data[:60]!r}")
            return time.monotonic() - started

    def close(self) -> None:
        self.writer.close()


def pub(body: bytes, topic: str = TOPIC) -> bytes:
    return f"PUB {topic}\n".encode() + struct.pack(">i", len(body)) + body


def mpub(bodies: list[bytes]) -> bytes:
    payload = struct.pack(">i", len(bodies)) + b"".join(struct.pack(">i", len(b)) + b for b in bodies)
    return f"MPUB {TOPIC}\n".encode() + struct.pack(">i", len(payload)) + payload


def http_request(port: int, path: str, timeout: float, method: str = "GET") -> bytes:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                     data=b"" if method == "POST" else None)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.read()


async def timed_http(port: int, path: str, timeout: float = 30.0) -> tuple[float, bytes]:
    started = time.monotonic()
    body = await asyncio.to_thread(http_request, port, path, timeout)
    return time.monotonic() - started, body


def consumer_count(stats_body: bytes) -> int:
    topics = json.loads(stats_body).get("topics") or []
    channels = topics[0]["channels"] if topics else []
    return channels[0]["client_count"] if channels else 0


async def probe(address: tuple[str, int], http_port: int) -> float:
    """A new connection that publishes once, and /ping: seconds until both answered."""
    started = time.monotonic()
    publisher = await Publisher.connect(address)
    try:
        await publisher.acked(pub(b"probe"))
    finally:
        publisher.close()
    await asyncio.to_thread(http_request, http_port, "/ping", 30.0)
    return time.monotonic() - started


class BrokerWatch:
    """The broker process from the kernel's view: CPU seconds (user, system) and its thread count."""

    def __init__(self, pid: int):
        self.pid = pid
        self.peak_threads = 0

    def cpu(self) -> tuple[float, float]:
        fields = pathlib.Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return int(fields[11]) / ticks, int(fields[12]) / ticks  # utime, stime

    def sample_threads(self) -> None:
        for line in pathlib.Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("Threads:"):
                self.peak_threads = max(self.peak_threads, int(line.split()[1]))

    def cpu_since(self, before: tuple[float, float]) -> dict:
        user, system = self.cpu()
        return {"broker_cpu_user_s": round(user - before[0], 2), "broker_cpu_system_s": round(system - before[1], 2)}


async def publish_meanwhile(address: tuple[str, int], acks: list[float], stop: asyncio.Event) -> None:
    """PUBs to a topic nobody consumes, one every PUB_INTERVAL, until `stop`: the broker's responsiveness
    while connections come and go."""
    publisher = await Publisher.connect(address)
    try:
        while not stop.is_set():
            acks.append(await publisher.acked(pub(b"side", SIDE_TOPIC)))
            await asyncio.sleep(PUB_INTERVAL)
    finally:
        publisher.close()


async def measure(address: tuple[str, int], http_port: int, watch: BrokerWatch, connections: int,
                  phase_timeout: float, probe_seconds: float) -> dict:
    await asyncio.to_thread(http_request, http_port, f"/topic/create?topic={TOPIC}", 10.0, "POST")
    await asyncio.to_thread(http_request, http_port, f"/channel/create?topic={TOPIC}&channel={CHANNEL}", 10.0,
                            "POST")
    warm_up = await Publisher.connect(address)
    await warm_up.acked(pub(b"warm-up"))  # the topic exists; this message goes to the first consumer
    warm_up.close()
    side_acks: list[float] = []
    stop_side = asyncio.Event()
    side = asyncio.create_task(publish_meanwhile(address, side_acks, stop_side))
    await asyncio.sleep(PUB_INTERVAL)

    # connect
    cpu = watch.cpu()
    started = time.monotonic()
    consumers = [Consumer(started) for _ in range(connections)]
    tasks = [asyncio.create_task(c.run(address)) for c in consumers]
    deadline = started + phase_timeout
    while time.monotonic() < deadline and any(c.served_at is None and c.error is None and not t.done()
                                              for c, t in zip(consumers, tasks, strict=True)):
        watch.sample_threads()
        await asyncio.sleep(0.05)
    served = [c.served_at for c in consumers if c.served_at is not None]
    connect = {"served": len(served), "never_served": connections - len(served),
               "errors": sorted({c.error for c in consumers if c.error})[:5],
               "all_served_s": round(max(served), 3) if len(served) == connections else None,
               "median_served_s": round(statistics.median(served), 3) if served else None,
               "pub_ack_max_while_connecting_s": round(max(side_acks, default=0), 4),
               **watch.cpu_since(cpu)}
    watch.sample_threads()
    connect["broker_threads"] = watch.peak_threads

    # open
    cpu = watch.cpu()
    publisher = await Publisher.connect(address)
    side_acks.clear()
    pub_acks = []
    for _ in range(PUB_SAMPLES):
        pub_acks.append(await asyncio.wait_for(publisher.acked(pub(b"x" * 100)), phase_timeout))
        await asyncio.sleep(PUB_INTERVAL)
    stats_seconds, _ = await timed_http(http_port, f"/stats?format=json&topic={TOPIC}")
    fan_started = time.monotonic()
    without_a_message = connections - 1 - PUB_SAMPLES  # the warm-up and the PUBs each went to one consumer
    mpub_ack = await asyncio.wait_for(publisher.acked(mpub([b"y" * 100] * without_a_message)), phase_timeout)
    pub_during_fan_out = await asyncio.wait_for(publisher.acked(pub(b"z" * 100)), phase_timeout)
    while time.monotonic() < fan_started + phase_timeout and any(c.messages == 0 for c in consumers if c.served_at):
        await asyncio.sleep(0.01)
    reached = [c.first_message_at for c in consumers if c.first_message_at is not None]
    open_phase = {"pub_ack_median_s": round(statistics.median(pub_acks), 4),
                  "pub_ack_max_s": round(max(pub_acks + side_acks + [pub_during_fan_out]), 4),
                  "stats_json_s": round(stats_seconds, 3),
                  "mpub_ack_s": round(mpub_ack, 4),
                  "pub_ack_during_fan_out_s": round(pub_during_fan_out, 4),
                  "consumers_with_a_message": len(reached),
                  "all_reached_s": round(max(reached) - fan_started, 3) if reached else None,
                  **watch.cpu_since(cpu)}
    publisher.close()

    # close
    cpu = watch.cpu()
    side_acks.clear()
    closed_at = time.monotonic()
    for consumer in consumers:
        consumer.close()
    probes, drained_s = [], None
    while time.monotonic() < closed_at + probe_seconds or drained_s is None:
        probes.append(await asyncio.wait_for(probe(address, http_port), phase_timeout))
        if drained_s is None:
            _, body = await timed_http(http_port, f"/stats?format=json&topic={TOPIC}&include_clients=false")
            if consumer_count(body) == 0:
                drained_s = time.monotonic() - closed_at
        if time.monotonic() > closed_at + phase_timeout:
            break
    await asyncio.gather(*tasks, return_exceptions=True)
    stop_side.set()
    await side
    close = {"probes": len(probes), "close_slowest_probe_s": round(max(probes), 4),
             "close_first_probe_s": round(probes[0], 4),
             "pub_ack_max_while_closing_s": round(max(side_acks, default=0), 4),
             "all_consumers_gone_s": round(drained_s, 3) if drained_s is not None else None,
             **watch.cpu_since(cpu)}
    return {"connect": connect, "open": open_phase, "close": close}


def verdicts(result: dict) -> dict:
    values = {"all_served_s": result["connect"]["all_served_s"],
              "pub_ack_max_s": result["open"]["pub_ack_max_s"],
              "close_slowest_probe_s": result["close"]["close_slowest_probe_s"]}
    return {name: {"value": value, "target": TARGETS[name], "met": value is not None and value <= TARGETS[name]}
            for name, value in values.items()}


def run_one(program: BrokerProgram, connections: int, phase_timeout: float, probe_seconds: float) -> dict:
    with running(program) as broker:
        result = asyncio.run(measure(broker.tcp_address, broker.http_port, BrokerWatch(broker.pid), connections,
                                     phase_timeout, probe_seconds))
        result["peak_rss_mib"] = broker.peak_rss_mib()
    result["targets"] = verdicts(result)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_nsqd_arguments(parser)
    parser.set_defaults(output=DEFAULT_OUTPUT)
    parser.add_argument("--connections", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=1, help="runs per broker (each with a fresh broker)")
    parser.add_argument("--phase-timeout", type=float, default=60.0)
    parser.add_argument("--probe-seconds", type=float, default=3.0, help="how long probes run after the close")
    parser.add_argument("--skip-reference", action="store_true")
    args = parser.parse_args(argv)
    programs = [] if args.skip_reference else [BrokerProgram.reference()]
    if (nsqd := nsqd_program(args.nsqd_bin)) is not None:
        programs.append(nsqd)
    report = {"benchmark": "connections", "date": now(), "machine": machine(), "connections": args.connections,
              "targets": TARGETS, "brokers": {}}
    rows = []
    for program in programs:
        runs = []
        for index in range(args.runs):
            result = run_one(program, args.connections, args.phase_timeout, args.probe_seconds)
            runs.append(result)
            print(f"[{program.name} run {index + 1}] {json.dumps(result)}", file=sys.stderr)
            rows.append([program.name, result["connect"]["served"], result["connect"]["all_served_s"],
                         result["open"]["pub_ack_max_s"], result["open"]["stats_json_s"],
                         result["open"]["all_reached_s"], result["close"]["close_slowest_probe_s"],
                         result["close"]["all_consumers_gone_s"], result["peak_rss_mib"]])
        report["brokers"][program.name] = {"version": version_of(program), "runs": runs}
    output = pathlib.Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n")
    print(table([[str(cell) for cell in row] for row in rows],
                ["broker", "served", "all served s", "PUB ack max s", "/stats s", "fan-out s", "slowest probe s",
                 "consumers gone s", "peak RSS MiB"]))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
