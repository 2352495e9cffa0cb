"""``nsq-trace``: analyse pcaps with Spark, generate seeded traces, capture live traffic.

    nsq-trace analyze pcaps/workload-small.pcap --out reports/workload
    nsq-trace analyze 's3://bucket/captures/*.pcap' --out s3://bucket/analysis/run1   (AWS_ENDPOINT_URL for others)
    nsq-trace watch captures/ --out live/   (files as they appear: Structured Streaming, checkpointed)
    nsq-trace generate --size 1GB --seed 7 -o big.pcap [--workload bench]
    nsq-trace capture --port 4150 -o out.pcap -- python my_producer.py
    nsq-trace prepare    (once per installation: an archive of Spark's classes for faster JVM starts)

Also runs under spark-submit: ``spark-submit spark_analysis/cli.py analyze ... --master yarn``.
Bad flags give one line on stderr and exit status 2 (argparse).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Callable

SIZE_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}


def parse_size(text: str) -> int:
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG]?I?B?)\s*", text.upper())
    if not match or match.group(2) not in SIZE_UNITS:
        raise argparse.ArgumentTypeError(f"invalid size {text!r} (examples: 500MB, 1GB, 64KiB)")
    return int(float(match.group(1)) * SIZE_UNITS[match.group(2)])


def parse_port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}")
    return int(text)


class _OneLineParser(argparse.ArgumentParser):
    """argparse prints the whole usage on a bad flag; a one-line error is easier to act on."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(prog="nsq-trace", description="NSQ trace capture, generation and Spark analysis")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_OneLineParser)

    analyze = commands.add_parser("analyze", help="decode pcaps with Spark into tables, summary.json and a report")
    analyze.add_argument("pcaps", nargs="+",
                         help="pcap/pcapng files, directories or globs: paths or URLs (s3://, gs://, hdfs://, file://)")
    analyze.add_argument("--out", required=True, help="output directory: a path or a URL")
    _analysis_options(analyze)

    watch = commands.add_parser(
        "watch", help="analyse capture files as they appear in a directory (Spark Structured Streaming)")
    watch.add_argument("source", help="the directory (or glob) the capture files appear in: their names must sort "
                       "in the order they are written, as tcpdump -G's strftime names do")
    watch.add_argument("--out", required=True,
                       help="output directory (local path or file:// URL): summary.json, minutes.json, report.html, "
                       "snapshots/, and the checkpoint in watch/: restarting with the same --out resumes")
    watch.add_argument("--settle-seconds", type=float, default=2.0,
                       help="a file is taken once unchanged this long (default 2)")
    watch.add_argument("--trigger-seconds", type=float, default=5.0, help="micro-batch interval (default 5)")
    watch.add_argument("--until-idle", type=float, default=None, metavar="SECONDS",
                       help="stop once no file has been taken for this long (default: run until interrupted)")
    _analysis_options(watch)

    generate = commands.add_parser("generate", help="write a seeded synthetic NSQ trace and its truth")
    generate.add_argument("--size", type=parse_size, required=True, help="target size, e.g. 1GB")
    generate.add_argument("--seed", type=int, default=7)
    generate.add_argument("-o", "--output", required=True, help="pcap path; truth goes to <stem>.truth.json")
    generate.add_argument(
        "--drop-segments",
        type=float,
        default=0.0,
        metavar="FRACTION",
        help="drop this fraction of consumer segments from the capture (e.g. 0.001)",
    )
    generate.add_argument("--format", choices=("pcap", "pcapng"), default="pcap")
    generate.add_argument(
        "--workload",
        choices=("mixed", "bench", "long"),
        default="mixed",
        help="mixed: every feature, ~6 KB messages; bench: nsq's bench tools, 100-300 B messages in MPUB batches; "
        "long: bench's traffic on one connection that publishes and consumes",
    )

    capture = commands.add_parser("capture", help="record the NSQ traffic of a command")
    capture.add_argument("--port", type=parse_port, action="append",
                         help="a TCP port to capture (repeatable: nsqd's and nsqlookupd's; default 4150)")
    capture.add_argument("-o", "--output", required=True)
    capture.add_argument("--interface", default="lo")
    capture.add_argument("argv", nargs=argparse.REMAINDER, help="-- command to run while capturing")

    commands.add_parser(
        "prepare",
        help="archive Spark's classes once for this Spark and Java (local analyses then start ~2 s faster)",
    )
    return parser


def _analysis_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option of the URLs' filesystem (pyarrow.fs.S3FileSystem / GcsFileSystem: region=..., "
        "endpoint_override=..., anonymous=true); AWS_ENDPOINT_URL sets the S3 endpoint (repeatable)",
    )
    parser.add_argument(
        "--master",
        default=None,
        help="Spark master (default: local[2]; under spark-submit, spark-submit's --master)",
    )
    parser.add_argument(
        "--nsq-port",
        type=parse_port,
        action="append",
        dest="nsq_ports",
        help="nsqd TCP port for connections seen without their start (repeatable; "
        "default 4150; connections that send the V2 magic are found on any port)",
    )
    parser.add_argument(
        "--http-port",
        type=parse_port,
        action="append",
        dest="http_ports",
        default=[],
        help="nsqd HTTP API port whose traffic the capture holds (repeatable; none by default): its publishes, "
        "pauses and empties are read, so that the rules about every publish and every consumer judge",
    )
    parser.add_argument(
        "--lookupd-http-port",
        type=parse_port,
        action="append",
        dest="lookupd_http_ports",
        default=[],
        help="nsqlookupd HTTP API port whose traffic the capture holds (repeatable; none by default): its answers "
        "are judged, each nsqlookupd by its host's, and the registrations made over it known",
    )
    parser.add_argument(
        "--lookupd-test-clients",
        action="store_true",
        help="nsqlookupd's V1 clients are test programs, not nsqds (a capture of the conformance suite's lookupd "
        "cases): nsqd's rules of registering (R-01 to R-08) are not judged on them. By default they are taken as "
        "nsqds, as in production, and judged against what each nsqd's own traffic shows it creating and deleting",
    )
    parser.add_argument(
        "--split-size",
        type=parse_size,
        default=None,
        help="byte-range size for splitting large files (default 64MiB, 0 = per file)",
    )
    parser.add_argument(
        "--window-size",
        type=parse_size,
        default=None,
        help="a connection's bytes decoded at a time (default 16MiB): memory per connection is a few of them",
    )
    parser.add_argument("--shuffle-partitions", type=int, default=4)
    parser.add_argument("--no-report", action="store_true", help="skip the HTML report")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "analyze":
        return _analyze(parser, args)
    if args.command == "watch":
        return _watch(parser, args)
    if args.command == "generate":
        from spark_analysis.generate import generate

        directory = os.path.dirname(args.output) or "."
        if not os.path.isdir(directory):
            parser.error(f"-o {args.output}: no such directory {directory}")
        truth = generate(
            args.output,
            args.size,
            seed=args.seed,
            drop_fraction=args.drop_segments,
            file_format=args.format,
            progress=True,
            workload=args.workload,
        )
        print(
            f"wrote {args.output} ({truth['file']['bytes']:,} bytes, "
            f"{truth['totals']['deliveries']:,} deliveries)"
            f" and {truth['file']['truth']}"
        )
        return 0
    if args.command == "prepare":
        return _prepare()
    from spark_analysis.capture import capture

    command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not command:
        parser.error("capture needs a command after --")
    return capture(args.port or [4150], args.output, command, interface=args.interface)


def _progress() -> Callable[[str], None]:
    """``step(message)``, printing on stderr the seconds since now before each message."""
    from rich.console import Console
    from rich.control import Control, ControlType

    console = Console(stderr=True)
    started = time.monotonic()
    # a line from within a job starts over Spark's progress bar, drawn again below it (written on a terminal only)
    line_start = Control((ControlType.CARRIAGE_RETURN,), (ControlType.ERASE_IN_LINE, 2))

    def step(message: str):
        console.control(line_start)
        console.print(f"[bold cyan]{time.monotonic() - started:6.1f}s[/] {message}")

    return step


def _master(args) -> tuple[str | None, bool]:
    """The master, and whether it is local: a JVM and Python processes started on this machine, where the
    session's measured tuning applies. spark-submit (which sets SPARK_ENV_LOADED) has already chosen it."""
    master = args.master or (None if os.environ.get("SPARK_ENV_LOADED") else "local[2]")
    return master, master is not None and master.startswith("local")


def _analyze(parser, args) -> int:
    from spark_analysis.analysis import DEFAULT_NSQ_PORTS, DEFAULT_WINDOW_BYTES, run_analysis
    from spark_analysis.read.datasource import DEFAULT_SPLIT_BYTES
    from spark_analysis.read.storage import Storage, StorageError
    from spark_analysis.report.summary import violations_line
    from spark_analysis.session import archive_java_options, spark_session

    if args.window_size == 0:
        parser.error("--window-size must be at least 1 byte")
    try:
        storage = Storage.from_environment(args.storage_option)
        files = storage.expand(args.pcaps)
        missing = [path for path in files if not storage.is_file(path)]
        if not files or missing:
            parser.error(f"no such capture file: {', '.join(missing or args.pcaps)}")
        storage.make_directory(args.out)  # a missing bucket or a read-only place fails here, before Spark starts
    except (StorageError, OSError) as exc:
        parser.error(str(exc).splitlines()[0])
    step = _progress()
    master, local = _master(args)
    step(
        f"starting Spark ({master or 'from spark-submit'}) for {len(files)} file(s), "
        f"{sum(storage.size(p) for p in files) / 1e6:,.1f} MB"
    )
    if local and not archive_java_options():
        step("no class archive yet: run `nsq-trace prepare` once for quicker starts")
    with spark_session(master, args.shuffle_partitions, tuned=local) as spark:
        result = run_analysis(
            spark,
            files,
            args.out,
            frozenset(args.nsq_ports or DEFAULT_NSQ_PORTS),
            DEFAULT_SPLIT_BYTES if args.split_size is None else args.split_size,
            DEFAULT_WINDOW_BYTES if args.window_size is None else args.window_size,
            report=not args.no_report,
            step=step,
            storage=storage,
            http_ports=frozenset(args.http_ports),
            lookupd_http_ports=frozenset(args.lookupd_http_ports),
            nsqd_clients=not args.lookupd_test_clients,
        )
    totals = result["totals"]
    step(
        f"done: {totals['tcp_connections_nsqd_tcp_port']} NSQ connections, {totals['messages_published']:,} "
        f"published, {totals['deliveries']:,} deliveries, {violations_line(result)}, "
        f"{sum(result['errors'].values())} capture/decode errors -> {args.out}/summary.json"
    )
    return 0


def _watch(parser, args) -> int:
    from spark_analysis.analysis import DEFAULT_NSQ_PORTS, DEFAULT_WINDOW_BYTES
    from spark_analysis.read.datasource import DEFAULT_SPLIT_BYTES
    from spark_analysis.read.storage import Storage, StorageError, is_local, local_path
    from spark_analysis.session import spark_session
    from spark_analysis.watch.stream import WatchError, run_watch

    if args.window_size == 0:
        parser.error("--window-size must be at least 1 byte")
    if args.trigger_seconds <= 0 or args.settle_seconds < 0 or (args.until_idle or 0) < 0:
        parser.error("watch: --trigger-seconds must be positive, --settle-seconds and --until-idle not negative")
    if not is_local(args.out):
        parser.error("watch: --out must be a local directory or a file:// URL (Spark keeps its checkpoint there)")
    try:
        storage = Storage.from_environment(args.storage_option)
        if not any(character in args.source for character in "*?[") and not storage.is_directory(args.source):
            parser.error(f"watch: no such directory: {args.source}")
        storage.make_directory(args.out)
    except (StorageError, OSError) as exc:
        parser.error(str(exc).splitlines()[0])
    step = _progress()
    master, local = _master(args)
    step(f"starting Spark ({master or 'from spark-submit'}), watching {args.source}")
    options = {
        "nsq_ports": frozenset(args.nsq_ports or DEFAULT_NSQ_PORTS),
        "http_ports": frozenset(args.http_ports),
        "lookupd_http_ports": frozenset(args.lookupd_http_ports),
        "nsqd_clients": not args.lookupd_test_clients,
        "split_bytes": DEFAULT_SPLIT_BYTES if args.split_size is None else args.split_size,
        "window_bytes": DEFAULT_WINDOW_BYTES if args.window_size is None else args.window_size,
        "report": not args.no_report,
    }
    with spark_session(master, args.shuffle_partitions, show_progress=False, tuned=local) as spark:
        try:
            run_watch(spark, args.source, local_path(args.out), options, storage, args.settle_seconds,
                      args.trigger_seconds, args.until_idle, step)
        except WatchError as exc:
            print(f"nsq-trace watch: {exc}", file=sys.stderr)  # one line, as it is: not wrapped, no markup
            return 1
    return 0


def _prepare() -> int:
    from rich.console import Console

    from spark_analysis.session import prepare

    console = Console(stderr=True)
    started = time.monotonic()
    try:
        with console.status("preparing") as status:
            archive = prepare(lambda message: status.update(f"{message} ({time.monotonic() - started:.0f}s)"))
    except RuntimeError as exc:
        print(f"nsq-trace prepare: {exc}", file=sys.stderr)
        return 1
    size_mb = os.path.getsize(archive) / 1e6
    console.print(f"wrote {archive} ({size_mb:,.0f} MB) in {time.monotonic() - started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
