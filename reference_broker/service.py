"""What nsqd and nsqlookupd get from judwhite/go-svc and their loggers: log lines with the program's prefix and
level, and a stop on SIGINT or SIGTERM."""
from __future__ import annotations

import logging
import signal
import sys
import threading

from .options import PYTHON_LOG_LEVELS


def configure_logging(level: int, prefix: str) -> None:
    """`level` in nsqd's numbering (1 debug .. 5 fatal); lines as Go's log with Ldate|Ltime|Lmicroseconds."""
    logging.basicConfig(stream=sys.stderr, level=PYTHON_LOG_LEVELS[level],
                        format=f"{prefix}%(asctime)s.%(msecs)03d %(levelname)s: %(message)s",
                        datefmt="%Y/%m/%d %H:%M:%S")


def stop_signal() -> threading.Event:
    """An event set by the first SIGINT or SIGTERM (svc.Run's signals)."""
    stopping = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopping.set())
    return stopping
