"""Put on a process's PYTHONPATH by test_cluster.py: every Python process of the cluster run (the driver, its
planning workers, the executors' workers) records that it ran, and every local file it opens whose path names the
analysis's input or output (NSQ_TRACE_WATCHED: comma-separated fragments) in NSQ_TRACE_OPEN_LOG."""

import os
import sys

_log, _watched = os.environ.get("NSQ_TRACE_OPEN_LOG"), [w for w in os.environ.get("NSQ_TRACE_WATCHED", "").split(",")
                                                          if w]


def _record(line: str) -> None:
    descriptor = os.open(_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, f"{os.getpid()} {line}\n".encode())
    finally:
        os.close(descriptor)


def _audit(event: str, args: tuple) -> None:
    if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
        path = os.fsdecode(args[0])
        if path != _log and any(fragment in path for fragment in _watched):
            _record(f"opened {path}")


if _log:
    _record(f"started in {os.getcwd()}: {' '.join(sys.argv)[:200]}")
    sys.addaudithook(_audit)
