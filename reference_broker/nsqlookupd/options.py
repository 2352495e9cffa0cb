"""nsqlookupd's flags and defaults (apps/nsqlookupd/main.go, nsqlookupd/options.go), section 1 of
nsqlookupd-behavior.md. Durations take Go's syntax and are kept in nanoseconds, as nsqd's options are."""
from __future__ import annotations

import argparse
import dataclasses
import socket

from ..options import SECOND, FlagParser, parse_bool, parse_duration, parse_log_level

VERSION = "1.3.0"


@dataclasses.dataclass
class Options:
    log_level: int = 2  # info
    log_prefix: str = "[nsqlookupd] "
    tcp_address: str = "0.0.0.0:4160"
    http_address: str = "0.0.0.0:4161"
    broadcast_address: str = dataclasses.field(default_factory=socket.gethostname)
    inactive_producer_timeout: int = 300 * SECOND
    tombstone_lifetime: int = 45 * SECOND


_FLAGS = {
    "log-prefix": ("log_prefix", str),
    "tcp-address": ("tcp_address", str),
    "http-address": ("http_address", str),
    "broadcast-address": ("broadcast_address", str),
    "inactive-producer-timeout": ("inactive_producer_timeout", parse_duration),
    "tombstone-lifetime": ("tombstone_lifetime", parse_duration),
    "log-level": ("log_level", parse_log_level),
}


class _Refuse(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string} is not implemented by this reference nsqlookupd (a TOML config file)")


def build_parser() -> argparse.ArgumentParser:
    parser = FlagParser(prog="nsq-reference-lookupd", allow_abbrev=False,
                        description="A minimal nsqlookupd (TCP protocol V1 + HTTP API) in Python.")
    defaults = Options()
    for flag, (name, parse) in _FLAGS.items():
        parser.add_argument(f"--{flag}", f"-{flag}", dest=name, type=parse, default=argparse.SUPPRESS,
                            metavar="VALUE", help=f"(default {getattr(defaults, name)!r})")
    parser.add_argument("--verbose", "-verbose", dest="verbose", type=parse_bool, nargs="?", const=True,
                        default=argparse.SUPPRESS, help="deprecated: has no effect, use --log-level")
    parser.add_argument("--version", "-version", dest="version", type=parse_bool, nargs="?", const=True,
                        default=False, help="print the version and exit")
    parser.add_argument("--config", "-config", action=_Refuse, nargs="?", default=argparse.SUPPRESS,
                        help="not implemented: refused")
    return parser


def parse_options(argv: list[str]) -> tuple[Options, bool]:
    """The options, and whether `--version` asked for the version only."""
    namespace = vars(build_parser().parse_args(argv))
    namespace.pop("verbose", None)  # nsqlookupd v1.3.0 takes it and does nothing with it
    version = namespace.pop("version")
    return Options(**namespace), version
