"""The project's own load generator: publisher and consumer processes speaking raw protocol V2.

Publishers send MPUB batches, several in flight per connection (pipelined), until their share of the
messages is acknowledged. Consumers subscribe to one channel with a large RDY, FIN every message, and stop
together once all of them have received the whole backlog. Each phase is timed from a common start signal,
after every connection is set up, to the last acknowledgement or message received.

Both brokers hold a client's last partial output buffer for up to --output-buffer-timeout (250 ms by
default) before they flush it, so the consume time includes up to 250 ms of tail: use runs of 1M messages
(seconds long), not 100k, when the figures matter.
"""
from __future__ import annotations

import multiprocessing
import queue
import socket
import struct
import time
from dataclasses import dataclass

from .phases import PhaseResult, PhaseTimeout


@dataclass(frozen=True)
class Load:
    topic: str
    channel: str
    body_size: int
    batch: int = 200  # messages per MPUB
    pipeline_window: int = 8  # MPUBs in flight per publisher connection
    rdy: int = 2500  # RDY per consumer connection


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


def _mpub_command(load: Load) -> bytes:
    body = struct.pack(">I", load.batch) + (struct.pack(">I", load.body_size) + b"x" * load.body_size) * load.batch
    return b"MPUB %s\n" % load.topic.encode() + struct.pack(">I", len(body)) + body


def _publisher(address, load: Load, batches: int, start, results) -> None:
    command = _mpub_command(load)
    sock = _connect(address)
    start.wait()
    began = time.perf_counter()
    sent = min(load.pipeline_window, batches)
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
    results.put((acknowledged * load.batch, began, time.perf_counter()))
    sock.close()


def _consumer(address, load: Load, shared_count, quota: int, start, results) -> None:
    """Drain the channel together with the other consumers until `shared_count` reaches `quota`."""
    sock = _connect(address)
    sock.sendall(b"SUB %s %s\n" % (load.topic.encode(), load.channel.encode()))
    if next(_frames(sock, bytearray())) != (0, b"OK"):
        raise RuntimeError("SUB failed")
    start.wait()
    began = time.perf_counter()
    sock.sendall(b"RDY %d\n" % load.rdy)
    sock.settimeout(0.2)  # wakes up to see that the other consumers have finished the backlog
    received, buffer = 0, bytearray()
    last_message_at = began  # the phase ends at the last message, not when a consumer notices the end
    while shared_count.value < quota:
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
            if frame_type == 2:  # message: 8-byte timestamp, 2-byte attempts, then the 16-byte ID
                replies.append(b"FIN " + bytes(buffer[pos + 18:pos + 34]) + b"\n")
                messages += 1
            elif buffer[pos + 8:pos + 4 + size] == b"_heartbeat_":
                replies.append(b"NOP\n")
            pos += 4 + size
        del buffer[:pos]
        if replies:
            sock.sendall(b"".join(replies))
        if messages:
            received += messages
            last_message_at = time.perf_counter()
            with shared_count.get_lock():
                shared_count.value += messages
    results.put((received, began, last_message_at))
    sock.close()


def _run_workers(target, argument_lists: list[tuple], timeout: float) -> PhaseResult:
    """Start one process per argument tuple, release them together, and time them. Workers are daemons and are
    terminated on a timeout, so a stuck broker never leaves load generators behind."""
    start = multiprocessing.Event()
    results = multiprocessing.Queue()
    workers = [multiprocessing.Process(target=target, args=(*arguments, start, results), daemon=True)
               for arguments in argument_lists]
    for worker in workers:
        worker.start()
    time.sleep(0.5)  # every connection is set up before the clock starts
    start.set()
    try:
        outcomes = _collect(results, workers, time.monotonic() + timeout, timeout)
    finally:
        for worker in workers:
            worker.join(1)
            if worker.is_alive():
                worker.terminate()
    messages = sum(outcome[0] for outcome in outcomes)
    seconds = max(outcome[2] for outcome in outcomes) - min(outcome[1] for outcome in outcomes)
    return PhaseResult(messages, seconds)


def _collect(results, workers: list, deadline: float, timeout: float) -> list[tuple]:
    """One outcome per worker; a worker that dies (its traceback is on stderr) fails the phase at once."""
    outcomes: list[tuple] = []
    while len(outcomes) < len(workers):
        try:
            outcomes.append(results.get(timeout=0.5))
            continue
        except queue.Empty:
            pass
        if any(worker.exitcode not in (None, 0) for worker in workers):
            raise RuntimeError("a load generator process failed")
        if time.monotonic() > deadline:
            raise PhaseTimeout(f"not done after {timeout:.0f} s")
    return outcomes


def publish(address, load: Load, messages: int, processes: int, timeout: float) -> PhaseResult:
    batches = messages // load.batch
    shares = [batches // processes + (i < batches % processes) for i in range(processes)]
    return _run_workers(_publisher, [(address, load, share) for share in shares if share], timeout)


def consume(address, load: Load, messages: int, processes: int, timeout: float) -> PhaseResult:
    shared_count = multiprocessing.Value("q", 0)
    return _run_workers(_consumer, [(address, load, shared_count, messages)] * processes, timeout)
