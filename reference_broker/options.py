"""nsqd's flags, their defaults and their validation (apps/nsqd/options.go, nsqd/options.go).

Every option keeps nsqd's flag name (`--max-rdy-count`) and its config name (`max_rdy_count`, used by
`GET /config/:opt`). Durations take Go's syntax (`100ms`, `1m30s`) and are stored as nanoseconds.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import logging
import re
import socket
import zlib

MS = 1_000_000
SECOND = 1000 * MS

_DURATION_UNITS = {"ns": 1, "us": 1000, "µs": 1000, "μs": 1000, "ms": MS, "s": SECOND, "m": 60 * SECOND,
                   "h": 3600 * SECOND}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: str) -> int:
    """Go's time.ParseDuration, returning nanoseconds."""
    sign, rest = (-1, text[1:]) if text.startswith("-") else (1, text.lstrip("+"))
    if rest == "0":
        return 0
    total, pos = 0.0, 0
    for match in _DURATION_PART.finditer(rest):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        pos = match.end()
    if pos != len(rest) or not rest:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}")
    return sign * int(total)


def parse_bool(text: str) -> bool:
    """Go's strconv.ParseBool."""
    if text in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if text in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean value {text!r}")


def default_node_id() -> int:
    """nsqd: crc32(md5(hostname)) % 1024."""
    digest = hashlib.md5(socket.gethostname().encode()).digest()
    return zlib.crc32(digest) % 1024


@dataclasses.dataclass
class Options:
    node_id: int = dataclasses.field(default_factory=default_node_id)
    log_level: int = 2  # INFO, as nsqd's lg.LogLevel
    log_prefix: str = "[nsqd] "
    tcp_address: str = "0.0.0.0:4150"
    http_address: str = "0.0.0.0:4151"
    https_address: str = "0.0.0.0:4152"
    broadcast_address: str = dataclasses.field(default_factory=socket.gethostname)
    broadcast_tcp_port: int = 0
    broadcast_http_port: int = 0
    nsqlookupd_tcp_addresses: list = dataclasses.field(default_factory=list)
    auth_http_addresses: list = dataclasses.field(default_factory=list)
    auth_http_request_method: str = "get"
    http_client_connect_timeout: int = 2 * SECOND
    http_client_request_timeout: int = 5 * SECOND
    data_path: str = ""
    mem_queue_size: int = 10000
    max_bytes_per_file: int = 100 * 1024 * 1024
    sync_every: int = 2500
    sync_timeout: int = 2 * SECOND
    queue_scan_interval: int = 100 * MS
    queue_scan_refresh_interval: int = 5 * SECOND
    queue_scan_selection_count: int = 20
    queue_scan_worker_pool_max: int = 4
    queue_scan_dirty_percent: float = 0.25
    msg_timeout: int = 60 * SECOND
    max_msg_timeout: int = 15 * 60 * SECOND
    max_msg_size: int = 1024 * 1024
    max_body_size: int = 5 * 1024 * 1024
    max_req_timeout: int = 3600 * SECOND
    client_timeout: int = 60 * SECOND
    max_heartbeat_interval: int = 60 * SECOND
    max_rdy_count: int = 2500
    max_output_buffer_size: int = 64 * 1024
    max_output_buffer_timeout: int = 30 * SECOND
    min_output_buffer_timeout: int = 25 * MS
    output_buffer_timeout: int = 250 * MS
    max_channel_consumers: int = 0
    statsd_address: str = ""
    statsd_prefix: str = "nsq.%s"
    statsd_interval: int = 60 * SECOND
    statsd_mem_stats: bool = True
    statsd_udp_packet_size: int = 508
    statsd_exclude_ephemeral: bool = False
    e2e_processing_latency_window_time: int = 10 * 60 * SECOND
    e2e_processing_latency_percentiles: list = dataclasses.field(default_factory=list)
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_auth_policy: str = ""
    tls_root_ca_file: str = ""
    tls_required: int = 0
    tls_min_version: int = 0x0301
    deflate_enabled: bool = True
    max_deflate_level: int = 6
    snappy_enabled: bool = True
    topology_region: str = ""
    topology_zone: str = ""
    experiments: list = dataclasses.field(default_factory=list)

    @property
    def auth_enabled(self) -> bool:
        return bool(self.auth_http_addresses)

    @property
    def default_heartbeat_interval(self) -> int:
        return self.client_timeout // 2  # C-27


# flag name -> (config name, parser); the flag name is also the one `nsqd --help` prints.
_FLAGS: dict[str, tuple[str, object]] = {
    "node-id": ("node_id", int),
    "log-prefix": ("log_prefix", str),
    "tcp-address": ("tcp_address", str),
    "http-address": ("http_address", str),
    "https-address": ("https_address", str),
    "broadcast-address": ("broadcast_address", str),
    "broadcast-tcp-port": ("broadcast_tcp_port", int),
    "broadcast-http-port": ("broadcast_http_port", int),
    "auth-http-request-method": ("auth_http_request_method", str),
    "http-client-connect-timeout": ("http_client_connect_timeout", parse_duration),
    "http-client-request-timeout": ("http_client_request_timeout", parse_duration),
    "data-path": ("data_path", str),
    "mem-queue-size": ("mem_queue_size", int),
    "max-bytes-per-file": ("max_bytes_per_file", int),
    "sync-every": ("sync_every", int),
    "sync-timeout": ("sync_timeout", parse_duration),
    "msg-timeout": ("msg_timeout", parse_duration),
    "max-msg-timeout": ("max_msg_timeout", parse_duration),
    "max-msg-size": ("max_msg_size", int),
    "max-body-size": ("max_body_size", int),
    "max-req-timeout": ("max_req_timeout", parse_duration),
    "max-heartbeat-interval": ("max_heartbeat_interval", parse_duration),
    "max-rdy-count": ("max_rdy_count", int),
    "max-output-buffer-size": ("max_output_buffer_size", int),
    "max-output-buffer-timeout": ("max_output_buffer_timeout", parse_duration),
    "min-output-buffer-timeout": ("min_output_buffer_timeout", parse_duration),
    "output-buffer-timeout": ("output_buffer_timeout", parse_duration),
    "max-channel-consumers": ("max_channel_consumers", int),
    "tls-cert": ("tls_cert", str),
    "tls-key": ("tls_key", str),
    "tls-client-auth-policy": ("tls_client_auth_policy", str),
    "tls-root-ca-file": ("tls_root_ca_file", str),
    "deflate": ("deflate_enabled", parse_bool),
    "max-deflate-level": ("max_deflate_level", int),
    "snappy": ("snappy_enabled", parse_bool),
    "topology-region": ("topology_region", str),
    "topology-zone": ("topology_zone", str),
}
# Repeatable flags: each occurrence appends.
_LIST_FLAGS = {
    "auth-http-address": ("auth_http_addresses", str),
    "lookupd-tcp-address": ("nsqlookupd_tcp_addresses", str),
}
# nsqd's flags that this broker does not implement: refused, never accepted and ignored. Their defaults
# still answer GET /config/:opt (H-CFG-01).
NOT_IMPLEMENTED_FLAGS = {
    "statsd-address": "statsd", "statsd-prefix": "statsd", "statsd-interval": "statsd",
    "statsd-mem-stats": "statsd", "statsd-udp-packet-size": "statsd", "statsd-exclude-ephemeral": "statsd",
    "e2e-processing-latency-percentile": "end-to-end latency percentiles",
    "e2e-processing-latency-window-time": "end-to-end latency percentiles",
    "queue-scan-selection-count": "queue-scan sampling (every channel is scanned on every tick)",
    "queue-scan-worker-pool-max": "queue-scan sampling (every channel is scanned on every tick)",
    "enable-experiment": "experiments",
}
_LOG_LEVELS = {"debug": 1, "info": 2, "warn": 3, "error": 4, "fatal": 5}
TLS_NOT_REQUIRED, TLS_REQUIRED_EXCEPT_HTTP, TLS_REQUIRED = 0, 1, 2  # nsqd's constants, as /config shows them
_TLS_REQUIRED = {"false": TLS_NOT_REQUIRED, "tcp-https": TLS_REQUIRED_EXCEPT_HTTP, "true": TLS_REQUIRED}
_TLS_MIN_VERSIONS = {"tls1.0": 0x0301, "tls1.1": 0x0302, "tls1.2": 0x0303, "tls1.3": 0x0304}
_BOOL_FLAGS = {"deflate", "snappy", "statsd-mem-stats", "statsd-exclude-ephemeral"}

# H-CFG-01: GET /config/:opt knows flag-backed options only, by config name: the flag name with dashes
# turned into underscores, except where nsqd's `cfg` tag renames it.
_CONFIG_NAME_ALIASES = {"id": "node_id", "deflate": "deflate_enabled", "snappy": "snappy_enabled",
                        "enable_experiment": "experiments"}
_NOT_FLAGS = {"queue_scan_interval", "queue_scan_refresh_interval", "queue_scan_dirty_percent", "client_timeout"}
CONFIG_NAMES = {**{name: name for name in Options.__dataclass_fields__
                   if name not in _NOT_FLAGS and name not in _CONFIG_NAME_ALIASES.values()},
                **_CONFIG_NAME_ALIASES}
PYTHON_LOG_LEVELS = {1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR, 5: logging.CRITICAL}


def parse_log_level(text: str) -> int:
    try:
        return _LOG_LEVELS[text.lower()]
    except KeyError:
        raise argparse.ArgumentTypeError(f"invalid log level {text!r}") from None


class _Refuse(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string} is not implemented by this reference broker "
                     f"({NOT_IMPLEMENTED_FLAGS[self.dest]})")


class FlagParser(argparse.ArgumentParser):
    def error(self, message: str):
        """A bad flag is one line and exit status 2, as Go's flag package does."""
        self.exit(2, f"{self.prog}: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = FlagParser(prog="nsq-reference-broker",
                             description="A minimal nsqd (TCP protocol V2 + HTTP API) in Python.",
                             allow_abbrev=False)
    defaults = Options()
    for flag, (name, parse) in _FLAGS.items():
        kwargs = {"dest": name, "type": parse, "default": argparse.SUPPRESS, "metavar": "VALUE",
                  "help": f"(default {getattr(defaults, name)!r})"}
        if flag in _BOOL_FLAGS:
            kwargs.update(nargs="?", const=True)
        parser.add_argument(f"--{flag}", f"-{flag}", **kwargs)
    for flag, (name, parse) in _LIST_FLAGS.items():
        parser.add_argument(f"--{flag}", f"-{flag}", dest=name, type=parse, action="append",
                            default=argparse.SUPPRESS, metavar="VALUE", help="(repeatable)")
    for flag in NOT_IMPLEMENTED_FLAGS:
        parser.add_argument(f"--{flag}", f"-{flag}", dest=flag, action=_Refuse, nargs="?", default=argparse.SUPPRESS,
                            help="not implemented: refused")
    parser.add_argument("--log-level", "-log-level", dest="log_level", type=parse_log_level,
                        default=argparse.SUPPRESS, help="debug, info, warn, error or fatal (default info)")
    parser.add_argument("--verbose", "-verbose", dest="verbose", type=parse_bool, nargs="?", const=True,
                        default=False, help="deprecated: same as --log-level=debug")
    parser.add_argument("--tls-required", "-tls-required", dest="tls_required",
                        type=lambda v: _TLS_REQUIRED[v] if v in _TLS_REQUIRED else TLS_REQUIRED * parse_bool(v),
                        nargs="?", const=TLS_REQUIRED, default=argparse.SUPPRESS)
    parser.add_argument("--tls-min-version", "-tls-min-version", dest="tls_min_version", type=parse_tls_version,
                        default=argparse.SUPPRESS, help="tls1.0, tls1.1, tls1.2 or tls1.3 (default tls1.0)")
    return parser


def parse_options(argv: list[str]) -> Options:
    parser = build_parser()
    namespace = vars(parser.parse_args(argv))
    if namespace.pop("verbose"):
        namespace.setdefault("log_level", _LOG_LEVELS["debug"])
    options = Options(**namespace)
    problem = validate(options)
    if problem:
        parser.error(problem)
    return options


def validate(options: Options) -> str | None:
    """The startup checks nsqd makes before listening."""
    if not 0 <= options.node_id < 1024:
        return f"--node-id must be [0,1024) got {options.node_id}"
    if not 1 <= options.max_deflate_level <= 9:
        return "--max-deflate-level must be [1,9]"
    if options.tls_client_auth_policy and options.tls_required == 0:
        options.tls_required = TLS_REQUIRED  # T-12: a client auth policy implies TLS required
    if options.tls_required and not (options.tls_cert or options.tls_key):
        return "cannot require TLS client connections without TLS key and cert"
    return None


def parse_tls_version(text: str) -> int:
    """apps/nsqd's tlsMinVersionOption: case-insensitive; ssl3.0, named in nsqd's help, is not in its table."""
    try:
        return _TLS_MIN_VERSIONS[text.lower()]
    except KeyError:
        raise argparse.ArgumentTypeError(f"unknown tlsVersionOption {text!r}") from None
