"""A broker that forgets everything on restart (the restart section's fault): the selftest gives this as
``--restart-command``. It stops the reference broker whose pid is in PIDFILE (SIGTERM: the broker writes its
queues to disk, D-70), then empties the data path before starting it again, as a broker with no disk backend
would come back (breaks P-RST-01, the NSQ-RST cases).

    python -m conformance.selftest.amnesiac PIDFILE DATA_PATH TCP_ADDRESS HTTP_ADDRESS
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path


def restart_forgetting(pidfile: Path, data_path: Path, tcp: str, http: str) -> None:
    if pidfile.is_file():
        stop(pidfile)
    shutil.rmtree(data_path, ignore_errors=True)
    data_path.mkdir(parents=True)
    broker = subprocess.Popen(
        [sys.executable, "-m", "reference_broker", f"--tcp-address={tcp}", f"--http-address={http}",
         f"--data-path={data_path}"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    pidfile.write_text(str(broker.pid))


def stop(pidfile: Path, timeout: float = 10.0) -> None:
    pid = int(pidfile.read_text())
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _running(pid):
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan that no init reaps, in some containers)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


if __name__ == "__main__":
    pid_path, data, tcp_address, http_address = sys.argv[1:]
    restart_forgetting(Path(pid_path), Path(data), tcp_address, http_address)
