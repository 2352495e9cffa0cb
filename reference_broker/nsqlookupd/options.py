"""nsqlookupd's flags and defaults (apps/nsqlookupd/main.go, nsqlookupd/options.go): one table, as nsqd's
(reference_broker/options.py). Durations take Go's syntax and are kept in nanoseconds, as nsqd's options are."""
from __future__ import annotations

import dataclasses
import socket

from ..options import SECOND, FlagParser, add_flags, flag, parse_bool, parse_duration, parse_log_level

VERSION = "1.3.0"


@dataclasses.dataclass
class Options:
    log_level: int = flag("log-level", 2, parse_log_level, help="log verbosity: debug, info, warn, error or fatal")
    log_prefix: str = flag("log-prefix", "[nsqlookupd] ", help="prefix of every log line")
    tcp_address: str = flag("tcp-address", "0.0.0.0:4160", help="<addr>:<port> to listen on for TCP clients")
    http_address: str = flag("http-address", "0.0.0.0:4161", help="<addr>:<port> to listen on for HTTP clients")
    broadcast_address: str = flag("broadcast-address", factory=socket.gethostname,
                                  help="address of this nsqlookupd in /nodes (default: the hostname)")
    inactive_producer_timeout: int = flag("inactive-producer-timeout", 300 * SECOND, parse_duration,
                                          help="time since a producer's last PING after which it is no longer listed")
    tombstone_lifetime: int = flag("tombstone-lifetime", 45 * SECOND, parse_duration,
                                   help="time a tombstoned producer stays tombstoned")
    config: str = flag("config", "", refused="a TOML config file")


def build_parser() -> FlagParser:
    parser = FlagParser("reference nsqlookupd", prog="nsq-reference-lookupd",
                        description="A minimal nsqlookupd (TCP protocol V1 + HTTP API) in Python.")
    add_flags(parser, Options)
    parser.add_argument("--verbose", "-verbose", dest="verbose", type=parse_bool, nargs="?", const=True,
                        default=None, help="deprecated: has no effect, use --log-level")
    parser.add_argument("--version", "-version", dest="version", type=parse_bool, nargs="?", const=True,
                        default=False, help="print the version and exit")
    return parser


def parse_options(argv: list[str]) -> tuple[Options, bool]:
    """The options, and whether `--version` asked for the version only."""
    namespace = vars(build_parser().parse_args(argv))
    del namespace["verbose"]  # nsqlookupd v1.3.0 takes it and does nothing with it
    version = namespace.pop("version")
    return Options(**namespace), version
