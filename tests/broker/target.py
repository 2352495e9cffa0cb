"""The broker a socket-level test talks to: the reference broker, or the real nsqd when NSQD_BINARY names one,
so the same expectations can be checked against nsqd v1.3.0 (never committed; built locally from source); and
any Go program of nsq's started the same way (tests/lookupd with NSQLOOKUPD_BINARY)."""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import tempfile
import threading
import time

from reference_broker.launcher import RunningBroker, running_broker


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def running_target(*flags: str):
    """The reference broker with nsqd's `flags`, or NSQD_BINARY's nsqd on free ports and a fresh data path."""
    binary = os.environ.get("NSQD_BINARY")
    if not binary:
        with running_broker(*flags) as running:
            yield running
        return
    with tempfile.TemporaryDirectory() as data_path, running_go_program(binary, f"--data-path={data_path}",
                                                                        *flags) as running:
        yield running


@contextlib.contextmanager
def running_go_program(binary: str, *flags: str):
    """A Go nsqd or nsqlookupd (built locally) on free loopback ports, once its TCP port accepts."""
    tcp_port, http_port = _free_port(), _free_port()
    process = subprocess.Popen([binary, f"--tcp-address=127.0.0.1:{tcp_port}",
                                f"--http-address=127.0.0.1:{http_port}", *flags], stderr=subprocess.PIPE, text=True)
    target = RunningBroker("127.0.0.1", tcp_port, http_port, process)
    threading.Thread(target=lambda: target.log.extend(process.stderr), daemon=True).start()
    for _ in range(100):
        with contextlib.suppress(OSError), socket.create_connection(target.tcp_address):
            break
        time.sleep(0.05)
    try:
        yield target
    finally:
        process.terminate()
        process.wait(10)
