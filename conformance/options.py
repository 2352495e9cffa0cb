"""The suite's options, declared once: ``nsq-conformance --NAME`` and the pytest plugin's ``--nsq-NAME``
come from this table, and ``settings()`` checks them the same way for both (one-line errors)."""

from __future__ import annotations

import argparse
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from conformance import versions
from conformance.client import TlsClient
from conformance.target import TLS_DIR, Profile, TargetError, parse_address

PYTEST_PREFIX = "nsq-"  # pytest's own options (--strict, --baseline of plugins) must not clash


@dataclass(frozen=True)
class Option:
    name: str  # `--name` for nsq-conformance, `--nsq-name` for pytest
    help: str
    metavar: str | None = None
    type: Callable = str
    default: object = None
    flag: bool = False
    repeatable: bool = False
    prefixed: bool = False  # the name starts with the prefix already: `--nsq-version` for both

    @property
    def dest(self) -> str:
        return ("" if self.prefixed else "nsq_") + self.name.replace("-", "_")

    def spelled(self, prefix: str) -> str:
        return f"--{'' if self.prefixed else prefix}{self.name}"

    def add_to(self, add: Callable, prefix: str) -> None:
        """``add`` is argparse's ``add_argument`` or pytest's ``addoption``: the same keywords."""
        keywords: dict = {"dest": self.dest, "help": self.help}
        if self.flag:
            keywords.update(action="store_true", default=False)
        else:
            keywords.update(metavar=self.metavar, type=self.type,
                            action="append" if self.repeatable else "store",
                            default=[] if self.repeatable else self.default)
        add(self.spelled(prefix), **keywords)


OPTIONS = (
    Option("target", "TCP address of a running broker (default: start the embedded reference broker on free "
           "loopback ports)", "HOST:PORT"),
    Option("http-target", "its HTTP address (without it, HTTP cases are UNSUPPORTED)", "HOST:PORT"),
    Option("https-target", "its HTTPS address (the TLS cases' HTTPS check)", "HOST:PORT"),
    Option("tls-ca", "CA (PEM) that signed the target's certificate: the TLS cases verify it (default: the "
           "protocol only; the embedded broker's own test CA)", "FILE"),
    Option("tls-client-cert", "client certificate (PEM) the suite presents in TLS, for a target with a client auth "
           "policy (profile capability tls_client_auth; default: none; the embedded broker: the suite's test "
           "client)", "FILE"),
    Option("tls-client-key", "its private key (PEM; default: in the --tls-client-cert file)", "FILE"),
    Option("profile", "nsqd-defaults, nsqd-tight, nsqd-auth, nsqd-tls, or a .toml path: the target's limits and "
           "capabilities", "NAME", default="nsqd-defaults"),
    Option("nsq-version", "the nsqd and nsqlookupd release the target follows (X.Y.Z, or master: the source after the "
           "newest release): items of the catalogue that release lacks are not judged (UNSUPPORTED)", "X.Y.Z",
           default=versions.DEFAULT, prefixed=True),
    Option("strict", "count NON-STRICT verdicts as FAIL", flag=True),
    Option("baseline", "expected failures, one case id per line ('#' comments)", "FILE"),
    Option("time-scale", "stretch every wait and deadline by X for slow targets", "X", type=float, default=1.0),
    Option("reports-dir", "where report.html, report.json, junit.xml and pcaps go", "DIR",
           default="reports/conformance"),
    Option("requirement", "only cases checking requirement IDs with this prefix (repeatable)", "PREFIX",
           repeatable=True),
    Option("authd-address", "where the suite's fake auth server listens for a profile with auth (default: a free "
           "loopback port; needed with --target, whose --auth-http-address points there)", "HOST:PORT"),
    Option("lookupd-listen", "where the suite's fake nsqlookupd listens for the registration cases, when the target "
           "was started with --lookupd-tcp-address there (default: a free port, set through the target's "
           "PUT /config/nsqlookupd_tcp_addresses)", "HOST:PORT"),
    Option("lookupd-target", "TCP address of a running nsqlookupd (default: start the embedded reference "
           "nsqlookupd)", "HOST:PORT"),
    Option("lookupd-http-target", "its HTTP address", "HOST:PORT"),
    Option("restart-command", "shell command that restarts --target (SIGTERM, same data path and ports) for the "
           "restart cases; the cases then run one at a time", "CMD"),
    Option("kill-command", "shell command that kills --target with SIGKILL and starts it again on the same data path "
           "and ports, for the crash cases (profile capability kill); they then run one at a time", "CMD"),
    Option("data-path", "the --target's --data-path, when it is on this machine: the crash cases check the files "
           "it leaves there (profile capability data_path)", "DIR"),
    Option("lookupd-profile", "nsqlookupd-defaults, nsqlookupd-short-timeouts, or a .toml path: the nsqlookupd's "
           "flags (for the embedded one) and timeouts", "NAME", default="nsqlookupd-defaults"),
    Option("compare", "differential mode: every case also runs against this second broker (e.g. the real nsqd), "
           "and the report shows where their normalised transcripts differ", "HOST:PORT"),
    Option("compare-http", "the second broker's HTTP address", "HOST:PORT"),
)
EMBEDDED = Option("embedded", "test the embedded reference broker: the suite starts it (or, with --nsq-target, "
                  "python -m conformance started it there)", flag=True)


def add_to_argparse(parser: argparse.ArgumentParser) -> None:
    for option in OPTIONS:
        option.add_to(parser.add_argument, "")


def add_to_pytest(group) -> None:
    for option in (*OPTIONS, EMBEDDED):
        option.add_to(group.addoption, PYTEST_PREFIX)


def as_pytest_arguments(values: dict) -> list[str]:
    """nsq-conformance's parsed values (by ``dest``) as the plugin's command line."""
    arguments = []
    for option in (*OPTIONS, EMBEDDED):
        value = values.get(option.dest)
        if option.flag:
            arguments += [option.spelled(PYTEST_PREFIX)] if value else []
        elif option.repeatable:
            for item in value or []:
                arguments += [option.spelled(PYTEST_PREFIX), str(item)]
        elif value is not None:
            arguments += [option.spelled(PYTEST_PREFIX), str(value)]
    return arguments


Address = tuple[str, int]


@dataclass
class Settings:
    profile: Profile
    tcp: Address | None
    http: Address | None
    https: Address | None
    tls: TlsClient
    authd: Address | None
    lookupd_listen: Address | None
    lookupd_tcp: Address | None
    lookupd_http: Address | None
    restart_command: str | None
    compare_tcp: Address | None
    compare_http: Address | None
    embedded: bool
    strict: bool
    time_scale: float
    reports_dir: Path
    baseline: dict[str, str]
    requirement_prefixes: list[str]
    kill_command: str | None = None
    data_path: Path | None = None
    lookupd_profile: Profile | None = None
    nsq_version: versions.NsqVersion = versions.NsqVersion.parse(versions.DEFAULT)


def settings(value: Callable[[str], object]) -> Settings:
    """The checked settings from ``value(dest)``; raises TargetError with a one-line message."""
    def address(name: str) -> Address | None:
        text = value("nsq_" + name.replace("-", "_"))
        return parse_address(text, f"--{name}") if text else None

    tcp, http, compare_tcp = address("target"), address("http-target"), address("compare")
    embedded = bool(value("nsq_embedded"))
    lookupd_tcp, lookupd_http = address("lookupd-target"), address("lookupd-http-target")
    profile = Profile.load(value("nsq_profile"))
    if http and not tcp:
        raise TargetError("--http-target needs --target")
    if value("nsq_restart_command") and not tcp:
        raise TargetError("--restart-command needs --target (the embedded broker is restarted by the suite)")
    if bool(lookupd_tcp) != bool(lookupd_http):
        raise TargetError("--lookupd-target and --lookupd-http-target go together")
    if address("compare-http") and not compare_tcp:
        raise TargetError("--compare-http needs --compare")
    authd = address("authd-address")
    if tcp and not embedded and profile.capabilities.get("auth") and not authd:
        raise TargetError(f"profile {profile.name} with --target needs --authd-address (the address the target's "
                          "--auth-http-address points at)")
    time_scale = value("nsq_time_scale")
    if time_scale <= 0:
        raise TargetError("--time-scale must be > 0")
    baseline = value("nsq_baseline")
    crash = crash_settings(value, tcp)
    try:
        nsq_version = versions.NsqVersion.parse(value("nsq_version"))
    except versions.VersionError as exc:
        raise TargetError(f"--nsq-version: {exc}") from None
    return Settings(profile, tcp, http, address("https-target"), tls_client(value), authd,
                    address("lookupd-listen"), lookupd_tcp, lookupd_http, value("nsq_restart_command"),
                    compare_tcp, address("compare-http"), embedded, bool(value("nsq_strict")), time_scale,
                    Path(value("nsq_reports_dir")), load_baseline(Path(baseline)) if baseline else {},
                    list(value("nsq_requirement") or []), *crash, nsq_version)


def crash_settings(value: Callable[[str], object], tcp: Address | None) -> tuple:
    """--kill-command, --data-path and --lookupd-profile, checked."""
    kill_command, data_path = value("nsq_kill_command"), value("nsq_data_path")
    if kill_command and not tcp:
        raise TargetError("--kill-command needs --target (the embedded broker is killed by the suite)")
    if data_path and not tcp:
        raise TargetError("--data-path needs --target (the embedded broker's is the suite's own)")
    if data_path and not Path(data_path).is_dir():
        raise TargetError(f"--data-path {data_path}: no such directory")
    return kill_command, Path(data_path) if data_path else None, Profile.load(value("nsq_lookupd_profile"))


# The embedded broker's --tls-* values: the suite's test CA, which signed its certificate, and test client.
EMBEDDED_TLS = {"nsq_tls_ca": str(TLS_DIR / "ca.pem"), "nsq_tls_client_cert": str(TLS_DIR / "client.pem"),
                "nsq_tls_client_key": str(TLS_DIR / "client.key")}


def tls_client(value: Callable[[str], object]) -> TlsClient:
    """--tls-ca, --tls-client-cert and --tls-client-key, loaded once here so that a bad file is one line."""
    ca, certificate, key = value("nsq_tls_ca"), value("nsq_tls_client_cert"), value("nsq_tls_client_key")
    if key and not certificate:
        raise TargetError("--tls-client-key needs --tls-client-cert")
    tls = TlsClient(ca, certificate, key)
    try:
        tls.context()
    except (OSError, ssl.SSLError) as exc:
        raise TargetError(f"--tls-ca/--tls-client-cert/--tls-client-key: cannot load: {exc}") from exc
    return tls


def load_baseline(path: Path) -> dict[str, str]:
    """``case-id  # why`` per line; the reason is kept for the report."""
    if not path.is_file():
        raise TargetError(f"--baseline {path}: no such file")
    baseline = {}
    for line in path.read_text().splitlines():
        case_id, _, reason = line.partition("#")
        if case_id.strip():
            baseline[case_id.strip()] = reason.strip()
    return baseline
