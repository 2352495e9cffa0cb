"""Go's net/http/pprof routes, which nsqd and nsqlookupd both mount, as far as CPython has a counterpart:
the command line and every thread's stack; the Go runtime profiles answer 501."""
from __future__ import annotations

import sys
import threading
import traceback

from .http_router import PLAIN, HTTPError, Request

_GO_RUNTIME_PROFILES = ("symbol", "profile", "heap", "block", "threadcreate")


def routes(index_path: str) -> list[tuple[str, str, object, str]]:
    """The pprof routes, the index at `index_path` (nsqd mounts it at `/debug/pprof/`, nsqlookupd at
    `/debug/pprof`)."""
    return [
        ("GET", index_path, _index, PLAIN),
        ("GET", "/debug/pprof/cmdline", _cmdline, PLAIN),
        ("GET", "/debug/pprof/symbol", _unavailable, PLAIN),
        ("POST", "/debug/pprof/symbol", _unavailable, PLAIN),
        ("GET", "/debug/pprof/profile", _unavailable, PLAIN),
        ("GET", "/debug/pprof/heap", _unavailable, PLAIN),
        ("GET", "/debug/pprof/goroutine", _goroutine, PLAIN),
        ("GET", "/debug/pprof/block", _unavailable, PLAIN),
        ("GET", "/debug/pprof/threadcreate", _unavailable, PLAIN),
    ]


def _index(request: Request) -> str:
    names = ", ".join(_GO_RUNTIME_PROFILES)
    return f"pprof: Go runtime profiles ({names}) have no CPython counterpart; see /debug/pprof/goroutine\n"


def _cmdline(request: Request) -> str:
    return "\x00".join(sys.argv)


def _goroutine(request: Request) -> str:
    """Python's nearest thing to a goroutine dump: every thread's stack."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    return "\n".join(f"thread {names.get(ident, ident)}:\n" + "".join(traceback.format_stack(frame))
                     for ident, frame in sys._current_frames().items())


def _unavailable(request: Request) -> None:
    raise HTTPError(501, f"profile {request.path.rpartition('/')[2]} is a Go runtime profile")
