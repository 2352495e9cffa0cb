"""Per-connection TCP reassembly with explicit gaps.

Input: every segment of one flow (both directions, any number of files), as the grouped shuffle
delivers them. Output: ``Connection`` objects, one per SYN epoch of the flow, each holding two
``Stream``s of ordered byte chunks and ``Gap`` records.

Policy (declared, tested):
- A new connection starts at a SYN without ACK whose ISN differs from the current epoch's; a
  retransmitted SYN stays in its epoch. Segments before the first SYN form an epoch of their own
  (the capture started mid-connection).
- Sequence numbers are compared modulo 2^32 relative to ISN+1 (or, without a SYN, to the lowest
  sequence number seen in circular order).
- Segments are laid out by sequence number, earliest capture first among equal starts. Bytes
  already placed are never overwritten: retransmissions and overlaps only contribute bytes past
  the current end (counted as ``retransmitted_bytes``; differing overlap content is counted as
  ``conflicting_bytes``).
- Missing bytes become a ``Gap`` (offset, length); nothing is zero-filled. A FIN whose sequence
  number lies past the end also reveals a trailing gap.
- A chunk's time is the latest capture time of any byte up to its end: the earliest moment a
  receiver could have decoded what it completes.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from spark_analysis.pcapfile import TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN

SEQ_MOD = 1 << 32
SEQ_HALF = 1 << 31


@dataclass
class Gap:
    offset: int
    length: int
    ts_ns: int


@dataclass
class Stream:
    chunks: list[tuple[int, bytes, int]] = field(default_factory=list)  # (offset, data, ts_ns)
    gaps: list[Gap] = field(default_factory=list)
    syn_seen: bool = False
    fin_ts_ns: int | None = None
    retransmitted_bytes: int = 0
    conflicting_bytes: int = 0

    @property
    def length(self) -> int:
        if not self.chunks:
            return self.gaps[-1].offset + self.gaps[-1].length if self.gaps else 0
        offset, data, _ = self.chunks[-1]
        end = offset + len(data)
        return max(end, self.gaps[-1].offset + self.gaps[-1].length) if self.gaps else end

    def pieces(self):
        """Chunks and gaps in stream order: ``(offset, data, ts_ns)`` or a ``Gap``."""
        return heapq.merge(
            self.chunks, self.gaps, key=lambda piece: piece.offset if isinstance(piece, Gap) else piece[0]
        )


@dataclass
class Connection:
    flow: str
    epoch: int
    client: tuple[str, int]
    server: tuple[str, int]
    first_ts_ns: int
    last_ts_ns: int
    packets: int
    c2s: Stream
    s2c: Stream
    rst_seen: bool

    @property
    def conn_id(self) -> str:
        return f"{self.client[0]}:{self.client[1]}>{self.server[0]}:{self.server[1]}#{self.epoch}"


def reassemble(flow: str, segments: list[tuple], server_ports: frozenset[int]) -> list[Connection]:
    """``segments``: (ts_ns, src, dst, sport, dport, seq, flags, payload) of one flow, any order."""
    segments = sorted(segments, key=lambda s: s[0] if s[0] is not None else 0)
    epochs: list[list[tuple]] = []
    client_isn = None
    for segment in segments:
        flags, seq = segment[6], segment[5]
        opens = flags & TCP_SYN and not flags & TCP_ACK
        if opens and seq != client_isn:
            client_isn = seq
            epochs.append([])
        elif not epochs:
            epochs.append([])
        epochs[-1].append(segment)
    return [_connection(flow, number, epoch, server_ports) for number, epoch in enumerate(epochs)]


def _connection(flow, number, segments, server_ports) -> Connection:
    opener = next((s for s in segments if s[6] & TCP_SYN and not s[6] & TCP_ACK), None)
    if opener is not None:
        client, server = (opener[1], opener[3]), (opener[2], opener[4])
    else:
        first = segments[0]
        a, b = (first[1], first[3]), (first[2], first[4])
        # Without a handshake: a known server port decides, else the lower (non-ephemeral) port.
        if b[1] in server_ports or (a[1] not in server_ports and a[1] > b[1]):
            client, server = a, b
        else:
            client, server = b, a
    c2s = [s for s in segments if (s[1], s[3]) == client]
    s2c = [s for s in segments if (s[1], s[3]) == server]
    times = [s[0] for s in segments if s[0] is not None]
    return Connection(
        flow,
        number,
        client,
        server,
        min(times, default=0),
        max(times, default=0),
        len(segments),
        _stream(c2s),
        _stream(s2c),
        any(s[6] & TCP_RST for s in segments),
    )


def _stream(segments) -> Stream:
    stream = Stream()
    syn = next((s for s in segments if s[6] & TCP_SYN), None)
    stream.syn_seen = syn is not None
    data = [s for s in segments if s[7]]
    fins = [s for s in segments if s[6] & TCP_FIN]
    stream.fin_ts_ns = min((s[0] or 0 for s in fins), default=None)
    if syn is not None:
        base = (syn[5] + 1) % SEQ_MOD
    elif data:
        anchor = data[0][5]
        base = min((s[5] - anchor + SEQ_HALF) % SEQ_MOD - SEQ_HALF for s in data) + anchor
    else:
        return stream
    placed = sorted(((_relative(s[5], base), s[0] or 0, s[7]) for s in data), key=lambda p: (p[0], p[1]))
    end = 0
    latest = 0
    for relative, ts_ns, payload in placed:
        if relative < 0:  # bytes before the ISN: a bogus or pre-epoch segment
            stream.retransmitted_bytes += len(payload)
            continue
        stop = relative + len(payload)
        if stop <= end:
            stream.retransmitted_bytes += len(payload)
            stream.conflicting_bytes += _conflicts(stream, relative, payload)
            continue
        latest = max(latest, ts_ns)
        if relative > end:
            stream.gaps.append(Gap(end, relative - end, ts_ns))
            end = relative
        overlap = end - relative
        if overlap:
            stream.retransmitted_bytes += overlap
            stream.conflicting_bytes += _conflicts(stream, relative, payload[:overlap])
        stream.chunks.append((end, payload[overlap:], latest))
        end = stop
    for fin in fins:
        relative = _relative(fin[5], base) + len(fin[7])
        if end < relative < SEQ_HALF:
            stream.gaps.append(Gap(end, relative - end, fin[0] or 0))
            end = relative
    return stream


def _relative(seq: int, base: int) -> int:
    return (seq - base + SEQ_HALF) % SEQ_MOD - SEQ_HALF


def _conflicts(stream: Stream, relative: int, payload: bytes) -> int:
    """Bytes of a retransmission that differ from what was already placed (checked in the last chunks)."""
    stop = relative + len(payload)
    differing = 0
    for offset, data, _ in reversed(stream.chunks):
        if offset + len(data) <= relative:
            break
        low, high = max(offset, relative), min(offset + len(data), stop)
        if low < high and data[low - offset : high - offset] != payload[low - relative : high - relative]:
            placed, arrived = data[low - offset : high - offset], payload[low - relative : high - relative]
            differing += sum(x != y for x, y in zip(placed, arrived, strict=True))
    return differing
