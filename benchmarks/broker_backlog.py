"""Backlog memory: is the broker's memory bounded while a backlog piles up on disk?

Publishes 2,000,000 messages of 1 KiB (MPUB, 2 publisher processes of benchmarks/load_python.py) to a topic
with one channel and no consumer, the broker started with default flags (--mem-queue-size=10000, so all
but 10,000 messages go to the disk queue), and records its peak RSS (VmHWM), its RSS sampled every second
against the channel's depth, and the size of its data path. Target (issue): the reference broker stays
under ~300 MB RSS (nsqd v1.3.0: about 60 MB). Writes the `backlog` section of bench-results/broker.json,
one entry per broker, so a small run against one broker keeps the other broker's figures.

    python -m benchmarks.broker_backlog [--messages 2000000] [--brokers reference,nsqd] [--nsqd-bin PATH]
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time

from . import load_python
from .brokers import NSQD, REFERENCE, BrokerProgram, RunningBroker, running
from .phases import PhaseTimeout
from .report import add_nsqd_arguments, machine, now, nsqd_program, table, update_section, version_of

LOAD = load_python.Load(topic="backlog", channel="idle", body_size=1024)
RSS_TARGET_MIB = 300  # the reference broker's bound; nsqd's own figure is measured alongside
SAMPLE_INTERVAL = 1.0  # s


class RssSampler:
    """Samples the broker's RSS and its channel's depth in a background thread: the curve shows whether
    memory grows with the backlog."""

    def __init__(self, broker: RunningBroker):
        self._broker = broker
        self._stop = threading.Event()
        self._began = time.monotonic()
        self.samples: list[dict] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_INTERVAL):
            try:
                depth = self._broker.channel_stats(LOAD.topic, LOAD.channel)["depth"]
                self.samples.append({"seconds": round(time.monotonic() - self._began, 1),
                                     "channel_depth": depth, "rss_mib": self._broker.rss_mib()})
            except (OSError, RuntimeError):
                continue  # a slow /stats under load: skip this sample


def _directory_mib(path: str) -> float:
    total = sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names)
    return round(total / (1 << 20), 1)


def measure(program: BrokerProgram, messages: int, publishers: int, timeout: float) -> dict:
    """One broker, default flags, `messages` x 1 KiB published to a channel nobody consumes."""
    with running(program) as broker:
        broker.create_channel(LOAD.topic, LOAD.channel)
        with RssSampler(broker) as sampler:
            publish = load_python.publish(broker.tcp_address, LOAD, messages, publishers, timeout)
            print(f"  {program.name}: published {publish.messages:,} in {publish.seconds:.1f} s "
                  f"({publish.msgs_per_second:,} msgs/s), waiting for the channel to hold them", flush=True)
            handover_began = time.monotonic()
            backlog = broker.wait_for_handover(LOAD.topic, LOAD.channel, timeout)
            handover_seconds = time.monotonic() - handover_began
        return {
            "measured_at": now(),
            "messages": backlog,
            "body_bytes": LOAD.body_size,
            "flags": "defaults (--mem-queue-size=10000)",
            "publish": publish.as_json(),
            "handover_seconds": round(handover_seconds, 2),
            "channel_depth": broker.channel_stats(LOAD.topic, LOAD.channel)["depth"],
            "peak_rss_mib": broker.peak_rss_mib(),
            "rss_mib_at_end": broker.rss_mib(),
            "data_path_mib": _directory_mib(broker.data_path),
            "rss_samples": sampler.samples,
        }


def run(programs: list[BrokerProgram], messages: int, publishers: int, timeout: float, output: str) -> bool:
    """Measure each broker, print a table, write the `backlog` section; False if a broker failed."""
    print(f"backlog: {messages:,} x {LOAD.body_size} B, one channel, no consumer, default flags", flush=True)
    entries: dict[str, dict] = {}
    for program in programs:
        try:
            entry = measure(program, messages, publishers, timeout)
        except (PhaseTimeout, RuntimeError, OSError) as error:
            print(f"  {program.name}: FAILED: {error}", flush=True)
            entry = {"measured_at": now(), "messages": messages, "error": str(error)}
        entry["version"] = version_of(program)
        if program.name == REFERENCE and "peak_rss_mib" in entry:
            entry["target_peak_rss_mib"] = RSS_TARGET_MIB
            entry["pass"] = entry["peak_rss_mib"] <= RSS_TARGET_MIB
        entries[program.name] = entry
    path = update_section(output, "backlog", {"machine": machine(), **entries}, merge=True)
    print(_summary(entries))
    print(f"written to {path} (section 'backlog')")
    return all("error" not in entry for entry in entries.values())


def _summary(entries: dict[str, dict]) -> str:
    rows = []
    for name, entry in entries.items():
        if "error" in entry:
            rows.append([name, f"{entry['messages']:,}", "error", "", "", "", ""])
            continue
        verdict = ("PASS" if entry["pass"] else "FAIL") if "pass" in entry else "-"
        target = f"<= {entry['target_peak_rss_mib']}" if "target_peak_rss_mib" in entry else "-"
        rows.append([name, f"{entry['messages']:,}", f"{entry['publish']['msgs_per_second']:,}",
                     f"{entry['peak_rss_mib']:,}", f"{entry['data_path_mib']:,}", target, verdict])
    header = ["broker", "backlog msgs", "publish msgs/s", "peak RSS MiB", "on disk MiB", "target MiB", "verdict"]
    return table(rows, header)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2_000_000, help="backlog size (default 2M)")
    parser.add_argument("--brokers", default=f"{REFERENCE},{NSQD}",
                        help="which brokers to measure (nsqd only with --nsqd-bin)")
    parser.add_argument("--publishers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900, help="seconds for the publish, and for the handover")
    add_nsqd_arguments(parser)
    args = parser.parse_args(argv)
    programs = selected_programs(args.brokers.split(","), nsqd_program(args.nsqd_bin))
    if not run(programs, args.messages, args.publishers, args.timeout, args.output):
        sys.exit(1)


def selected_programs(names: list[str], nsqd: BrokerProgram | None) -> list[BrokerProgram]:
    programs = []
    if REFERENCE in names:
        programs.append(BrokerProgram.reference())
    if NSQD in names and nsqd is not None:
        programs.append(nsqd)
    elif NSQD in names:
        print("  nsqd: not built (give --nsqd-bin or NSQD_BIN)", flush=True)
    return programs


if __name__ == "__main__":
    main()
