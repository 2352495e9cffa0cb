"""Trace-analysis throughput: generate seeded traces or record a real one, analyse them with Spark on
local[2], and count or parse the same files with a plain-Python counter (trace_baseline.py), dpkt
(whole file) and scapy (a bounded sample, extrapolated). Three workloads side by side: the
generator's mixed one (1 GB, ~6 KB messages), its bench one (350 MB of nsq's bench tools' 100-300 B
messages), where the per-message cost shows, and the captured one: the same kind of traffic from
pynsq, the official Python client, through the reference broker, recorded on loopback with
``nsq-trace capture``'s scapy path (100 MB, trace_pynsq_recording.py), so that real TCP segmentation,
client timing and heartbeats are measured too. The bench and captured figures are message events per
second (published + deliveries + FIN/REQ/TOUCH) and their ratio to the plain counter's time. A fourth,
the long workload, is the bench's traffic on a single connection that publishes and consumes (2 GB): its
figure is the peak memory of all processes (target 3 GB), a connection being decoded in bounded windows. A fifth,
s3, is the bench workload read from and written to an S3-compatible store (moto's server on loopback, started by
this process, so that its memory is not the analysis's): ranged reads of the capture, every table written there.
A sixth, watch, is continuous mode: the bench's traffic cut into rotation files (as ``tcpdump -G`` writes them) that
appear in a directory at the target rate, 150,000 message events/s, while ``nsq-trace watch`` takes them; its
figures are the watcher's sustained rate (message events over the seconds its micro-batches took; steady: those
after the first, which also warms the workers up), how far it lagged behind the files (per batch: a watcher that
keeps up lags no further as files keep coming), and the peak memory of its processes.
The 1-minute load average goes with each figure: the machine's 2 cores are shared.

    python -m benchmarks.trace_throughput                 # writes bench-results/trace.json
    python -m benchmarks.trace_throughput --size 200MB --workloads bench    # quicker
    python -m benchmarks.trace_throughput --workloads captured --captured-size 20MB   # root, pynsq
    python -m benchmarks.trace_throughput --workloads long --long-size 500MB
    python -m benchmarks.trace_throughput --workloads s3 --bench-size 100MB
    python -m benchmarks.trace_throughput --workloads watch --watch-size 200MB

First, the committed 9 MB sample (pcaps/workload-small.pcap) through ``nsq-trace analyze`` in a process of its own:
the time to a user's first result, the JVM's start included (target 15 s).

The analysis is checked against the generator's truth (the captured trace: what its clients observed,
checked against the broker's /stats), so a fast wrong answer does not count.
The driver JVM maps the class archive of ``nsq-trace prepare``; the bench builds it first (timed
apart, once per installation) when it is missing.
Memory: the peak resident size of this process plus its descendants (JVM, Python workers), all
of it (shared pages once per process), proportional (shared pages split among their processes) and without mapped
file pages, is sampled from /proc every 0.2 s.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from benchmarks import trace_baseline
from spark_analysis.cli import parse_size

TRUTH_KEYS = ("totals", "topics")
WORKLOADS = ("mixed", "bench", "captured", "long", "s3", "watch")
PCAP_HEADER, RECORD_HEADER = 24, 16


REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "pcaps" / "workload-small.pcap"

class PeakMemory:
    """Peak summed resident memory of a process tree, sampled from /proc.

    ``peak_bytes`` sums the processes' resident pages, including the file pages they map (the capture, the JVM's
    class archive, each Python worker's copy of the same shared libraries: counted once per process);
    ``peak_proportional_bytes`` counts a page shared by n processes 1/n in each (PSS: the memory the processes
    take together); ``peak_anonymous_bytes`` only the processes' own memory (heaps, Python objects), which is
    what the analysis really needs."""

    def __init__(self, root_pid: int, interval: float = 0.2):
        self.root_pid, self.interval = root_pid, interval
        self.peak_bytes = self.peak_anonymous_bytes = self.peak_proportional_bytes = 0
        self._cpu_ticks: dict[int, int] = {}  # the tree's processes: user + system time, theirs and their children's
        self.peak_processes: list[dict] = []  # at the peak of all processes' resident memory: each one's
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._root_ticks_before = _cpu_ticks(self.root_pid)  # what it did before is not the measured work's
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _run(self):
        while not self._stop.wait(self.interval):
            parents, resident = {}, {}
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    with open(f"/proc/{pid}/status") as handle:
                        fields = dict(line.split(":", 1) for line in handle if ":" in line)
                    parents[int(pid)] = int(fields["PPid"])
                    # kB; kernel threads have no Rss fields
                    resident[int(pid)] = (int(fields["RssAnon"].split()[0]), int(fields["RssFile"].split()[0]))
                except (OSError, KeyError):
                    continue
            tree, frontier = {self.root_pid}, [self.root_pid]
            while frontier:
                parent = frontier.pop()
                children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in tree]
                tree.update(children)
                frontier += children
            for pid in tree:
                self._cpu_ticks[pid] = max(self._cpu_ticks.get(pid, 0), _cpu_ticks(pid))
            anonymous = sum(resident.get(pid, (0, 0))[0] for pid in tree) * 1024
            files = sum(resident.get(pid, (0, 0))[1] for pid in tree) * 1024
            if anonymous + files > self.peak_bytes:
                self.peak_processes = sorted(
                    ({"process": _process_name(pid), "rss_mb": round(sum(resident[pid]) * 1024 / 1e6),
                      "anonymous_mb": round(resident[pid][0] * 1024 / 1e6)} for pid in tree if pid in resident),
                    key=lambda process: -process["rss_mb"])
            self.peak_bytes = max(self.peak_bytes, anonymous + files)
            self.peak_anonymous_bytes = max(self.peak_anonymous_bytes, anonymous)
            self.peak_proportional_bytes = max(self.peak_proportional_bytes, sum(map(_pss, tree)))


    @property
    def cpu_seconds(self) -> float:
        """The CPU time the tree's processes used (what a shared machine's load does not inflate as it does the
        wall time)."""
        return (sum(self._cpu_ticks.values()) - self._root_ticks_before) / os.sysconf("SC_CLK_TCK")


def _process_name(pid: int) -> str:
    """The JVM, a Python worker or daemon, or the driver: the command's program and its module or main class."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            words = [word.decode(errors="replace") for word in handle.read().split(b"\0") if word]
    except OSError:
        return "?"
    program = os.path.basename(words[0]) if words else "?"
    detail = next((word for word in words[1:] if not word.startswith("-") and "=" not in word), "")
    return f"{program} {os.path.basename(detail)}".strip()[:60]


def _cpu_ticks(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return sum(int(value) for value in fields[11:15])  # utime, stime, cutime, cstime
    except (OSError, IndexError, ValueError):
        return 0


def _pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            return next(int(line.split()[1]) for line in handle if line.startswith("Pss:")) * 1024
    except (OSError, StopIteration):
        return 0


def timed(function, *args, **kwargs):
    started = time.perf_counter()
    result = function(*args, **kwargs)
    return result, time.perf_counter() - started


def dpkt_pass(path: str) -> dict:
    """Bare TCP pass: every packet decoded to its TCP payload."""
    import dpkt

    packets = payload = 0
    with open(path, "rb") as handle:
        for _ts, frame in dpkt.pcap.Reader(handle):
            ip = dpkt.ethernet.Ethernet(frame).data
            if isinstance(ip, dpkt.ip.IP) and isinstance(ip.data, dpkt.tcp.TCP):
                packets += 1
                payload += len(ip.data.data)
    return {"packets": packets, "payload_bytes": payload}


def scapy_pass(path: str, sample_packets: int) -> dict:
    """scapy dissects ~1e4 packets/s, so it parses only the first ``sample_packets`` packets."""
    from scapy.layers.inet import TCP
    from scapy.utils import PcapReader

    packets = payload = 0
    with PcapReader(path) as reader:
        for packet in reader:
            if TCP in packet:
                payload += len(bytes(packet[TCP].payload))
            packets += 1
            if packets >= sample_packets:
                break
        sample_end = reader.f.tell()
    return {"packets": packets, "payload_bytes": payload, "sample_file_bytes": sample_end}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=parse_size, default=parse_size("1GB"), help="the mixed trace (default 1GB)")
    parser.add_argument(
        "--bench-size", type=parse_size, default=parse_size("350MB"), help="the bench-workload trace (default 350MB)"
    )
    parser.add_argument(
        "--captured-size", type=parse_size, default=parse_size("100MB"),
        help="the recorded pynsq trace (default 100MB: about 180,000 messages, 2-3 minutes to record)",
    )
    parser.add_argument(
        "--long-size", type=parse_size, default=parse_size("2GB"),
        help="the long workload: one connection of this size (default 2GB)",
    )
    parser.add_argument(
        "--watch-size", type=parse_size, default=parse_size("700MB"),
        help="the watch workload: the bench's traffic of this size, in rotation files (default 700MB)",
    )
    parser.add_argument("--watch-files", type=int, default=24, help="rotation files of the watch workload (default 24)")
    parser.add_argument(
        "--watch-rate", type=int, default=150_000,
        help="message events/s at which the watch workload's files appear (default 150000, the target)",
    )
    parser.add_argument(
        "--workloads", default=",".join(WORKLOADS), help=f"which traces to run (default {','.join(WORKLOADS)})"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--scapy-sample", type=int, default=20_000, help="packets scapy parses (default 20000)")
    parser.add_argument("--workdir", default=None, help="where the trace goes (default: a temp dir, deleted)")
    parser.add_argument("--output", default="bench-results/trace.json")
    args = parser.parse_args(argv)
    workloads = [w for w in args.workloads.split(",") if w]
    if not workloads or set(workloads) - set(WORKLOADS):
        parser.error(f"--workloads: a comma-separated subset of {','.join(WORKLOADS)}")

    from spark_analysis.session import archive_path

    archive = archive_path()
    prepare_seconds = None
    if not os.path.isfile(archive):
        print("building the class archive (nsq-trace prepare)", flush=True)
        # its own process: the JVM that records the classes must not be the one the bench times
        _, prepare_seconds = timed(subprocess.run, [sys.executable, "-m", "spark_analysis", "prepare"], check=True)

    workdir = args.workdir or tempfile.mkdtemp(prefix="nsq-trace-bench-")
    os.makedirs(workdir, exist_ok=True)
    result = {
        "class_archive": {
            "path": archive,
            "mb": round(os.path.getsize(archive) / 1e6),
            "prepare_seconds": None if prepare_seconds is None else round(prepare_seconds, 1),
        },
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
    }
    try:
        result["sample"] = _sample_first_result(workdir)
        if "mixed" in workloads:
            result["mixed"] = _in_a_process_of_its_own("mixed", args.size, args, workdir)
            result["mixed"]["target_mb_per_s"] = 100
        if "bench" in workloads:
            result["bench"] = _in_a_process_of_its_own("bench", args.bench_size, args, workdir)
            result["bench"]["target_message_events_per_s"] = 150_000
        if "captured" in workloads:
            result["captured"] = _in_a_process_of_its_own("captured", args.captured_size, args, workdir)
            result["captured"]["target_message_events_per_s"] = 150_000
        if "long" in workloads:
            result["long"] = _in_a_process_of_its_own("long", args.long_size, args, workdir)
            result["long"]["target_peak_mb_all_processes"] = 3000
        if "s3" in workloads:
            from tests.trace.object_store import moto_server

            with moto_server() as store:
                args.s3_endpoint = store.endpoint
                result["s3"] = _in_a_process_of_its_own("s3", args.bench_size, args, workdir)
            result["s3"]["target_message_events_per_s"] = 150_000
        if "watch" in workloads:
            result["watch"] = _run_watch(args, workdir)
            result["watch"]["target_message_events_per_s"] = 150_000
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    with open(args.output, "w") as handle:
        json.dump(result, handle, indent=1)
    print(json.dumps(result, indent=1))
    return 0 if all(result[w]["spark_analysis"]["summary_matches_truth"] for w in workloads) else 1


def _in_a_child(function, *args):
    """``function(*args)`` in a child process: what the generator and the counter allocate (and Python keeps once
    freed: ~400 MB) is not counted in the analysis's memory, as no user's analysis has it."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(function, *args).result()


def _upload(endpoint: str, trace: str, url: str) -> None:
    from tests.trace.object_store import ObjectStore

    ObjectStore(endpoint).upload(trace, url)


def _in_a_process_of_its_own(workload: str, size: int, args, workdir: str) -> dict:
    """Each workload in a fresh interpreter: its JVM starts within the measured time (a process keeps its first
    JVM), and its memory is its own."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_run_workload, workload, size, args, workdir).result()


def _run_workload(workload: str, size: int, args, workdir: str) -> dict:
    """Generate or record, count with the plain-Python baseline, analyse with Spark, parse with dpkt and scapy."""
    from spark_analysis.analysis import run_analysis
    from spark_analysis.judge import progress
    from spark_analysis.read.storage import LOCAL
    from spark_analysis.report.summary import message_events
    from spark_analysis.session import spark_session

    trace = os.path.join(workdir, f"{workload}.pcap")
    if workload == "captured":
        truth, source = _record(trace, size, args.seed)
    else:
        truth, source = _in_a_child(_generate, trace, size, args.seed, "bench" if workload == "s3" else workload)
    size = os.path.getsize(trace)
    inputs, out, storage = [trace], os.path.join(workdir, f"{workload}-out"), LOCAL
    if workload == "s3":
        from tests.trace.object_store import ObjectStore

        store = ObjectStore(args.s3_endpoint)
        print(f"uploading to {store.endpoint}", flush=True)
        inputs, out, storage = ["s3://nsq-bench/captures/bench.pcap"], "s3://nsq-bench/analysis", store.storage
        _in_a_child(_upload, args.s3_endpoint, trace, inputs[0])
    nsqd_port = truth.get("recording", {}).get("nsqd_tcp_port", trace_baseline.NSQD_PORT)
    # The file is in the page cache for both: it has just been written.
    print("baseline: plain-Python counter", flush=True)
    baseline_load = os.getloadavg()[0]
    counts, baseline_seconds = _in_a_child(timed, trace_baseline.count, trace, nsqd_port)
    with PeakMemory(os.getpid()) as memory:
        load_before = os.getloadavg()[0]
        started = time.perf_counter()
        with spark_session(args.master, shuffle_partitions=4, tuned=True) as spark:
            session_seconds = time.perf_counter() - started
            print(f"analysing on {args.master}", flush=True)
            phases: list[tuple[str, float]] = []

            def step(message: str):
                if not message.startswith(progress.LINE_START):
                    phases.append((message, time.perf_counter()))
                print(f"  {message}", flush=True)

            summary, analysis_seconds = timed(
                run_analysis, spark, inputs, out, report=False, step=step, storage=storage
            )
            phases.append(("end", time.perf_counter()))
        load_after = os.getloadavg()[0]
    mismatches = [key for key in TRUTH_KEYS if _comparable(summary[key]) != _comparable(truth[key])]
    end_to_end = session_seconds + analysis_seconds
    totals = summary["totals"]
    events = message_events(totals)
    spark_rate = events / end_to_end
    baseline_rate = counts["message_events"] / baseline_seconds

    print("dpkt: whole file", flush=True)
    dpkt_result, dpkt_seconds = timed(dpkt_pass, trace)
    print(f"scapy: first {args.scapy_sample:,} packets", flush=True)
    scapy_result, scapy_seconds = timed(scapy_pass, trace, args.scapy_sample)
    return {
        "trace": {
            "workload": workload,
            "bytes": size,
            "seed": args.seed,
            "packets": dpkt_result["packets"],
            "deliveries": totals["deliveries"],
            "published": totals["messages_published"],
            "message_events": events,
        },
        **source,
        "spark_analysis": {
            "master": args.master,
            "session_start_seconds": round(session_seconds, 2),
            "analysis_seconds": round(analysis_seconds, 2),
            "end_to_end_seconds": round(end_to_end, 2),
            "mb_per_s": round(size / 1e6 / end_to_end, 1),
            "mb_per_s_excluding_session_start": round(size / 1e6 / analysis_seconds, 1),
            "message_events_per_s": round(spark_rate),
            "phase_seconds": {
                name: round(end - start, 2) for (name, start), (_, end) in zip(phases, phases[1:], strict=False)
            },
            "peak_rss_mb_all_processes": round(memory.peak_bytes / 1e6),
            "peak_anonymous_mb_all_processes": round(memory.peak_anonymous_bytes / 1e6),
            "peak_proportional_mb_all_processes": round(memory.peak_proportional_bytes / 1e6),
            "cpu_seconds_all_processes": round(memory.cpu_seconds, 1),
            "processes_at_peak": memory.peak_processes,
            "load_average_1min_before_after": [round(load_before, 2), round(load_after, 2)],
            "summary_matches_truth": not mismatches,
            "mismatched_sections": mismatches,
        },
        "baseline_counter": {
            "what": "benchmarks/trace_baseline.py: one Python process, reassemble + count per connection, no Spark",
            "seconds": round(baseline_seconds, 2),
            "message_events": counts["message_events"],
            "counts_match_truth": counts["message_events"] == events,
            "message_events_per_s": round(baseline_rate),
            "load_average_1min_before": round(baseline_load, 2),
        },
        "spark_to_baseline_time_ratio": round(end_to_end / baseline_seconds, 2),
        "dpkt_tcp_pass": {
            "seconds": round(dpkt_seconds, 2),
            "mb_per_s": round(size / 1e6 / dpkt_seconds, 1),
            "packets_per_s": round(dpkt_result["packets"] / dpkt_seconds),
        },
        "scapy_tcp_pass": {
            "sampled_packets": scapy_result["packets"],
            "sampled_bytes": scapy_result["sample_file_bytes"],
            "seconds": round(scapy_seconds, 2),
            "mb_per_s_extrapolated": round(scapy_result["sample_file_bytes"] / 1e6 / scapy_seconds, 1),
            "note": "scapy parses a bounded sample (the first packets); MB/s is over that sample",
        },
    }


def _run_watch(args, workdir: str) -> dict:
    """Rotation files of the bench's traffic appear in a directory at ``--watch-rate`` message events/s (each after
    the time its events take at that rate) while ``nsq-trace watch`` (its own process: its memory is measured)
    takes them; its ``latest.json`` is read as each micro-batch publishes."""
    from spark_analysis.report.summary import message_events

    trace = os.path.join(workdir, "watch.pcap")
    truth, source = _generate(trace, args.watch_size, args.seed, "bench")
    events = message_events(truth["totals"])
    staged, captures, out = (os.path.join(workdir, name) for name in ("watch-staged", "watch-captures", "watch-out"))
    for directory in (staged, captures):
        os.makedirs(directory, exist_ok=True)
    files = _rotated(trace, staged, args.watch_files)
    os.remove(trace)
    events_per_byte = events / sum(os.path.getsize(path) for path in files)
    command = [sys.executable, "-m", "spark_analysis", "watch", captures, "--out", out, "--settle-seconds", "0",
               "--trigger-seconds", "1", "--until-idle", "10", "--no-report", "--master", args.master]
    log_path = os.path.join(workdir, "watch.log")
    batches: dict[int, dict] = {}
    with open(log_path, "w") as log:
        watcher = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        load_before = os.getloadavg()[0]
        with PeakMemory(watcher.pid) as memory:
            while not os.path.isdir(os.path.join(out, "watch", "checkpoint", "offsets")) and watcher.poll() is None:
                time.sleep(0.1)  # the query has started: its JVM is up
            print(f"watch: {len(files)} files at {args.watch_rate:,} message events/s", flush=True)
            started = time.monotonic()
            due = started
            arrived = {}
            pending = list(files)
            while watcher.poll() is None:
                now = time.monotonic()
                if pending and now >= due:
                    path = pending.pop(0)
                    os.replace(path, os.path.join(captures, os.path.basename(path)))
                    arrived[os.path.join(captures, os.path.basename(path))] = now - started
                    due += os.path.getsize(os.path.join(captures, os.path.basename(path))) * events_per_byte \
                        / args.watch_rate
                latest = _read_json(os.path.join(out, "latest.json"))
                if latest and latest["batch_id"] not in batches:
                    batches[latest["batch_id"]] = {**latest, "published_at": round(time.monotonic() - started, 2)}
                    print(f"  batch {latest['batch_id']}: {len(latest['new_files'])} file(s) in {latest['seconds']} s",
                          flush=True)
                time.sleep(0.05)
        load_after = os.getloadavg()[0]
    summary = _read_json(os.path.join(out, "summary.json"))
    mismatches = [key for key in TRUTH_KEYS if _comparable(summary[key]) != _comparable(truth[key])]
    ordered = [batches[batch_id] for batch_id in sorted(batches)]
    busy = sum(batch["seconds"] for batch in ordered)
    lags = [batch["published_at"] - max(arrived[path] for path in batch["new_files"]) for batch in ordered]
    previous = 0
    for batch in ordered:
        batch["events"], previous = batch["message_events"] - previous, batch["message_events"]
    return {
        "trace": {"workload": "bench", "bytes": args.watch_size, "files": len(files), "message_events": events,
                  "seed": args.seed},
        **source,
        "watch": {
            "master": args.master,
            "offered_message_events_per_s": args.watch_rate,
            "arrival_seconds": round(max(arrived.values()), 2),
            "last_file_published_after_seconds": round(ordered[-1]["published_at"], 2) if ordered else None,
            "micro_batches": [{"files": len(batch["new_files"]), "message_events": batch["events"],
                               "seconds": batch["seconds"], "decode_seconds": batch["decode_seconds"],
                               "derive_seconds": batch["derive_seconds"]}
                              for batch in ordered],
            "busy_seconds": round(busy, 2),
            "sustained_message_events_per_s": round(events / busy) if busy else None,
            # once warm: the first micro-batch also starts the Python workers and plans the source for the first time
            "steady_message_events_per_s": round(sum(batch["events"] for batch in ordered[1:])
                                                 / sum(batch["seconds"] for batch in ordered[1:]))
            if len(ordered) > 1 else None,
            "lag_seconds_per_batch": [round(lag, 2) for lag in lags],
            # from the first file's arrival to the last one's publication: the offered rate at best
            "message_events_per_s_end_to_end": round(events / ordered[-1]["published_at"]) if ordered else None,
            "cpu_seconds_all_processes": round(memory.cpu_seconds, 1),
            # the rate two cores of its own would give, were the watcher's CPU time all spent in its micro-batches
            "message_events_per_2_cpu_seconds": round(2 * events / memory.cpu_seconds) if memory.cpu_seconds else None,
            "processes_at_peak": memory.peak_processes,
            "lag_seconds_max": round(max(lags), 2) if lags else None,
            "peak_rss_mb_all_processes": round(memory.peak_bytes / 1e6),
            "peak_anonymous_mb_all_processes": round(memory.peak_anonymous_bytes / 1e6),
            "peak_proportional_mb_all_processes": round(memory.peak_proportional_bytes / 1e6),
            "load_average_1min_before_after": [round(load_before, 2), round(load_after, 2)],
            "exit_status": watcher.returncode,
        },
        "spark_analysis": {"summary_matches_truth": not mismatches and watcher.returncode == 0,
                           "mismatched_sections": mismatches},
    }


def _rotated(trace: str, directory: str, files: int) -> list[str]:
    """The pcap cut into ``files`` files of about equal size at record boundaries, in capture order (the
    generator writes in time order), named as ``tcpdump -G`` names them: in the order they were written."""
    size = os.path.getsize(trace)
    paths = []
    with open(trace, "rb") as source:
        header = source.read(PCAP_HEADER)
        byte_order = "<" if header[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
        for number in range(files):
            path = os.path.join(directory, f"nsq-{number:04d}.pcap")
            limit = (size - PCAP_HEADER) * (number + 1) // files
            with open(path, "wb") as target:
                target.write(header)
                while source.tell() - PCAP_HEADER < limit:
                    record = source.read(RECORD_HEADER)
                    if len(record) < RECORD_HEADER:
                        break
                    length = int.from_bytes(record[8:12], "little" if byte_order == "<" else "big")
                    target.write(record + source.read(length))
            paths.append(path)
    return paths


def _read_json(path: str) -> dict | None:
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def _generate(trace: str, size: int, seed: int, workload: str) -> tuple[dict, dict]:
    from spark_analysis.generate import generate

    print(f"generating {size / 1e9:.2f} GB of the {workload} workload (seed {seed}) -> {trace}", flush=True)
    truth, seconds = timed(generate, trace, size, seed=seed, workload=workload)
    size = os.path.getsize(trace)
    print(f"  {size / 1e6:,.0f} MB in {seconds:.1f} s = {size / 1e6 / seconds:.0f} MB/s", flush=True)
    return truth, {"generator": {"seconds": round(seconds, 2), "mb_per_s": round(size / 1e6 / seconds, 1)}}


def _record(trace: str, size: int, seed: int) -> tuple[dict, dict]:
    """The captured workload, recorded in a process of its own: scapy's packets (~20 bytes of memory per byte
    captured) are gone before the analysis' memory is measured. A recording the sniffer could not keep whole is
    refused (exit status 1): one more try."""
    from benchmarks.trace_pynsq_recording import messages_for_size

    messages = messages_for_size(size)
    command = [sys.executable, "-m", "benchmarks.trace_pynsq_recording", "-o", trace, "--messages", str(messages),
               "--seed", str(seed)]
    if subprocess.run(command, cwd=REPO).returncode:
        print("  the recording was refused: once more", flush=True)
        subprocess.run(command, check=True, cwd=REPO)
    with open(os.path.splitext(trace)[0] + ".truth.json") as handle:
        truth = json.load(handle)
    recording = truth["recording"]
    print(f"  {recording['bytes'] / 1e6:,.0f} MB in {recording['seconds']:.1f} s", flush=True)
    return truth, {"recording": {key: recording[key] for key in
                                 ("clients", "broker", "capture", "seconds", "clients_seconds", "messages_per_s")}}


def _sample_first_result(workdir: str) -> dict:
    """The committed 9 MB sample through ``nsq-trace analyze`` in a process of its own, as a user runs it first:
    JVM start, analysis, summary.json and report.html, all in the time."""
    print(f"sample: nsq-trace analyze {SAMPLE.name} in a fresh process", flush=True)
    command = [sys.executable, "-m", "spark_analysis", "analyze", str(SAMPLE), "--out", os.path.join(workdir, "sample")]
    _, seconds = timed(subprocess.run, command, check=True, capture_output=True)
    return {"file": str(SAMPLE.relative_to(REPO)), "bytes": SAMPLE.stat().st_size, "seconds": round(seconds, 2),
            "target_seconds": 15}


def _comparable(section: dict) -> dict:
    """The counts of ``totals`` or ``topics``: consumer names exist only in the truth, ports only in
    the summary."""
    counts = json.loads(json.dumps(section))
    for topic in counts.values():
        for channel in topic.get("channels", {}).values() if isinstance(topic, dict) else ():
            channel.pop("consumer_connections", None)
            channel.pop("consumer_ports", None)
    return counts


if __name__ == "__main__":
    raise SystemExit(main())
