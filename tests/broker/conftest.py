"""Fixtures: a real reference broker process on loopback, started with nsqd's flags."""
from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass

import pytest

_LISTENING = re.compile(r"(TCP|HTTP): listening on ([\d.]+):(\d+)")


@dataclass
class RunningBroker:
    host: str
    tcp_port: int
    http_port: int
    process: subprocess.Popen
    log: list[str]


@contextlib.contextmanager
def running_broker(*flags: str, startup_timeout: float = 15.0):
    """Start `python -m reference_broker` on free ports; yield its addresses; stop it with SIGTERM."""
    with tempfile.TemporaryDirectory(prefix="nsqd-data-") as data_path:
        argv = [sys.executable, "-m", "reference_broker", "--tcp-address=127.0.0.1:0",
                "--http-address=127.0.0.1:0", f"--data-path={data_path}", *flags]
        process = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True,
                                   cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
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
            ready.set()

        threading.Thread(target=drain, daemon=True).start()
        try:
            if not ready.wait(startup_timeout) or len(ports) != 2:
                raise RuntimeError("reference broker did not start:\n" + "".join(log))
            yield RunningBroker("127.0.0.1", ports["TCP"], ports["HTTP"], process, log)
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture
def broker():
    with running_broker() as running:
        yield running
