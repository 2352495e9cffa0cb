"""The brokers under benchmark, as processes: the reference broker (`python -m reference_broker`) and, when it
has been built locally, the real nsqd. Both are started the same way (free loopback ports, a fresh temporary
--data-path) and watched the same way (HTTP /stats, /proc/PID/status)."""
from __future__ import annotations

import contextlib
import ctypes
import json
import pathlib
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field

from reference_broker.launcher import wait_until_listening

from .phases import PhaseTimeout

REFERENCE, NSQD = "reference", "nsqd"
PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class BrokerProgram:
    name: str  # REFERENCE or NSQD
    argv: tuple[str, ...]  # the command line before the flags

    @classmethod
    def reference(cls) -> BrokerProgram:
        return cls(REFERENCE, (sys.executable, "-m", "reference_broker"))

    @classmethod
    def nsqd(cls, binary: str) -> BrokerProgram:
        return cls(NSQD, (binary,))


@dataclass
class RunningBroker:
    name: str
    process: subprocess.Popen
    tcp_port: int
    http_port: int
    data_path: str
    log: list[str] = field(default_factory=list)

    @property
    def tcp_address(self) -> tuple[str, int]:
        return "127.0.0.1", self.tcp_port

    @property
    def pid(self) -> int:
        return self.process.pid

    # --- HTTP API (the same endpoints in nsqd and the reference broker) ---

    def _request(self, method: str, path: str, **query: str) -> bytes:
        url = f"http://127.0.0.1:{self.http_port}{path}?{urllib.parse.urlencode(query)}"
        request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.read()

    def create_channel(self, topic: str, channel: str) -> None:
        """Topic and channel exist before the first message, so every message is queued on the channel."""
        self._request("POST", "/topic/create", topic=topic)
        self._request("POST", "/channel/create", topic=topic, channel=channel)

    def topic_stats(self, topic: str, channel: str) -> dict:
        """nsqd's /stats entry for `topic`, with only `channel` (and its clients) in it."""
        body = json.loads(self._request("GET", "/stats", format="json", topic=topic, channel=channel))
        topics = body.get("topics") or []
        if not topics:
            raise RuntimeError(f"{self.name}: no topic {topic!r} in /stats")
        return topics[0]

    def channel_stats(self, topic: str, channel: str) -> dict:
        channels = self.topic_stats(topic, channel)["channels"]
        if not channels:
            raise RuntimeError(f"{self.name}: no channel {channel!r} in /stats")
        return channels[0]

    def wait_for_handover(self, topic: str, channel: str, timeout: float) -> int:
        """Wait until every message the topic took has been queued on the channel (nsqd moves them in a
        goroutine, through the topic's own disk queue in disk mode); returns that count."""
        deadline = time.monotonic() + timeout
        while True:
            stats = self.topic_stats(topic, channel)
            if stats["channels"] and stats["channels"][0]["message_count"] >= stats["message_count"]:
                return stats["message_count"]
            if time.monotonic() > deadline:
                raise PhaseTimeout(f"{self.name}: topic {topic!r} still handing messages over after {timeout:.0f} s")
            time.sleep(0.05)

    # --- memory, from the kernel's view of the process ---

    def peak_rss_mib(self) -> float:
        """High-water mark of resident memory since the process started (VmHWM)."""
        return _status_mib(self.pid, "VmHWM")

    def rss_mib(self) -> float:
        return _status_mib(self.pid, "VmRSS")


def die_with_parent() -> None:
    """preexec_fn for child processes: SIGTERM them when the benchmark dies, even by SIGKILL, so no broker or
    bench tool outlives it (Linux prctl PR_SET_PDEATHSIG; elsewhere a no-op)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


def _status_mib(pid: int, key: str) -> float:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError(f"no {key} in /proc/{pid}/status")


@contextlib.contextmanager
def running(program: BrokerProgram, *flags: str, startup_timeout: float = 15.0) -> Iterator[RunningBroker]:
    """Start `program` on free ports with a fresh data path; SIGTERM (then SIGKILL) on exit, data path removed."""
    with tempfile.TemporaryDirectory(prefix=f"bench-{program.name}-") as data_path:
        argv = [*program.argv, "--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0",
                f"--data-path={data_path}", *flags]
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                   preexec_fn=die_with_parent)
        try:
            log, ports = wait_until_listening(process, startup_timeout)
            yield RunningBroker(program.name, process, ports["TCP"], ports["HTTP"], data_path, log)
        finally:
            stop(process)


def stop(process: subprocess.Popen, grace: float = 10.0) -> None:
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
