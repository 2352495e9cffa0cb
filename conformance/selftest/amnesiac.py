"""A broker restart that forgets (the persistence faults): the selftest and the mutation runner give this as
``--restart-command``. It stops the reference broker whose pid is in PIDFILE (SIGTERM: the broker writes its queues
and metadata to disk, D-70, D-71), edits its data path as a broker with the fault would have left it, and starts it
again on the same ports:

- ``forget-everything`` (the default): the data path emptied, as a broker with no disk backend comes back (breaks
  P-RST-01, NSQ-RST-001);
- ``drop-delivered``: the channels' disk queues lose every message that had been delivered (attempts >= 1: the
  in-flight and requeued ones), as a shutdown that flushes only the memory queue (breaks P-RST-02, P-RST-04);
- ``forget-pause``: ``nsqd.dat`` without its paused flags (breaks P-RST-05);
- ``none``: a faithful restart (the control).

    python -m conformance.selftest.amnesiac PIDFILE DATA_PATH TCP_ADDRESS HTTP_ADDRESS [KIND]
"""

from __future__ import annotations

import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

_SIZE = struct.Struct(">i")
_ATTEMPTS_AT = 8  # a disk record is a message as on the wire (C-09): 8-byte timestamp, then the attempts


def restart_forgetting(pidfile: Path, data_path: Path, tcp: str, http: str, kind: str = "forget-everything") -> None:
    if pidfile.is_file():
        stop(pidfile)
    if kind == "forget-everything":
        shutil.rmtree(data_path, ignore_errors=True)
    elif kind == "drop-delivered":
        for metadata in data_path.glob("*:*.diskqueue.meta.dat"):
            _drop_delivered(metadata)
    elif kind == "forget-pause" and (data_path / "nsqd.dat").is_file():
        metadata = data_path / "nsqd.dat"
        metadata.write_text(metadata.read_text().replace('"paused":true', '"paused":false'))
    data_path.mkdir(parents=True, exist_ok=True)
    broker = subprocess.Popen(
        [sys.executable, "-m", "reference_broker", f"--tcp-address={tcp}", f"--http-address={http}",
         f"--data-path={data_path}"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    pidfile.write_text(str(broker.pid))


def _drop_delivered(metadata: Path) -> None:
    """Rewrite one disk queue (go-diskqueue's files, D-76) with only its never-delivered records, in one file."""
    _, read, write = metadata.read_text().split("\n")[:3]
    (read_file, read_pos), (write_file, write_pos) = (tuple(map(int, line.split(","))) for line in (read, write))
    prefix = metadata.name.removesuffix("meta.dat")
    kept = []
    for number in range(read_file, write_file + 1):
        path = metadata.with_name(f"{prefix}{number:06d}.dat")
        data = path.read_bytes() if path.is_file() else b""
        position, end = (read_pos if number == read_file else 0), (write_pos if number == write_file else len(data))
        while position + 4 <= end:
            (size,) = _SIZE.unpack_from(data, position)
            record = data[position:position + 4 + size]
            if struct.unpack_from(">H", record, 4 + _ATTEMPTS_AT)[0] == 0:
                kept.append(record)
            position += 4 + size
        path.unlink(missing_ok=True)
    metadata.with_name(f"{prefix}{read_file:06d}.dat").write_bytes(b"".join(kept))
    size = sum(map(len, kept))
    metadata.write_text(f"{len(kept)}\n{read_file},0\n{read_file},{size}\n")


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
    pid_path, data, tcp_address, http_address, *restart_kind = sys.argv[1:]
    restart_forgetting(Path(pid_path), Path(data), tcp_address, http_address, *restart_kind)
