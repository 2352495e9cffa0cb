"""Is the target still there? A case that saw the target close a connection, or failed, asks it once more (a fresh
connection that must be answered within a bound) before anything else is blamed on it. A target that died or hung
is named once, with the case during which it happened; it is restarted when the suite knows how (the embedded
programs, ``--restart-command``), and otherwise every later case on it is NOT RUN instead of a cascade of ERRORs.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nsq_protocol import wire, wire_v1

PROBE_SECONDS = 5.0  # how long a live target may take to answer a fresh connection (scaled)
_PING = b"GET /ping HTTP/1.1\r\nHost: target\r\nConnection: close\r\n\r\n"


class NotRun(Exception):
    """The case's target died during an earlier case and could not be restarted."""


def _answer(address: tuple[str, int], greeting: bytes, seconds: float, what: str,
            tls: ssl.SSLContext | None = None) -> str | None:
    """None when ``address`` answers ``greeting`` (inside TLS with ``tls``) with at least one byte within
    ``seconds``; else why not."""
    where = "%s:%d" % address
    try:
        sock = socket.create_connection(address, timeout=seconds)
    except OSError as exc:
        return f"{what} {where} refuses connections ({exc.strerror or exc})"
    if tls is not None:
        try:
            sock = tls.wrap_socket(sock)
        except OSError as exc:  # ssl.SSLError included
            sock.close()
            return f"{what} {where} accepts a connection, then fails the TLS handshake ({exc})"
    with sock:
        deadline = time.monotonic() + seconds
        try:
            sock.sendall(greeting)
            while time.monotonic() < deadline:
                sock.settimeout(max(0.01, deadline - time.monotonic()))
                if sock.recv(1):
                    return None
                return f"{what} {where} accepts a connection, then closes it without answering"
        except TimeoutError:
            pass
        except OSError as exc:
            return f"{what} {where} accepts a connection, then fails it ({exc.strerror or exc})"
    return f"{what} {where} accepts a connection but answers nothing within {seconds:g} s (hung)"


def probe_nsqd(tcp: tuple[str, int], http: tuple[str, int] | None, seconds: float,
               https: ssl.SSLContext | None = None) -> str | None:
    """A broker answers a fresh connection's IDENTIFY (with OK, JSON or an error: any frame will do) and, when it
    has one, its HTTP port answers GET /ping (over TLS with ``https``: a target that requires HTTPS)."""
    reason = _answer(tcp, wire.MAGIC_V2 + wire.encode_command("IDENTIFY", body=b"{}"), seconds, "TCP")
    if reason is None and http is not None:
        reason = _answer(http, _PING, seconds, "HTTPS" if https else "HTTP", https)
    return reason


def probe_lookupd(tcp: tuple[str, int], http: tuple[str, int], seconds: float) -> str | None:
    """An nsqlookupd answers PING (L-TCP) and GET /ping."""
    reason = _answer(tcp, wire_v1.MAGIC_V1 + b"PING\n", seconds, "nsqlookupd TCP")
    if reason is None:
        reason = _answer(http, _PING, seconds, "nsqlookupd HTTP")
    return reason


@dataclass
class Death:
    case: str
    reason: str
    revived: str | None  # how the target came back, or None: later cases are NOT RUN
    concurrent: list[str]  # cases other workers were running on the same target then: the cause may be theirs

    def as_dict(self) -> dict:
        return {"case": self.case, "reason": self.reason, "revived": self.revived, "concurrent": self.concurrent}


class TargetHealth:
    """One target's liveness as this worker process sees it. ``revive`` restarts it (raises on failure; None: the
    suite cannot). ``shared_death`` is a file that tells the other worker processes of a death, for a target they
    all use (one the user started); the embedded programs are each worker's own."""

    def __init__(self, name: str, probe: Callable[[], str | None], revive: Callable[[], str] | None,
                 shared_death: Path | None = None):
        self.name, self._probe, self._revive, self._shared_death = name, probe, revive, shared_death
        self._dead: str | None = None
        # one file per worker process naming the case it runs on the shared target: a death names them all
        self._running = shared_death.with_name(shared_death.name + ".running") if shared_death else None

    def case_started(self, case: str) -> None:
        if self._running is not None:
            self._running.mkdir(exist_ok=True)
            (self._running / str(os.getpid())).write_text(case)

    def case_finished(self) -> None:
        if self._running is not None:
            (self._running / str(os.getpid())).unlink(missing_ok=True)

    def _concurrent(self) -> list[str]:
        if self._running is None or not self._running.is_dir():
            return []
        cases = []
        for marker in self._running.iterdir():
            if marker.name != str(os.getpid()):
                with contextlib.suppress(OSError):
                    cases.append(marker.read_text())
        return sorted(cases)

    @property
    def dead(self) -> str | None:
        """Why cases on this target no longer run (it died, here or in another worker), or None."""
        if self._dead is None and self._shared_death is not None and self._shared_death.exists():
            try:
                death = json.loads(self._shared_death.read_text())
                self._dead = f"the target died during {death['case']}: {death['reason']}"
            except (OSError, ValueError, KeyError):
                self._dead = "the target died during an earlier case"
        return self._dead

    def ensure_alive(self) -> None:
        """Before a case: NotRun when the target died earlier and stayed dead."""
        if self.dead:
            raise NotRun(f"not run: {self.dead}")

    def check(self, case: str) -> Death | None:
        """After a case that saw a close or failed: None when the target answers, or when another worker's case
        already named its death (``dead`` then says so); else the death, named once here."""
        reason = self._probe()
        if reason is None:
            return None
        revived = None
        if self._revive is not None:
            try:
                revived = self._revive()
            except Exception as exc:  # noqa: BLE001 - any failure to restart leaves the target dead, named
                reason += f"; restarting it failed: {exc}"
        concurrent = self._concurrent()
        if revived is None:
            self._dead = f"the target died during {case}: {reason}"
            if self._shared_death is not None and not self._claim_shared_death(case, reason):
                self._dead = None  # read back from the file that the other worker wrote
                return None
        return Death(case, reason, revived, concurrent)

    def _claim_shared_death(self, case: str, reason: str) -> bool:
        try:
            descriptor = os.open(self._shared_death, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            return False
        with os.fdopen(descriptor, "w") as out:
            json.dump({"case": case, "reason": reason}, out)
        return True
