"""Reference broker throughput (`tox -e bench`): MPUB publish and RDY/FIN consume, measured from the
outside with a multi-process load generator, written to bench-results/broker.json.

Shape of the load (issue #2): publishers send MPUB batches of 200 messages of 100 bytes, pipelined; then
consumers on one channel drain the same messages with RDY 2500, FINing each one.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import pathlib
import platform
import socket
import struct
import time

from reference_broker.launcher import running_broker

TOPIC, CHANNEL = "bench", "consumers"
BATCH, BODY_SIZE, RDY = 200, 100, 2500
PIPELINE_WINDOW = 8  # MPUBs in flight per publisher connection


def _connect(address) -> socket.socket:
    sock = socket.create_connection(address)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(b"  V2")
    return sock


def _frames(sock: socket.socket, buffer: bytearray):
    """Yield (type, data) frames forever, reading as needed."""
    while True:
        pos = 0
        while len(buffer) - pos >= 8:
            size, frame_type = struct.unpack_from(">Ii", buffer, pos)
            if len(buffer) - pos < 4 + size:
                break
            yield frame_type, bytes(buffer[pos + 8:pos + 4 + size])
            pos += 4 + size
        del buffer[:pos]
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buffer += chunk


def publisher(address, batches: int, start, results) -> None:
    body = struct.pack(">I", BATCH) + (struct.pack(">I", BODY_SIZE) + b"x" * BODY_SIZE) * BATCH
    command = b"MPUB %s\n" % TOPIC.encode() + struct.pack(">I", len(body)) + body
    sock = _connect(address)
    start.wait()
    began = time.perf_counter()
    sent = min(PIPELINE_WINDOW, batches)
    sock.sendall(command * sent)
    acknowledged = 0
    for frame_type, data in _frames(sock, bytearray()):
        if frame_type != 0 or data not in (b"OK", b"_heartbeat_"):
            raise RuntimeError(f"publish failed: {data!r}")
        if data == b"_heartbeat_":
            sock.sendall(b"NOP\n")
            continue
        acknowledged += 1
        if acknowledged == batches:
            break
        if sent < batches:
            sock.sendall(command)
            sent += 1
    results.put(("publish", acknowledged * BATCH, began, time.perf_counter()))
    sock.close()


def consumer(address, total, start, results) -> None:
    """Drain the channel together with the other consumers until `total` (a shared counter) is reached."""
    sock = _connect(address)
    sock.sendall(b"SUB %s %s\n" % (TOPIC.encode(), CHANNEL.encode()))
    frames = _frames(sock, bytearray())
    if next(frames) != (0, b"OK"):
        raise RuntimeError("SUB failed")
    received_everywhere, quota = total
    start.wait()
    began = time.perf_counter()
    sock.sendall(b"RDY %d\n" % RDY)
    sock.settimeout(0.2)
    received, buffer = 0, bytearray()
    while received_everywhere.value < quota:
        try:
            chunk = sock.recv(1 << 20)
        except TimeoutError:
            continue
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buffer += chunk
        replies, messages, pos = [], 0, 0
        while len(buffer) - pos >= 8:
            size, frame_type = struct.unpack_from(">Ii", buffer, pos)
            if len(buffer) - pos < 4 + size:
                break
            if frame_type == 2:
                replies.append(b"FIN " + bytes(buffer[pos + 18:pos + 34]) + b"\n")
                messages += 1
            elif buffer[pos + 8:pos + 4 + size] == b"_heartbeat_":
                replies.append(b"NOP\n")
            pos += 4 + size
        del buffer[:pos]
        if replies:
            sock.sendall(b"".join(replies))
        received += messages
        with received_everywhere.get_lock():
            received_everywhere.value += messages
    results.put(("consume", received, began, time.perf_counter()))
    sock.close()


def _run_phase(target, processes: int, work: list, address) -> dict:
    start = multiprocessing.Event()
    results = multiprocessing.Queue()
    workers = [multiprocessing.Process(target=target, args=(address, share, start, results)) for share in work]
    for worker in workers:
        worker.start()
    time.sleep(0.5)  # every connection is set up before the clock starts
    start.set()
    outcomes = [results.get(timeout=600) for _ in workers]
    for worker in workers:
        worker.join()
    messages = sum(o[1] for o in outcomes)
    seconds = max(o[3] for o in outcomes) - min(o[2] for o in outcomes)
    return {"processes": processes, "messages": messages, "seconds": round(seconds, 3),
            "msgs_per_second": round(messages / seconds)}


def _create_channel(address) -> None:
    """A SUB creates the topic and the (non-ephemeral) channel, which stays after the close."""
    sock = _connect(address)
    sock.sendall(b"SUB %s %s\n" % (TOPIC.encode(), CHANNEL.encode()))
    if next(_frames(sock, bytearray())) != (0, b"OK"):
        raise RuntimeError("SUB failed")
    sock.close()


def _peak_rss_mib(pid: int) -> float:
    """The broker's high-water mark of resident memory (VmHWM), in MiB."""
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError("no VmHWM in /proc status")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages per phase (default 1M)")
    parser.add_argument("--publishers", type=int, default=2)
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument("--output", default="bench-results/broker.json")
    args = parser.parse_args()

    batches = args.messages // BATCH
    with running_broker("--mem-queue-size=10000") as broker:
        _create_channel(broker.tcp_address)
        publish_shares = [batches // args.publishers + (i < batches % args.publishers)
                          for i in range(args.publishers)]
        publish = _run_phase(publisher, args.publishers, publish_shares, broker.tcp_address)
        total = publish["messages"]
        peak_after_publish = _peak_rss_mib(broker.process.pid)
        shared_total = (multiprocessing.Value("q", 0), total)
        consume = _run_phase(consumer, args.consumers, [shared_total] * args.consumers, broker.tcp_address)
        peak = _peak_rss_mib(broker.process.pid)

    report = {
        "benchmark": "reference_broker throughput",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "load": {"mpub_batch": BATCH, "body_bytes": BODY_SIZE, "rdy": RDY, "pipeline_window": PIPELINE_WINDOW},
        "publish": publish,
        "consume": consume,
        "broker_peak_rss_mib": {"holding_all_messages": peak_after_publish, "end": peak},
        "targets": {"publish_msgs_per_second": 250_000, "consume_msgs_per_second": 80_000},
    }
    output = pathlib.Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"publish: {publish['msgs_per_second']:>9,} msgs/s  ({publish['messages']:,} in {publish['seconds']} s)")
    print(f"consume: {consume['msgs_per_second']:>9,} msgs/s  ({consume['messages']:,} in {consume['seconds']} s)")
    print(f"broker peak RSS: {peak} MiB ({total:,} messages held at once)")
    print(f"written to {output}")


if __name__ == "__main__":
    main()
