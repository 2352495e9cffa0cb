"""Running a driver: its manifest entry (drivers/drivers.toml), its process, and its JSON-lines reports."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from conformance.clients import contract
from conformance.clients.judge import ClientFault, HarnessError, Unsupported
from conformance.transcript import Transcript

DRIVERS_DIR = Path(__file__).parent / "drivers"
NODE_PATH = "NSQC_NODE_PATH"  # where npm installed the JavaScript libraries (tox: {envdir}/node/node_modules)


@dataclass(frozen=True)
class Driver:
    name: str
    library: str
    language: str
    command: tuple[str, ...]
    install: str
    lacks: frozenset[str]
    built: str | None  # the environment variable naming a driver built locally ("{built}" in the command)
    # what a failed handler's REQ delay is, as the library documents it (NSQC-MSG-006): {"ms": n} and optionally
    # "times_attempts" (the delay grows with the message's attempts) and "max_ms" (its cap)
    requeue_delay: dict
    path: str | None  # the environment variable naming a folder the library was installed into apart (PYTHONPATH)
    # the max attempts the library applies when the application sets none, as it documents it (0: no limit); None:
    # not declared, and a message of attempt 2 or more is not judged against it
    max_attempts: int | None = None
    # the /lookup poll interval of a library that polls at its own whatever it is told (NSQC-LOOKUP-002); None: it
    # takes the one configured
    lookupd_poll_interval_ms: int | None = None
    # the least time before a consumer connects to an nsqd address again, as the library documents it (NSQC-ERR-006):
    # {"min_ms": n} after the last connection to it closed, or with "since" = "connect" after the last attempt to
    # connect (a library that tries on a fixed interval); None: none documented (it may reconnect at once)
    reconnect_delay: dict | None = None

    def requeue_delay_ms(self, attempts: int) -> int:
        delay = self.requeue_delay["ms"] * (attempts if self.requeue_delay.get("times_attempts") else 1)
        return min(delay, self.requeue_delay.get("max_ms", delay))

    @property
    def available(self) -> bool:
        return self.built is None or bool(os.environ.get(self.built))

    def argv(self) -> list[str]:
        interpreters = {"{python}": sys.executable, "{node}": shutil.which("node") or "node",
                        "{built}": os.environ.get(self.built or "", "")}
        return [interpreters.get(part, str(DRIVERS_DIR / part) if part.endswith((".py", ".js")) else part)
                for part in self.command]

    def require(self, feature: str) -> None:
        if feature in self.lacks:
            raise Unsupported(f"{self.library} has no {feature}")


def drivers() -> dict[str, Driver]:
    manifest = tomllib.loads((DRIVERS_DIR / "drivers.toml").read_text())
    return {name: Driver(name, entry["library"], entry["language"], tuple(entry["command"]), entry["install"],
                         frozenset(entry.get("lacks", ())), entry.get("built"), entry["requeue_delay"],
                         entry.get("path"), entry.get("max_attempts"), entry.get("lookupd_poll_interval_ms"),
                         entry.get("reconnect_delay"))
            for name, entry in manifest.items()}


class DriverProcess:
    """One run of a driver for one case: started with the contract's environment, stopped with SIGTERM."""

    def __init__(self, driver: Driver, transcript: Transcript, log_path: Path):
        self.driver, self.transcript, self.log_path = driver, transcript, log_path
        self.reports: list[contract.Report] = []
        self.orders: dict[str, str] = {}  # what it was told (the contract's environment variables)
        self._arrived = asyncio.Condition()
        self._process: asyncio.subprocess.Process | None = None
        self._reading: asyncio.Task | None = None
        self.exit_code: int | None = None
        self.stopping = False
        self.on_exit = []  # callables told how the process ended, unless it was told to stop

    async def start(self, orders: dict[str, str]) -> DriverProcess:
        self.orders = orders
        environment = {**os.environ, **orders, "PYTHONUNBUFFERED": "1"}
        if os.environ.get(NODE_PATH):
            environment["NODE_PATH"] = os.environ[NODE_PATH]
        if self.driver.path and os.environ.get(self.driver.path):  # a library whose package name another one takes
            environment["PYTHONPATH"] = os.pathsep.join(filter(None, (os.environ[self.driver.path],
                                                                      os.environ.get("PYTHONPATH"))))
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("wb")
        try:
            self._process = await asyncio.create_subprocess_exec(
                *self.driver.argv(), env=environment, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=self._log, cwd=DRIVERS_DIR)
        except OSError as exc:
            raise HarnessError(f"driver {self.driver.name} does not start: {exc}") from exc
        self.transcript.note(f"driver {self.driver.name} started: " + " ".join(f"{k}={v}" for k, v in orders.items()))
        self._reading = asyncio.create_task(self._read())
        return self

    async def _read(self) -> None:
        assert self._process and self._process.stdout
        while line := await self._process.stdout.readline():
            try:
                fields = json.loads(line)
                event = fields.pop("event")
            except (ValueError, KeyError, AttributeError):
                self.transcript.note(f"driver said: {line.decode('utf-8', 'replace').rstrip()}")
                continue
            self.transcript.note(f"driver: {event} {json.dumps(fields)}")
            async with self._arrived:
                self.reports.append(contract.Report(event, self.transcript.now(), fields))
                self._arrived.notify_all()
        self.exit_code = await self._process.wait()
        async with self._arrived:
            self._arrived.notify_all()
        if not self.stopping:
            how = f"the driver exited with {self.exit_code} ({self.log_tail()})"
            self.transcript.note(how)
            for callback in self.on_exit:
                callback(how)

    async def report(self, event: str, timeout: float, why: str, count: int = 1) -> list[contract.Report]:
        """The first ``count`` reports of ``event``, waiting at most ``timeout`` seconds for them."""
        def arrived():
            return len(self.of(event)) >= count or self.exit_code is not None
        async with self._arrived:
            try:
                await asyncio.wait_for(self._arrived.wait_for(arrived), timeout)
            except TimeoutError:
                pass
        found = self.of(event)
        if len(found) < count:
            raise ClientFault(why, f"{count} '{event}' report(s) from the driver within {timeout:g} s",
                              f"{len(found)}" + (f"; the driver exited with {self.exit_code} ({self.log_tail()})"
                                                 if self.exit_code is not None else ""))
        return found[:count]

    def of(self, event: str) -> list[contract.Report]:
        return [report for report in self.reports if report.event == event]

    async def stop(self, timeout: float = 5.0) -> bool:
        """SIGTERM (the contract's "stop cleanly"), then SIGKILL after ``timeout``; True if it stopped in time."""
        process = self._process
        if process is None:
            return True
        clean = True
        self.stopping = True
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), timeout)
            except TimeoutError:
                clean = False
                self.transcript.note(f"driver did not stop within {timeout:g} s of SIGTERM: killed")
                process.kill()
                await process.wait()
        if self._reading:
            await self._reading
        self._log.close()
        return clean

    def log_tail(self, lines: int = 6) -> str:
        self._log.flush()
        text = self.log_path.read_text(errors="replace").strip().splitlines()
        return " | ".join(text[-lines:]) or "no output on stderr"
