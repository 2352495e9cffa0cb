"""Start the reference broker (or nsqlookupd) as a real process on free loopback ports and wait until it listens.

For the project's own tests and benchmarks; the conformance suite has its own launcher, since it never
imports this package."""
from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field

_LISTENING = re.compile(r"(TCP|HTTP): listening on ([\d.]+):(\d+)")


@dataclass
class RunningBroker:
    host: str
    tcp_port: int
    http_port: int
    process: subprocess.Popen
    log: list[str] = field(default_factory=list)

    @property
    def tcp_address(self) -> tuple[str, int]:
        return self.host, self.tcp_port


@contextlib.contextmanager
def running_broker(*flags: str, data_path: str | None = None, startup_timeout: float = 15.0):
    """`python -m reference_broker` with nsqd's `flags`; stopped with SIGTERM on exit. Without a
    `data_path`, a fresh temporary one that goes with the broker."""
    with contextlib.ExitStack() as stack:
        if data_path is None:
            data_path = stack.enter_context(tempfile.TemporaryDirectory(prefix="nsqd-data-"))
        yield stack.enter_context(_running("reference_broker", f"--data-path={data_path}", *flags,
                                           startup_timeout=startup_timeout))


def running_lookupd(*flags: str, startup_timeout: float = 15.0):
    """`python -m reference_broker.nsqlookupd` with nsqlookupd's `flags`; stopped with SIGTERM on exit."""
    return _running("reference_broker.nsqlookupd", *flags, startup_timeout=startup_timeout)


@contextlib.contextmanager
def _running(module: str, *flags: str, startup_timeout: float):
    argv = [sys.executable, "-m", module, "--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0", *flags]
    process = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    try:
        log, ports = wait_until_listening(process, startup_timeout)
        yield RunningBroker("127.0.0.1", ports["TCP"], ports["HTTP"], process, log)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_until_listening(process: subprocess.Popen, timeout: float) -> tuple[list[str], dict[str, int]]:
    """The log and the ports of a broker that logs `TCP: listening on ADDR` and `HTTP: listening on ADDR`, as
    nsqd does (port 0 shows the chosen port). The log keeps being drained afterwards, so a chatty broker never
    blocks on a full pipe."""
    log: list[str] = []
    ports: dict[str, int] = {}
    ready = threading.Event()

    def drain() -> None:
        for line in process.stderr:
            log.append(line)
            match = _LISTENING.search(line)
            if match:
                ports[match.group(1)] = int(match.group(3))
                if len(ports) == 2:
                    ready.set()
        ready.set()  # the process ended: do not keep the caller waiting

    threading.Thread(target=drain, daemon=True).start()
    if not ready.wait(timeout) or len(ports) != 2:
        raise RuntimeError("broker did not start:\n" + "".join(log[-20:]))
    return log, ports
