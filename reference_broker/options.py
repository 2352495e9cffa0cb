"""nsqd's flags, their defaults and their validation (apps/nsqd/options.go, nsqd/options.go).

One table, as options.go's struct tags are: each field of ``Options`` is an option with its default, and, when
nsqd has a flag for it, that flag (``flag()``: name, parser, help, config name) in the field's metadata. The
command line (``build_parser``) and GET /config/:opt (``CONFIG_NAMES``) both come from it. Every option keeps
nsqd's flag name (`--max-rdy-count`) and its config name (`max_rdy_count`). Durations take Go's syntax (`100ms`,
`1m30s`) and are stored as nanoseconds. A flag of nsqd's that this broker does not implement is refused in one
line, as a bad value is.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import logging
import re
import socket
import zlib
from collections.abc import Callable

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


_LOG_LEVELS = {"debug": 1, "info": 2, "warn": 3, "error": 4, "fatal": 5}
PYTHON_LOG_LEVELS = {1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR, 5: logging.CRITICAL}
TLS_NOT_REQUIRED, TLS_REQUIRED_EXCEPT_HTTP, TLS_REQUIRED = 0, 1, 2  # nsqd's constants, as /config shows them
_TLS_REQUIRED = {"false": TLS_NOT_REQUIRED, "tcp-https": TLS_REQUIRED_EXCEPT_HTTP, "true": TLS_REQUIRED}
_TLS_MIN_VERSIONS = {"tls1.0": 0x0301, "tls1.1": 0x0302, "tls1.2": 0x0303, "tls1.3": 0x0304}


def parse_log_level(text: str) -> int:
    try:
        return _LOG_LEVELS[text.lower()]
    except KeyError:
        raise argparse.ArgumentTypeError(f"invalid log level {text!r}") from None


def parse_tls_required(text: str) -> int:
    """apps/nsqd's tlsRequiredOption: tcp-https, or a Go boolean."""
    return _TLS_REQUIRED[text] if text in _TLS_REQUIRED else TLS_REQUIRED * parse_bool(text)


def parse_tls_version(text: str) -> int:
    """apps/nsqd's tlsMinVersionOption: case-insensitive; ssl3.0, named in nsqd's help, is not in its table."""
    try:
        return _TLS_MIN_VERSIONS[text.lower()]
    except KeyError:
        raise argparse.ArgumentTypeError(f"unknown tlsVersionOption {text!r}") from None


@dataclasses.dataclass(frozen=True)
class Flag:
    """The flag behind an option (options.go's `flag:"..."` and `cfg:"..."` tags): its name, how its value is
    parsed, its help, its config name where that is not the field's (GET /config/:opt), whether it may be given
    again (each time appends), the value it takes when given bare (`--snappy`), and, for a flag this program does
    not implement, what it would have done (it is refused)."""

    name: str
    parse: Callable[[str], object] = str
    help: str = ""
    cfg: str | None = None
    repeatable: bool = False
    bare: object = None
    refused: str | None = None


def flag(name: str, default=dataclasses.MISSING, parse: Callable[[str], object] = str, help: str = "", *,
         factory=dataclasses.MISSING, cfg: str | None = None, repeatable: bool = False, bare=None,
         refused: str | None = None):
    """An option with its flag: one row of the table."""
    if repeatable and factory is dataclasses.MISSING:
        factory = list
    return dataclasses.field(default=default, default_factory=factory, metadata={
        "flag": Flag(name, parse, help, cfg, repeatable, bare, refused)})


_EVERY_CHANNEL_SCANNED = "queue-scan sampling (every channel is scanned on every tick)"
_E2E = "end-to-end latency percentiles"


@dataclasses.dataclass
class Options:
    node_id: int = flag("node-id", parse=int, factory=default_node_id, cfg="id",
                        help="unique part of message IDs, in [0,1024) (default: a hash of the hostname)")
    log_level: int = flag("log-level", 2, parse_log_level,
                          help="log verbosity: debug, info, warn, error or fatal")
    log_prefix: str = flag("log-prefix", "[nsqd] ", help="prefix of every log line")
    tcp_address: str = flag("tcp-address", "0.0.0.0:4150", help="<addr>:<port> to listen on for TCP clients")
    http_address: str = flag("http-address", "0.0.0.0:4151",
                             help="<addr>:<port> to listen on for HTTP clients (empty: no HTTP)")
    https_address: str = flag("https-address", "0.0.0.0:4152",
                              help="<addr>:<port> to listen on for HTTPS clients (with --tls-cert)")
    broadcast_address: str = flag("broadcast-address", factory=socket.gethostname,
                                  help="address registered with nsqlookupd (default: the hostname)")
    broadcast_tcp_port: int = flag("broadcast-tcp-port", 0, int,
                                   help="TCP port registered with nsqlookupd (0: the one listened on)")
    broadcast_http_port: int = flag("broadcast-http-port", 0, int,
                                    help="HTTP port registered with nsqlookupd (0: the one listened on)")
    nsqlookupd_tcp_addresses: list = flag("lookupd-tcp-address", repeatable=True,
                                          help="TCP address of an nsqlookupd to register with")
    auth_http_addresses: list = flag("auth-http-address", repeatable=True,
                                     help="<addr>:<port> or URL of the auth server to ask on AUTH")
    auth_http_request_method: str = flag("auth-http-request-method", "get",
                                         help="HTTP method of the auth requests (get or post)")
    http_client_connect_timeout: int = flag("http-client-connect-timeout", 2 * SECOND, parse_duration,
                                            help="timeout of HTTP connects (auth, nsqlookupd)")
    http_client_request_timeout: int = flag("http-client-request-timeout", 5 * SECOND, parse_duration,
                                            help="timeout of HTTP requests (auth, nsqlookupd)")
    data_path: str = flag("data-path", "", help="directory of the disk queues and nsqd.dat (default: the "
                          "working directory)")
    mem_queue_size: int = flag("mem-queue-size", 10000, int,
                               help="messages kept in memory per topic and channel; the rest go to disk")
    max_bytes_per_file: int = flag("max-bytes-per-file", 100 * 1024 * 1024, int,
                                   help="bytes per disk queue file before it rolls")
    sync_every: int = flag("sync-every", 2500, int, help="disk queue reads and writes per fsync")
    sync_timeout: int = flag("sync-timeout", 2 * SECOND, parse_duration,
                             help="longest time between disk queue fsyncs")
    queue_scan_interval: int = 100 * MS
    queue_scan_refresh_interval: int = 5 * SECOND
    queue_scan_selection_count: int = flag("queue-scan-selection-count", 20, int, refused=_EVERY_CHANNEL_SCANNED)
    queue_scan_worker_pool_max: int = flag("queue-scan-worker-pool-max", 4, int, refused=_EVERY_CHANNEL_SCANNED)
    queue_scan_dirty_percent: float = 0.25
    msg_timeout: int = flag("msg-timeout", 60 * SECOND, parse_duration,
                            help="time a message may be in flight before it is requeued")
    max_msg_timeout: int = flag("max-msg-timeout", 15 * 60 * SECOND, parse_duration,
                                help="largest msg_timeout a client may IDENTIFY")
    max_msg_size: int = flag("max-msg-size", 1024 * 1024, int, help="largest message body in bytes")
    max_body_size: int = flag("max-body-size", 5 * 1024 * 1024, int, help="largest command body in bytes")
    max_req_timeout: int = flag("max-req-timeout", 3600 * SECOND, parse_duration,
                                help="longest delay of a REQ or DPUB")
    client_timeout: int = 60 * SECOND
    max_heartbeat_interval: int = flag("max-heartbeat-interval", 60 * SECOND, parse_duration,
                                       help="longest heartbeat interval a client may IDENTIFY")
    max_rdy_count: int = flag("max-rdy-count", 2500, int, help="largest RDY count of a client")
    max_output_buffer_size: int = flag("max-output-buffer-size", 64 * 1024, int,
                                       help="largest output buffer in bytes a client may IDENTIFY")
    max_output_buffer_timeout: int = flag("max-output-buffer-timeout", 30 * SECOND, parse_duration,
                                          help="longest output buffer timeout a client may IDENTIFY")
    min_output_buffer_timeout: int = flag("min-output-buffer-timeout", 25 * MS, parse_duration,
                                          help="shortest output buffer timeout a client may IDENTIFY")
    output_buffer_timeout: int = flag("output-buffer-timeout", 250 * MS, parse_duration,
                                      help="time between flushes of a client's output buffer")
    max_channel_consumers: int = flag("max-channel-consumers", 0, int,
                                      help="most consumers of one channel (0: no limit)")
    statsd_address: str = flag("statsd-address", "", refused="statsd")
    statsd_prefix: str = flag("statsd-prefix", "nsq.%s", refused="statsd")
    statsd_interval: int = flag("statsd-interval", 60 * SECOND, parse_duration, refused="statsd")
    statsd_mem_stats: bool = flag("statsd-mem-stats", True, parse_bool, bare=True, refused="statsd")
    statsd_udp_packet_size: int = flag("statsd-udp-packet-size", 508, int, refused="statsd")
    statsd_exclude_ephemeral: bool = flag("statsd-exclude-ephemeral", False, parse_bool, bare=True, refused="statsd")
    e2e_processing_latency_window_time: int = flag("e2e-processing-latency-window-time", 10 * 60 * SECOND,
                                                   parse_duration, refused=_E2E)
    e2e_processing_latency_percentiles: list = flag("e2e-processing-latency-percentile", repeatable=True,
                                                    refused=_E2E)
    tls_cert: str = flag("tls-cert", "", help="path of the server certificate (PEM)")
    tls_key: str = flag("tls-key", "", help="path of its private key (PEM)")
    tls_client_auth_policy: str = flag("tls-client-auth-policy", "",
                                       help="client certificates: require or require-verify (implies --tls-required)")
    tls_root_ca_file: str = flag("tls-root-ca-file", "", help="CA (PEM) that verifies client certificates")
    tls_required: int = flag("tls-required", TLS_NOT_REQUIRED, parse_tls_required, bare=TLS_REQUIRED,
                             help="require TLS of clients: true, false or tcp-https (TCP only)")
    tls_min_version: int = flag("tls-min-version", 0x0301, parse_tls_version,
                                help="oldest TLS version accepted: tls1.0, tls1.1, tls1.2 or tls1.3")
    deflate_enabled: bool = flag("deflate", True, parse_bool, bare=True, cfg="deflate",
                                 help="let clients negotiate deflate")
    max_deflate_level: int = flag("max-deflate-level", 6, int, help="highest deflate level a client may negotiate")
    snappy_enabled: bool = flag("snappy", True, parse_bool, bare=True, cfg="snappy",
                                help="let clients negotiate snappy")
    topology_region: str = flag("topology-region", "", help="this nsqd's region, shown in /info")
    topology_zone: str = flag("topology-zone", "", help="this nsqd's zone, shown in /info")
    experiments: list = flag("enable-experiment", repeatable=True, cfg="enable_experiment", refused="experiments")

    @property
    def auth_enabled(self) -> bool:
        return bool(self.auth_http_addresses)

    @property
    def default_heartbeat_interval(self) -> int:
        return self.client_timeout // 2  # C-27


def flags(options_class) -> dict[str, tuple[str, Flag]]:
    """The flags of an options dataclass: config name -> (field name, flag)."""
    return {field.metadata["flag"].cfg or field.name: (field.name, field.metadata["flag"])
            for field in dataclasses.fields(options_class) if "flag" in field.metadata}


# H-CFG-01: GET /config/:opt knows flag-backed options only, by config name.
CONFIG_NAMES = {cfg: name for cfg, (name, _) in flags(Options).items()}


class _Refuse(argparse.Action):
    def __init__(self, *arguments, reason: str, **keywords):
        super().__init__(*arguments, **keywords)
        self.reason = reason

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string} is not implemented by this {parser.program} ({self.reason})")


class FlagParser(argparse.ArgumentParser):
    def __init__(self, program: str, **keywords):
        super().__init__(allow_abbrev=False, **keywords)
        self.program = program  # who refuses a flag it does not implement

    def error(self, message: str):
        """A bad flag is one line and exit status 2, as Go's flag package does."""
        self.exit(2, f"{self.prog}: {message}\n")


def add_flags(parser: FlagParser, options_class) -> None:
    """Every flag of ``options_class``, as ``--name`` and Go's ``-name``. A flag left out keeps the dataclass's
    default (argparse.SUPPRESS); a refused one is an error whatever its value."""
    defaults = {field.name: field.default for field in dataclasses.fields(options_class)}  # MISSING: computed
    for name, spec in flags(options_class).values():
        switches = (f"--{spec.name}", f"-{spec.name}")
        if spec.refused:
            parser.add_argument(*switches, dest=name, action=_Refuse, reason=spec.refused, nargs="?",
                                default=argparse.SUPPRESS, metavar="VALUE", help="not implemented: refused")
            continue
        keywords = {"dest": name, "type": spec.parse, "default": argparse.SUPPRESS, "metavar": "VALUE",
                    "action": "append" if spec.repeatable else "store",
                    "help": f"{spec.help} (repeatable)" if spec.repeatable else _with_default(spec, defaults[name])}
        if spec.bare is not None:
            keywords.update(nargs="?", const=spec.bare)
        parser.add_argument(*switches, **keywords)


def _with_default(spec: Flag, default) -> str:
    """The help, and the default as one would write the flag (`2s`, `tls1.0`, `true`, `'[nsqd] '`)."""
    if default is dataclasses.MISSING:
        return spec.help  # computed at startup; the help says from what
    names = {parse_log_level: _LOG_LEVELS, parse_tls_version: _TLS_MIN_VERSIONS, parse_tls_required: _TLS_REQUIRED}
    if spec.parse in names:
        shown = next(name for name, value in names[spec.parse].items() if value == default)
    elif spec.parse is parse_duration:
        shown = _go_duration(default)
    elif isinstance(default, bool):
        shown = str(default).lower()
    else:
        shown = repr(default)
    return f"{spec.help} (default {shown})"


def _go_duration(nanoseconds: int) -> str:
    """Go's way of writing a round duration: 1h, 15m, 2s, 250ms."""
    units = (("h", 3600 * SECOND), ("m", 60 * SECOND), ("s", SECOND), ("ms", MS), ("ns", 1))
    return next((f"{nanoseconds // size}{unit}" for unit, size in units if nanoseconds % size == 0), "0") \
        if nanoseconds else "0s"


def build_parser() -> FlagParser:
    parser = FlagParser("reference broker", prog="nsq-reference-broker",
                        description="A minimal nsqd (TCP protocol V2 + HTTP API) in Python.")
    add_flags(parser, Options)
    parser.add_argument("--verbose", "-verbose", dest="verbose", type=parse_bool, nargs="?", const=True,
                        default=False, help="deprecated: same as --log-level=debug")
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
