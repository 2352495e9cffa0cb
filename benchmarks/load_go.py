"""nsq's own Go bench tools (bench/bench_writer, bench/bench_reader of nsq v1.3.0) as a load generator.

Both tools run for a fixed time (--runfor), not for a number of messages, and report only when that time
is up. To measure the same N messages as the Python load generator, each tool is started with a --runfor
as long as the phase timeout and watched through the broker's /stats: the phase ends at the first poll
that shows N messages published (the topic's message_count) or delivered (the channel clients'
message_count), and the tool is then stopped. The rate is the count at that poll over the time since the
tool was started, so it includes the tools' start-up (a few ms) and errs on the slow side by up to one poll.

bench_writer opens GOMAXPROCS connections, each with one MPUB in flight at a time; bench_reader opens
GOMAXPROCS connections with the given RDY and FINs every message.
"""
from __future__ import annotations

import os
import subprocess
import time

from .brokers import RunningBroker, die_with_parent, stop
from .load_python import Load
from .phases import PhaseResult, PhaseTimeout

POLL_INTERVAL = 0.02  # s; /stats is cheap in both brokers at one topic with one channel
WRITER, READER = "bench_writer", "bench_reader"


def tool_path(bench_dir: str, name: str) -> str:
    return os.path.join(bench_dir, name)


def _run_until(argv: list[str], reached, timeout: float, what: str) -> tuple[int, float]:
    """Run a bench tool until `reached()` returns a count (not None); returns (count, seconds since start)."""
    began = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               preexec_fn=die_with_parent)
    try:
        while True:
            count = reached()
            elapsed = time.perf_counter() - began
            if count is not None:
                return count, elapsed
            if process.poll() is not None:
                raise RuntimeError(f"{what} exited early with status {process.returncode}: "
                                   f"{process.stderr.read()[-2000:]}")
            if elapsed > timeout:
                raise PhaseTimeout(f"{what}: not done after {timeout:.0f} s")
            time.sleep(POLL_INTERVAL)
    finally:
        stop(process, grace=5)


def publish(broker: RunningBroker, load: Load, messages: int, bench_dir: str, timeout: float) -> PhaseResult:
    argv = [tool_path(bench_dir, WRITER), f"--nsqd-tcp-address=127.0.0.1:{broker.tcp_port}",
            f"--topic={load.topic}", f"--size={load.body_size}", f"--batch-size={load.batch}",
            f"--runfor={timeout:.0f}s"]

    def published() -> int | None:
        count = broker.topic_stats(load.topic, load.channel)["message_count"]
        return count if count >= messages else None

    count, seconds = _run_until(argv, published, timeout, WRITER)
    return PhaseResult(count, seconds)


def consume(broker: RunningBroker, load: Load, messages: int, bench_dir: str, timeout: float) -> PhaseResult:
    argv = [tool_path(bench_dir, READER), f"--nsqd-tcp-address=127.0.0.1:{broker.tcp_port}",
            f"--topic={load.topic}", f"--channel={load.channel}", f"--size={load.body_size}",
            f"--rdy={load.rdy}", f"--runfor={timeout:.0f}s"]

    def delivered() -> int | None:
        # Delivered, not FINed: bench_reader buffers its FINs and can leave the last ones unsent, and the
        # Python consumer also stops at its last received message.
        clients = broker.channel_stats(load.topic, load.channel)["clients"] or []
        count = sum(client["message_count"] for client in clients)
        return count if count >= messages else None

    count, seconds = _run_until(argv, delivered, timeout, READER)
    return PhaseResult(count, seconds)
