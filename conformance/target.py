"""What the suite runs against: a profile (limits and capabilities) and an address, either given
(`--target`) or an embedded reference broker spawned as a subprocess (never imported)."""

from __future__ import annotations

import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

PROFILES_DIR = Path(__file__).parent / "profiles"
_LISTENING = re.compile(r"(TCP|HTTPS?): listening on ([\d.]+):(\d+)")
TLS_DIR = Path(__file__).parent / "tls"  # the suite's test certificates (the recordings'): test use only


class TargetError(Exception):
    """A target or profile problem the user must fix; reported as one line, exit code 2."""


# What nsqd offers that another broker may lack, and so what a profile that does not name it gets.
NSQD_CAPABILITIES = {
    "topic_autocreate": True,   # PUB, MPUB, DPUB and SUB create a topic on first use (P-PUB-01, P-SUB-01)
    "dpub": True,               # the DPUB command (P-DPUB)
    "topic_create_http": True,  # POST /topic/create (H-EP:/topic/create)
    "nsqlookupd": True,         # registers with the nsqlookupds it is given (section 10, R-*)
}


# The limits an nsqd or nsqlookupd flag sets, with the flag and its unit (nsqd/options.go,
# nsqlookupd/options.go): a profile that extends another starts the embedded program with a flag for each limit it
# changes. The rest (heartbeat_interval_ms, output_buffer_size) are fixed in nsqd.
LIMIT_FLAGS = {
    "max_msg_size": ("--max-msg-size", ""),
    "max_body_size": ("--max-body-size", ""),
    "max_rdy_count": ("--max-rdy-count", ""),
    "max_req_timeout_ms": ("--max-req-timeout", "ms"),
    "max_msg_timeout_ms": ("--max-msg-timeout", "ms"),
    "msg_timeout_ms": ("--msg-timeout", "ms"),
    "max_heartbeat_interval_ms": ("--max-heartbeat-interval", "ms"),
    "max_output_buffer_size": ("--max-output-buffer-size", ""),
    "max_output_buffer_timeout_ms": ("--max-output-buffer-timeout", "ms"),
    "min_output_buffer_timeout_ms": ("--min-output-buffer-timeout", "ms"),
    "output_buffer_timeout_ms": ("--output-buffer-timeout", "ms"),
    "max_deflate_level": ("--max-deflate-level", ""),
    "mem_queue_size": ("--mem-queue-size", ""),
    "sync_every": ("--sync-every", ""),
    "sync_timeout_ms": ("--sync-timeout", "ms"),
    "max_bytes_per_file": ("--max-bytes-per-file", ""),
    "max_channel_consumers": ("--max-channel-consumers", ""),
    "inactive_producer_timeout_ms": ("--inactive-producer-timeout", "ms"),
    "tombstone_lifetime_ms": ("--tombstone-lifetime", "ms"),
}


@dataclass(frozen=True)
class Profile:
    """What the suite knows of a target: its limits (its flags), its capabilities, and for the embedded reference
    programs the flags they are started with. A profile may ``extends`` another (a shipped name or a .toml path
    beside it): it inherits the base's limits, capabilities, setup and flags, overrides what it names, and gets a
    broker flag for each limit it changes (LIMIT_FLAGS) besides its own ``broker_flags``."""

    name: str
    description: str
    broker_flags: tuple[str, ...]
    limits: dict
    capabilities: dict
    setup: dict = field(default_factory=dict)  # how the suite prepares what the target does not do itself

    def limit(self, name: str) -> int:
        return self.limits[name]

    def offers(self, capability: str):
        """The capability's value: the profile's, else nsqd's (NSQD_CAPABILITIES), else False."""
        return self.capabilities.get(capability, NSQD_CAPABILITIES.get(capability, False))

    @classmethod
    def load(cls, name_or_path: str, _extended_by: tuple[Path, ...] = ()) -> Profile:
        path = _profile_path(name_or_path, _extended_by[-1].parent if _extended_by else None)
        if path in _extended_by:
            raise TargetError(f"profile {path}: extends itself ({' -> '.join(p.stem for p in (*_extended_by, path))})")
        try:
            document = tomllib.loads(path.read_text())
            base = cls.load(document["extends"], (*_extended_by, path)) if "extends" in document else None
            flags = tuple(flag.replace("${tls}", str(TLS_DIR)) for flag in document.get("broker_flags", []))
            limit_flags = [flag for flag in flags if flag.split("=")[0] in {f for f, _ in LIMIT_FLAGS.values()}]
            if base and limit_flags:
                raise TargetError(f"profile {path}: {limit_flags[0]} in broker_flags: it comes from [limits] of a "
                                  "profile that extends another")
            setup = dict(document.get("setup", {}))
            unknown = set(setup) - SETUP_COMMANDS
            if unknown:
                raise TargetError(f"profile {path}: unknown [setup] keys {sorted(unknown)} "
                                  f"(known: {', '.join(sorted(SETUP_COMMANDS))})")
            if base is None:
                return cls(path.stem, document.get("description", ""), flags,
                           dict(document["limits"]), dict(document["capabilities"]), setup)
            limits = {**base.limits, **document.get("limits", {})}
            changed = tuple(_limit_flag(name, value) for name, value in document.get("limits", {}).items()
                            if name in LIMIT_FLAGS and value != base.limits.get(name))
            return cls(path.stem, document.get("description", base.description),
                       (*base.broker_flags, *changed, *flags), limits,
                       {**base.capabilities, **document.get("capabilities", {})}, {**base.setup, **setup})
        except (tomllib.TOMLDecodeError, KeyError) as exc:
            raise TargetError(f"profile {path}: {exc}") from exc


def _profile_path(name_or_path: str, beside: Path | None) -> Path:
    """A shipped profile's name, or a .toml path (an ``extends`` path: relative to the profile that names it)."""
    path = Path(name_or_path)
    if not path.suffix:
        path = PROFILES_DIR / f"{name_or_path}.toml"
    elif beside is not None and not path.is_absolute():
        path = beside / path
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in PROFILES_DIR.glob("*.toml")))
        raise TargetError(f"unknown profile {name_or_path!r} (shipped: {known}; or give a .toml path)")
    return path


def _limit_flag(name: str, value: int) -> str:
    flag, unit = LIMIT_FLAGS[name]
    return f"{flag}={value}{unit}"


def parse_address(text: str, option: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise TargetError(f"{option} must be HOST:PORT, got {text!r}")
    return host, int(port)


def free_loopback_address() -> str:
    """A loopback HOST:PORT nothing listens on right now (for the fake auth server)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return "127.0.0.1:%d" % probe.getsockname()[1]


def run_command(command: str, timeout: float, what: str) -> None:
    """A shell command of the user's (``what`` names it in errors): TargetError with its exit status and last line
    of stderr when it fails."""
    try:
        subprocess.run(command, shell=True, check=True, timeout=timeout, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    except subprocess.CalledProcessError as exc:
        stderr = (exc.stderr or b"").decode("utf-8", "replace").strip().splitlines()
        raise TargetError(f"{what} {command!r} exited with status {exc.returncode}"
                          + (f": {stderr[-1]}" if stderr else "")) from exc
    except subprocess.TimeoutExpired as exc:
        raise TargetError(f"{what} {command!r} did not finish within {timeout:g} s") from exc


def restart_with_command(command: str, addresses: list[tuple[str, int]], timeout: float = 30.0,
                         option: str = "--restart-command") -> None:
    """--restart-command (or --kill-command) for a target the user started: run it, then wait until every address
    answers."""
    run_command(command, timeout, option)
    deadline = time.monotonic() + timeout
    for address in addresses:
        while True:
            try:
                socket.create_connection(address, timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise TargetError(f"after {option}, {address[0]}:{address[1]} does not answer") from None
                time.sleep(0.1)


# what a profile's [setup] may say: how the suite creates each case's topic first, and deletes it afterwards
SETUP_COMMANDS = frozenset({"create_topic", "delete_topic"})


def run_setup_command(command: str, timeout: float, **names: str) -> None:
    """A profile's setup command with ``{topic}`` (and the like) replaced by shell-quoted ``names``."""
    run_command(command.format_map({key: shlex.quote(value) for key, value in names.items()}), timeout,
                "the profile's setup command")


def check_reachable(address: tuple[str, int], option: str) -> None:
    try:
        socket.create_connection(address, timeout=3).close()
    except OSError as exc:
        raise TargetError(f"{option} {address[0]}:{address[1]} is unreachable: {exc.strerror or exc}") from exc


PORT_TAKEN = "Address already in use"  # the reference broker's listen failure, as its log says it
RETRY_S = 0.5


class EmbeddedBroker:
    """`python -m reference_broker` on free loopback ports, with the profile's flags."""

    def __init__(self, profile: Profile, log_path: Path | None = None, command: list[str] | None = None,
                 authd_address: str | None = None):
        self.profile = profile
        self.authd_address = authd_address
        self.log_path = log_path
        self.command = command or [sys.executable, "-m", "reference_broker"]
        self.tcp_address: tuple[str, int] | None = None
        self.http_address: tuple[str, int] | None = None
        self.https_address: tuple[str, int] | None = None
        self._process: subprocess.Popen | None = None
        self._data_path: str | None = None
        self._ports: tuple = (None, None, None)  # TCP, HTTP, HTTPS: kept across a restart
        self._log_lines: list[str] = []
        self._found = threading.Event()

    def _argv(self) -> list[str]:
        """Free ports at first; a restart keeps the ports and the data path it had (P-RST)."""
        if self._data_path is None:
            self._data_path = tempfile.mkdtemp(prefix="nsq-conformance-")
        tcp, http, https = ("%s:%d" % address if address else "127.0.0.1:0" for address in self._ports)
        flags = [f"--https-address={https}" if flag.startswith("--https-address=") else flag
                 for flag in self.profile.broker_flags]
        argv = [*self.command, f"--tcp-address={tcp}", f"--http-address={http}",
                f"--data-path={self._data_path}", *flags]
        if self.authd_address:
            argv.append(f"--auth-http-address={self.authd_address}")
        return argv

    def start(self, timeout: float = 20.0) -> EmbeddedBroker:
        argv = self._argv()
        try:
            self._process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                             stderr=subprocess.PIPE, text=True, errors="replace")
        except OSError as exc:
            raise TargetError(f"cannot start the embedded broker ({' '.join(argv)}): {exc}") from exc
        threading.Thread(target=self._drain, daemon=True, name="broker-log").start()
        deadline = time.monotonic() + timeout
        while not self._found.wait(0.05):
            if self._process.poll() is not None or time.monotonic() > deadline:
                # a first start leaves nothing; a restart's data path stays, for a case that mends it and starts again
                self.stop() if self._ports == (None, None, None) else self._terminate()
                tail = "; ".join(line.strip() for line in self._log_lines[-3:]) or "no output"
                raise TargetError(f"the embedded broker did not start ({' '.join(argv)}): {tail}")
        return self

    def restart(self, timeout: float = 20.0) -> None:
        """SIGTERM, then the same broker again on the same ports and data path (P-RST-01)."""
        self._terminate()
        self._start_again(timeout)

    def kill(self, timeout: float = 20.0) -> None:
        """SIGKILL, then the same broker again on the same ports and data path (P-RST-10, P-RST-15): what it had
        not written to disk is gone."""
        if self._process and self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        self._start_again(timeout)

    def _start_again(self, timeout: float) -> None:
        # the ports it listened on; after a start that failed, the ones it had before
        self._ports = (self.tcp_address or self._ports[0], self.http_address or self._ports[1],
                       self.https_address or self._ports[2])
        deadline = time.monotonic() + timeout
        while True:
            self.tcp_address = self.http_address = self.https_address = None
            self._found.clear()
            try:
                self.start(max(1.0, deadline - time.monotonic()))
                return
            except TargetError as exc:
                # its ports are loopback ports the system hands out to any socket: one may hold one of them for a
                # moment (a client's outgoing connection), so the same ports are tried again while time is left
                if PORT_TAKEN not in str(exc) or time.monotonic() + RETRY_S > deadline:
                    raise
                time.sleep(RETRY_S)

    @property
    def data_path(self) -> Path | None:
        return Path(self._data_path) if self._data_path else None

    def _drain(self) -> None:
        log = self.log_path.open("a") if self.log_path else None
        try:
            for line in self._process.stderr:
                self._log_lines.append(line)
                del self._log_lines[:-50]
                if log:
                    log.write(line)
                    log.flush()
                for kind, host, port in _LISTENING.findall(line):
                    setattr(self, f"{kind.lower()}_address", (host, int(port)))
                https_expected = any(flag.startswith("--https-address=") for flag in self.profile.broker_flags)
                if self.tcp_address and self.http_address and (self.https_address or not https_expected):
                    self._found.set()
        finally:
            if log:
                log.close()

    def stop(self) -> None:
        self._terminate()
        if self._data_path:
            shutil.rmtree(self._data_path, ignore_errors=True)

    def terminate(self) -> None:
        """SIGTERM, without waiting for the exit: a case watches what the program does as it shuts down."""
        if self._process and self._process.poll() is None:
            self._process.terminate()

    def _terminate(self) -> None:
        if self._process and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()


class EmbeddedLookupd(EmbeddedBroker):
    """`python -m reference_broker.nsqlookupd` on free loopback ports, with the lookupd profile's flags: the default
    nsqlookupd target."""

    def __init__(self, log_path: Path | None = None, profile: Profile | None = None):
        super().__init__(profile or Profile("nsqlookupd", "", (), {}, {}), log_path,
                         command=[sys.executable, "-m", "reference_broker.nsqlookupd"])

    def _argv(self) -> list[str]:
        """Free ports at first; a restart keeps them."""
        tcp, http = ("%s:%d" % address if address else "127.0.0.1:0" for address in self._ports[:2])
        return [*self.command, f"--tcp-address={tcp}", f"--http-address={http}", *self.profile.broker_flags]
