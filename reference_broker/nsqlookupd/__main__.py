"""`nsq-reference-lookupd` / `python -m reference_broker.nsqlookupd`: parse nsqlookupd's flags, listen, run
until SIGINT or SIGTERM."""
from __future__ import annotations

import logging
import sys

from ..service import configure_logging, stop_signal
from .nsqlookupd import NSQLookupd
from .options import VERSION, parse_options


def main(argv: list[str] | None = None) -> int:
    options, version_only = parse_options(sys.argv[1:] if argv is None else argv)
    if version_only:
        print(f"nsqlookupd v{VERSION} (reference)")
        return 0
    configure_logging(options.log_level, options.log_prefix)
    try:
        lookupd = NSQLookupd(options)
    except OSError as error:
        print(f"nsq-reference-lookupd: listen failed - {error}", file=sys.stderr)
        return 1
    stopping = stop_signal()
    logging.getLogger("nsqlookupd").info("nsqlookupd v%s (reference)", VERSION)
    lookupd.start()
    stopping.wait()
    lookupd.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
