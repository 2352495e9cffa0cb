"""The trace benchmark's floor: a lean single-threaded plain-Python counter, no Spark.

It walks a classic pcap of Ethernet/IPv4 (what the generator writes), reassembles each direction
of each TCP connection by sequence number (in-order segments appended; holes skipped, as a
counter need not report them), and counts the NSQ message events the analysis reports: messages
published (PUB, DPUB, each MPUB's count), deliveries (message frames) and FIN/REQ/TOUCH commands.
A reference for what one Python process can do with the same file, not an analysis: no
decompression, no resync, no pairing of answers.

    python -m benchmarks.trace_baseline trace.pcap
"""

from __future__ import annotations

import mmap
import struct
import sys
import time
from collections import Counter

NSQD_PORT = 4150
_RECORD = struct.Struct("<IIII")
_TCP_PORTS_SEQ = struct.Struct(">HHI")
_U32 = struct.Struct(">I")
_FRAME = struct.Struct(">Ii")
BODY_COMMANDS = (b"PUB", b"MPUB", b"DPUB", b"IDENTIFY", b"AUTH")


def count(path: str, server_port: int = NSQD_PORT) -> Counter:
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        streams = _streams(data)
        counts = Counter()
        for (sport, _dport), segments in streams.items():
            stream = _reassembled(data, segments)
            if sport == server_port:
                _count_frames(stream, counts)
            else:
                _count_commands(stream, counts)
        counts["connections"] = len(streams) // 2
    counts["message_events"] = counts["published"] + counts["deliveries"] + counts["FIN"] + counts["REQ"]
    counts["message_events"] += counts["TOUCH"]
    return counts


def _streams(data) -> dict:
    """(sport, dport) -> [(seq, payload offset, payload length)] for segments with a payload."""
    streams: dict[tuple[int, int], list] = {}
    offset, size = 24, len(data)
    unpack_record, unpack_tcp = _RECORD.unpack_from, _TCP_PORTS_SEQ.unpack_from
    while offset + 16 <= size:
        _, _, included, _ = unpack_record(data, offset)
        frame = offset + 16
        offset = frame + included
        if data[frame + 12 : frame + 14] != b"\x08\x00" or data[frame + 23] != 6:  # Ethernet IPv4, TCP
            continue
        ip_header = (data[frame + 14] & 0x0F) * 4
        tcp = frame + 14 + ip_header
        total = _U32.unpack_from(data, frame + 14)[0] & 0xFFFF  # IPv4 total length
        payload = tcp + (data[tcp + 12] >> 4) * 4
        length = frame + 14 + total - payload
        sport, dport, seq = unpack_tcp(data, tcp)
        if data[tcp + 13] & 0x02:  # SYN: the stream starts at ISN + 1
            streams.setdefault((sport, dport), []).append(((seq + 1) & 0xFFFFFFFF, payload, 0))
        elif length > 0:
            streams.setdefault((sport, dport), []).append((seq, payload, length))
    return streams


def _reassembled(data, segments) -> bytes:
    base = segments[0][0]
    placed = sorted(((seq - base) & 0xFFFFFFFF, start, length) for seq, start, length in segments)
    parts, end = [], 0
    for relative, start, length in placed:
        if relative + length <= end:
            continue
        skip = max(0, end - relative)
        parts.append(data[start + skip : start + length])
        end = relative + length
    return b"".join(parts)


def _count_frames(stream: bytes, counts: Counter):
    position, size, unpack = 0, len(stream), _FRAME.unpack_from
    deliveries = frames = 0
    while position + 8 <= size:
        length, frame_type = unpack(stream, position)
        frames += 1
        deliveries += frame_type == 2
        position += 4 + length
    counts["frames"] += frames
    counts["deliveries"] += deliveries


def _count_commands(stream: bytes, counts: Counter):
    position, size = 4 if stream[:4] == b"  V2" else 0, len(stream)
    find, unpack = stream.find, _U32.unpack_from
    while position < size:
        newline = find(b"\n", position)
        if newline < 0:
            break
        space = find(b" ", position, newline)
        name = stream[position : space if space >= 0 else newline]
        position = newline + 1
        counts[name] += 1
        if name in BODY_COMMANDS:
            body_size = unpack(stream, position)[0]
            if name == b"MPUB":
                counts["published"] += unpack(stream, position + 4)[0]
            elif name != b"IDENTIFY" and name != b"AUTH":
                counts["published"] += 1
            position += 4 + body_size
    for verb in (b"FIN", b"REQ", b"TOUCH"):
        counts[verb.decode()] += counts.pop(verb, 0)


def main(argv=None) -> int:
    paths = (argv if argv is not None else sys.argv[1:]) or []
    if len(paths) != 1:
        print("usage: python -m benchmarks.trace_baseline TRACE.pcap", file=sys.stderr)
        return 2
    started = time.perf_counter()
    counts = count(paths[0])
    seconds = time.perf_counter() - started
    print(
        f"{counts['message_events']:,} message events ({counts['published']:,} published, "
        f"{counts['deliveries']:,} deliveries, {counts['FIN']:,} FIN) in {seconds:.2f} s = "
        f"{counts['message_events'] / seconds:,.0f}/s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
