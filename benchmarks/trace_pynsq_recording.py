"""The trace benchmark's real input: pynsq, the official Python client, through the reference broker, captured with
``nsq-trace capture``'s scapy path (spark_analysis/capture.py) and written with its truth in the generator's terms
(``totals`` and ``topics``, as in spark_analysis/generate/truth.py).

The clients are benchmarks/pynsq_bench.py, nsq's bench_writer and bench_reader as a user writes them with pynsq: two
Writers MPUB batches of 200 distinct 100-300 B bodies, one Reader with max_in_flight 2500 FINs every message. The
truth is what they observed (the OK of each MPUB; each message frame's ID and attempts; each FIN; error frames,
heartbeats, connections), checked against the broker's /stats before anything is written, and the capture is
checked for losses: a sniffer that fell behind would make the analysis look wrong through no fault of its own.

    python -m benchmarks.trace_pynsq_recording -o real.pcap --size 100MB      # + real.truth.json
    python -m benchmarks.trace_pynsq_recording -o real.pcap --messages 20000

Without tcpdump the sniffer reads packets in Python (nsq-trace capture): the clients are paced to what it keeps up
with on a shared core (each message costs its FIN's packet and an ACK). Needs
root (a raw socket on loopback) and pynsq 0.9.1 on tornado 6.0 (tox's bench-trace and trace envs).
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from benchmarks import pynsq_bench

CLIENTS = Path(pynsq_bench.__file__)
# Capture bytes per message, measured (17.0 MB for 30,000 messages; pcap records with their headers, each FIN's
# packet and the ACKs included): turns --size into a message count.
BYTES_PER_MESSAGE = 567
SLOWEST_RATE = 400  # messages/s: the default time limit assumes no fewer
SETUP_SECONDS = 30  # connections, the last /stats polls: the default time limit's fixed part

DEFINITIONS = {
    "note": "what the pynsq clients observed, checked against nsqd's /stats; the capture is checked to be whole",
    "published.MPUB": "messages of MPUBs answered OK; MPUB_commands counts those commands",
    "deliveries": "message frames the Reader received (deliveries_by_attempts: by their attempts field)",
    "unique_messages_delivered / unique_messages_finished": "distinct IDs delivered / FINed (the Reader FINs each)",
    "fin": "FINs sent (no E_FIN_FAILED came back, or e_fin_failed counts it)",
    "timeouts_redelivered": "deliveries of an ID the Reader had had before: it FINs every message, so only a "
    "msg_timeout expiry delivers one again",
    "heartbeats": "_heartbeat_ frames a client received; pynsq answers each with NOP",
    "tcp_connections_nsqd_tcp_port": "connections the clients opened (each reached IDENTIFY's answer; none closed "
    "before the end)",
}


class RecordingError(RuntimeError):
    """The recording cannot serve as a benchmark input: what failed and the figures that show it."""


def messages_for_size(size: int) -> int:
    """Messages for a capture of about ``size`` bytes, in whole batches."""
    return max(1, round(size / BYTES_PER_MESSAGE / pynsq_bench.BATCH)) * pynsq_bench.BATCH


def record(output: str | os.PathLike, messages: int, seed: int = 7, timeout: float | None = None,
           progress: bool = True) -> dict:
    """Record ``messages`` (a multiple of 200) into ``output``, write ``<stem>.truth.json`` and return the truth;
    RecordingError if the clients failed, the broker counted otherwise or the capture is not whole. ``timeout``
    bounds the clients (default: by the message count, at a pessimistic rate)."""
    from reference_broker.launcher import running_broker
    from spark_analysis.capture import capture

    output = Path(output)
    timeout = timeout or SETUP_SECONDS + messages / SLOWEST_RATE
    with running_broker() as broker, tempfile.TemporaryDirectory(prefix="pynsq-recording-") as scratch:
        observed_path = Path(scratch) / "observed.json"
        command = [sys.executable, str(CLIENTS), "--tcp-port", str(broker.tcp_port), "--http-port",
                   str(broker.http_port), "--messages", str(messages), "--seed", str(seed), "--timeout", str(timeout),
                   "--observed", str(observed_path)] + ([] if progress else ["--quiet"])
        started = time.monotonic()
        status = capture([broker.tcp_port], str(output), command)
        seconds = time.monotonic() - started
        if status:
            raise RecordingError(f"the pynsq clients failed (exit status {status}); broker log:\n"
                                 + "".join(broker.log[-20:]))
        observed = json.loads(observed_path.read_text())
    disagreements = _against_stats(observed)
    if disagreements:
        raise RecordingError(f"the clients and the broker's /stats disagree: {disagreements}")
    losses = capture_losses(str(output))
    if losses:
        raise RecordingError(f"the capture is not whole: {losses}")
    document = truth(observed, output, broker.tcp_port, seconds)
    output.with_suffix(".truth.json").write_text(json.dumps(document, indent=1) + "\n")
    return document


def truth(observed: dict, output: Path, tcp_port: int, seconds: float) -> dict:
    """The truth file in the generator's shape, from the clients' observations."""
    reader, writers = observed["reader"], observed["writers"]
    clients = [reader, *writers]
    errors = Counter()
    for client in clients:
        errors.update(client["errors"])
    fin_failed = reader["errors"].get("E_FIN_FAILED", 0)
    channel = {
        "deliveries": reader["deliveries"],
        "deliveries_by_attempts": reader["deliveries_by_attempts"],
        "unique_messages_delivered": reader["unique_delivered"],
        "unique_messages_finished": reader["unique_delivered"],
        "fin": reader["fin"] - fin_failed,
        "req": reader["req"],
        "req_delay0": reader["req"],
        "req_delayed": 0,
        "touch": 0,
        "timeouts_redelivered": reader["redelivered"],
        "noack_deliberate": reader["redelivered"],
        "abandoned_by_disconnect": 0,
        "e_fin_failed": fin_failed,
        "e_fin_failed_deliberate_unknown_id": 0,
        "e_fin_failed_unexpected": fin_failed,
        "tcp_connections": reader["connections"],
        "consumer_connections": [f"pynsq-reader-{n}" for n in range(reader["connections"])],
        "heartbeats": reader["heartbeats"],
        "nops": reader["heartbeats"],
    }
    mpub = sum(w["published"] for w in writers)
    commands = sum(w["mpub_commands"] for w in writers)
    published = {"PUB": 0, "MPUB": mpub, "MPUB_commands": commands, "DPUB": 0, "total": mpub,
                 "publish_commands": commands}
    totals = {
        "messages_published": mpub,
        "deliveries": channel["deliveries"],
        "fin": channel["fin"],
        "req": channel["req"],
        "touch": 0,
        "timeouts_redelivered": channel["timeouts_redelivered"],
        "e_fin_failed": fin_failed,
        "other_error_frames": sum(n for code, n in errors.items() if code != "E_FIN_FAILED"),
        "heartbeats_all_connections": sum(c["heartbeats"] for c in clients),
        "tcp_connections_nsqd_tcp_port": sum(c["connections"] for c in clients),
    }
    size = output.stat().st_size
    return {
        "file": output.name,
        "definitions": DEFINITIONS,
        "totals": totals,
        "topics": {observed["topic"]: {"published": published, "channels": {observed["channel"]: channel}}},
        "recording": {
            "clients": "benchmarks/pynsq_bench.py: "
            f"{len(writers)} Writers (MPUB batches of {pynsq_bench.BATCH}), a Reader (max_in_flight "
            f"{pynsq_bench.MAX_IN_FLIGHT}), {observed['client']}",
            "broker": "the reference broker (python -m reference_broker) on 127.0.0.1",
            "capture": "nsq-trace capture's scapy path (spark_analysis/capture.py)",
            "nsqd_tcp_port": tcp_port,
            "bytes": size,
            "seconds": round(seconds, 2),
            "clients_seconds": observed["seconds"],
            "messages_per_s": round(mpub / observed["seconds"]),
            "seed": observed["seed"],
            "broker_stats": observed["broker_stats"],
        },
    }


def _against_stats(observed: dict) -> list[str]:
    """Where what the clients saw and what nsqd's /stats counted differ."""
    stats, reader, writers = observed["broker_stats"], observed["reader"], observed["writers"]
    channel = stats["channel"] or {}
    consumers = channel.get("clients") or []
    pub_counts = [entry["count"] for producer in stats["producers"] for entry in producer.get("pub_counts", [])]
    pairs = {
        "published (topic message_count)": (sum(w["published"] for w in writers), stats["topic"]["message_count"]),
        "published (producers' pub_counts)": (sum(w["published"] for w in writers), sum(pub_counts)),
        "producer connections": (sum(w["connections"] for w in writers), len(stats["producers"])),
        "consumer connections": (reader["connections"], len(consumers)),
        "deliveries (client message_count)": (reader["deliveries"], sum(c["message_count"] for c in consumers)),
        "fin (client finish_count)": (reader["fin"], sum(c["finish_count"] for c in consumers)),
        "req (channel requeue_count)": (reader["req"], channel.get("requeue_count")),
        "redelivered (channel timeout_count)": (reader["redelivered"], channel.get("timeout_count")),
    }
    return [f"{name}: clients {mine}, /stats {theirs}" for name, (mine, theirs) in pairs.items() if mine != theirs]


def capture_losses(path: str) -> dict:
    """What the capture misses: frames cut short (a sniffer that reads at most 65,535 bytes of one, loopback's reach
    65,549, may write the cut length as the original one: only the IP header tells) and, per direction of each
    connection, the bytes its sequence numbers skip (packets the sniffer had no room for). Empty for a whole
    capture. Classic pcap of Ethernet/IPv4, what nsq-trace capture writes on loopback."""
    from benchmarks.trace_baseline import _RECORD, _streams

    ethernet, ip_length = 14, struct.Struct(">H")
    with open(path, "rb") as handle:
        data = handle.read()
    losses: dict = {}
    offset = 24
    while offset + _RECORD.size <= len(data):
        _, _, included, original = _RECORD.unpack_from(data, offset)
        frame = offset + _RECORD.size
        if included < original or ethernet + ip_length.unpack_from(data, frame + ethernet + 2)[0] > included:
            losses["frames_cut_short"] = losses.get("frames_cut_short", 0) + 1
        offset = frame + included
    if losses:  # the streams' lengths come from the IP headers: a cut frame would misplace the rest
        return losses
    for (sport, dport), segments in _streams(data).items():
        base = segments[0][0]
        end = missing = 0
        for relative, length in sorted(((seq - base) & 0xFFFFFFFF, length) for seq, _, length in segments):
            missing += max(0, relative - end)
            end = max(end, relative + length)
        if missing:
            losses.setdefault("bytes_skipped", {})[f"{sport}->{dport}"] = missing
    return losses


def main(argv=None) -> int:
    from spark_analysis.cli import parse_size

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", required=True, help="the pcap; the truth goes to <stem>.truth.json")
    amount = parser.add_mutually_exclusive_group()
    amount.add_argument("--messages", type=int, help=f"messages to publish (a multiple of {pynsq_bench.BATCH})")
    amount.add_argument("--size", type=parse_size, default=parse_size("100MB"),
                        help="about this much capture instead (default 100MB)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--timeout", type=float, default=None, help="seconds the clients may take")
    args = parser.parse_args(argv)
    messages = args.messages or messages_for_size(args.size)
    if messages <= 0 or messages % pynsq_bench.BATCH:
        parser.error(f"--messages: a positive multiple of {pynsq_bench.BATCH}")
    print(f"recording {messages:,} messages through the reference broker with pynsq -> {args.output}", flush=True)
    try:
        document = record(args.output, messages, seed=args.seed, timeout=args.timeout)
    except RecordingError as exc:
        print(f"recording failed: {exc}", file=sys.stderr)
        return 1
    recording = document["recording"]
    print(f"wrote {args.output} ({recording['bytes'] / 1e6:,.1f} MB in {recording['seconds']:.1f} s, "
          f"{recording['messages_per_s']:,} messages/s) and {Path(args.output).with_suffix('.truth.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
