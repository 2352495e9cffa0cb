"""Many sessions at once, and the broker's health after them."""
from __future__ import annotations

import json
import re
import socket
import threading
import time
import urllib.request
from collections import Counter, deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from .grammar import encoded_command, generate_session, session_rng
from .play import InboundFrames, Outcome, play
from .session import Session

# -- running many at once -------------------------------------------------------------------------------------

@dataclass
class RunReport:
    seed: int | str
    sessions: int = 0
    seconds: float = 0.0
    frames: Counter = field(default_factory=Counter)  # by type name
    error_codes: Counter = field(default_factory=Counter)
    http_statuses: Counter = field(default_factory=Counter)
    endings: Counter = field(default_factory=Counter)
    layers: Counter = field(default_factory=Counter)  # sessions the broker upgraded, by their compression
    timed_out: int = 0
    not_run: int = 0  # sessions left out when the run's time budget ran out
    failures: list[Outcome] = field(default_factory=list)
    failed_sessions: int = 0

    def add(self, outcome: Outcome, keep_failures: int) -> None:
        self.sessions += 1
        for frame_type, data in outcome.frames:
            self.frames[("response", "error", "message")[frame_type]] += 1
            if frame_type == 1:
                self.error_codes[data.split(b" ", 1)[0].decode("ascii", "replace")] += 1
        self.http_statuses.update(outcome.http_statuses)
        self.endings[outcome.session.ending] += 1
        if outcome.layer is not None:
            self.layers[outcome.layer] += 1
        self.timed_out += outcome.timed_out
        if outcome.problems:
            self.failed_sessions += 1
            if len(self.failures) < keep_failures:
                self.failures.append(outcome)

    def describe_failures(self) -> str:
        return "\n\n".join(outcome.describe() for outcome in self.failures)


def run_sessions(tcp_address, http_address, seed: int | str, indices, workers: int = 32, keep_failures: int = 10,
                 budget_seconds: float = float("inf"), progress=None) -> RunReport:
    """Play sessions `indices` of `seed`, `workers` at a time, against one broker; none starts after
    `budget_seconds` (they count as `not_run`). `progress(report)` is called every 1000 sessions."""
    report = RunReport(seed)
    lock = threading.Lock()
    started = time.monotonic()
    seen_ids = deque(maxlen=64)

    def one(index: int) -> None:
        if time.monotonic() - started > budget_seconds:
            with lock:
                report.not_run += 1
            return
        session = generate_session(session_rng(seed, index), seed, index)
        outcome = play(session, tcp_address, http_address, seen_ids)
        with lock:
            report.add(outcome, keep_failures)
            if progress is not None and report.sessions % 1000 == 0:
                report.seconds = time.monotonic() - started
                progress(report)

    with ThreadPoolExecutor(workers) as pool:
        for future in [pool.submit(one, index) for index in indices]:
            future.result()
    report.seconds = time.monotonic() - started
    return report


# -- the broker afterwards --------------------------------------------------------------------------------------

TRACEBACK_MARKERS = ("Traceback (most recent call last)", "Exception in thread",
                     "Exception occurred during processing of request")


def tracebacks(log_lines: list[str]) -> list[str]:
    """The lines of the broker's stderr that show a Python traceback or an uncaught exception."""
    return [line for line in log_lines if any(marker in line for marker in TRACEBACK_MARKERS)]


def process_status(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status") as status:
        return dict(line.rstrip("\n").split(":\t", 1) for line in status if ":\t" in line)


def peak_rss_bytes(pid: int) -> int:
    return int(process_status(pid)["VmHWM"].split()[0]) * 1024


def ping_seconds(http_address) -> float:
    """How long /ping takes to answer OK; AssertionError when it does not within 1 s."""
    started = time.monotonic()
    try:
        with urllib.request.urlopen(f"http://{http_address[0]}:{http_address[1]}/ping", timeout=1) as response:
            status, body = response.status, response.read()
    except OSError as error:
        raise AssertionError(f"/ping did not answer within 1 s: {error}") from None
    if status != 200 or body != b"OK":
        raise AssertionError(f"/ping answered {status} {body!r}")
    return time.monotonic() - started


def thread_names(http_address) -> list[str]:
    """The names of the broker's threads, from its /debug/pprof/goroutine thread dump, less the one serving
    this request."""
    url = f"http://{http_address[0]}:{http_address[1]}/debug/pprof/goroutine"
    with urllib.request.urlopen(url, timeout=5) as response:
        dump = response.read().decode()
    names = re.findall(r"^thread (.*):$", dump, re.MULTILINE)
    requests = [name for name in names if "process_request" in name]
    names.remove(requests[0])
    return names


def topic_names(http_address) -> list[str]:
    url = f"http://{http_address[0]}:{http_address[1]}/stats?format=json&include_clients=false&include_mem=false"
    with urllib.request.urlopen(url, timeout=5) as response:
        return [topic["topic_name"] for topic in json.load(response)["topics"] or []]


def leftover_threads(http_address, baseline: list[str]) -> list[str]:
    """Threads beyond the broker's baseline: the ones it started with, plus one pump per existing topic.
    Connection threads (conn-*, pump-*), HTTP request threads and pumps of deleted topics are all leftovers."""
    names = Counter(thread_names(http_address))
    names.subtract(baseline)
    names.subtract(f"topic-{name}" for name in topic_names(http_address))
    return sorted(names.elements())


def wait_for_baseline_threads(http_address, baseline: list[str], seconds: float = 5.0) -> list[str]:
    """The leftover threads still there after up to `seconds` (an empty list once back to the baseline)."""
    stop = time.monotonic() + seconds
    while (left := leftover_threads(http_address, baseline)) and time.monotonic() < stop:
        time.sleep(0.1)
    return left


def publish_and_consume(tcp_address, topic: str, body: bytes, timeout: float = 5.0) -> None:
    """A fresh, well-behaved client: PUB, SUB, RDY, receive the message, FIN it, and see the FIN taken: a TOUCH
    of it after the FIN finds it no longer in flight (C-22, P-TOUCH-03). Raises AssertionError when a step fails."""
    with socket.create_connection(tcp_address, timeout=timeout) as sock:
        inbound = InboundFrames(Outcome(Session("health", 0, "tcp")))
        frames = inbound.outcome.frames

        def expect(predicate, what: str) -> None:
            stop = time.monotonic() + timeout
            while not predicate():
                if time.monotonic() > stop:
                    raise AssertionError(f"no {what} within {timeout} s; frames: {frames}")
                data = sock.recv(65536)
                if not data:
                    raise AssertionError(f"the broker closed before {what}; frames: {frames}")
                inbound.feed(data)
            if inbound.outcome.problems:
                raise AssertionError(f"{inbound.outcome.problems} {frames}")

        sock.sendall(b"  V2" + encoded_command(b"PUB", topic.encode(), body=body)
                     + encoded_command(b"SUB", topic.encode(), b"c"))
        expect(lambda: frames.count((0, b"OK")) == 2, "OK to PUB and SUB")
        sock.sendall(b"RDY 1\n")
        expect(lambda: inbound.messages_seen == 1, "message")
        message_id = inbound.last_message_id
        if frames[-1][1][26:] != body:
            raise AssertionError(f"received {frames[-1]!r}, published {body!r}")
        sock.sendall(encoded_command(b"FIN", message_id) + encoded_command(b"TOUCH", message_id))
        not_in_flight = (1, b"E_TOUCH_FAILED TOUCH " + message_id + b" failed ID not in flight")
        expect(lambda: len(frames) > 3, "an answer to TOUCH after FIN")
        if frames[3:] != [not_in_flight]:
            raise AssertionError(f"after FIN and TOUCH: {frames[3:]}, expected {not_in_flight}")


@dataclass
class Health:
    ping_seconds: float
    peak_rss_bytes: int
    threads: int
    leftover_threads: list[str]
    traceback_lines: list[str]


def check_health(broker, rss_limit_bytes: int, baseline_threads: list[str]) -> Health:
    """The broker after the sessions (`baseline_threads`: `thread_names` before them); raises AssertionError
    with what is wrong."""
    pid = broker.process.pid
    http_address = (broker.host, broker.http_port)
    if broker.process.poll() is not None:
        raise AssertionError(f"the broker exited with {broker.process.returncode}:\n{''.join(broker.log[-50:])}")
    ping = ping_seconds(http_address)
    try:
        publish_and_consume(broker.tcp_address, f"fz-health-{time.time_ns()}", b"still healthy")
    except OSError as error:
        raise AssertionError(f"a fresh client could not publish and consume: {error}") from None
    left = wait_for_baseline_threads(http_address, baseline_threads)
    health = Health(ping, peak_rss_bytes(pid), int(process_status(pid)["Threads"]), left, tracebacks(broker.log))
    problems = []
    if health.traceback_lines:
        problems.append("tracebacks in the broker's stderr:\n" + _log_around_tracebacks(broker.log))
    if left:
        problems.append(f"threads beyond the baseline 5 s after the last session: {left[:20]}")
    if health.peak_rss_bytes > rss_limit_bytes:
        problems.append(f"peak RSS {health.peak_rss_bytes >> 20} MiB > {rss_limit_bytes >> 20} MiB")
    if problems:
        raise AssertionError("\n".join(problems))
    return health


def _log_around_tracebacks(log: list[str], limit: int = 200) -> str:
    first = next(i for i, line in enumerate(log) if any(marker in line for marker in TRACEBACK_MARKERS))
    return "".join(log[max(0, first - 5):first + limit])
