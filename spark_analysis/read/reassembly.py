"""Per-connection TCP reassembly with explicit gaps, streamed in bounded windows.

Input: the segments of one flow (both directions, any number of files) in capture-time order, as the sorted
shuffle delivers them. Output: ``Connection`` objects, one per SYN epoch of the flow, each handed out once per
window of its streams: ``c2s`` and ``s2c`` then hold that window's ordered byte chunks and ``Gap`` records, and
``complete`` says the connection has ended (its facts are final). With no window size, each connection comes
once, whole.

Policy (declared, tested):
- A new connection starts at a SYN without ACK whose ISN differs from the current epoch's; a
  retransmitted SYN stays in its epoch. Segments before the first SYN form an epoch of their own
  (the capture started mid-connection).
- Sequence numbers are compared modulo 2^32 relative to ISN+1 (or, without a SYN, to the lowest
  sequence number seen, in circular order, before the first window).
- Segments are laid out by sequence number, earliest capture first among equal starts. Bytes
  already placed are never overwritten: retransmissions and overlaps only contribute bytes past
  the current end (counted as ``retransmitted_bytes``; differing overlap content is counted as
  ``conflicting_bytes``, compared with the chunks still held).
- Missing bytes become a ``Gap`` (offset, length); nothing is zero-filled. A FIN whose sequence
  number lies past the end also reveals a trailing gap, and so does the peer's ACK of bytes the capture never
  showed (a sniffer that dropped a stream's tail): the peer had them, so they were sent, at the latest when the ACK
  was captured.
- A chunk's time is the latest capture time of any byte up to its end: the earliest moment a
  receiver could have decoded what it completes.

Windows: once the bytes held of a connection reach the window size, what both directions hold in order is
handed out up to a cut time, so that one window's pieces all precede the next one's in time and the decoder can
carry its state from one to the next as if it had read the connection whole. The cut is the capture time of the
first segment still waiting behind a hole in either direction (the missing bytes were sent before it). A hole
that keeps more than half a window of later bytes waiting is given up as a gap then, not at the connection's
end: the only way a windowed reassembly differs from a whole one, for a retransmission that comes that late.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from spark_analysis.read.pcapfile import TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN

SEQ_MOD = 1 << 32
SEQ_HALF = 1 << 31
_CONFLICT_CHUNKS = 64  # placed chunks kept to compare a retransmission with
_NEVER = 1 << 63


@dataclass
class Gap:
    offset: int
    length: int
    ts_ns: int


@dataclass
class Stream:
    """One direction: the pieces of the current window, what the capture showed of it so far, and what it holds
    for the windows to come."""

    # this window: (offset, data, ts_ns) chunks and Gaps, in stream order
    window_pieces: list[tuple[int, bytes, int] | Gap] = field(default_factory=list)
    syn_seen: bool = False
    fin_ts_ns: int | None = None
    retransmitted_bytes: int = 0
    conflicting_bytes: int = 0
    gap_count: int = 0
    length: int = 0  # the end of what was placed or given up as a gap
    held_bytes: int = 0
    _base: int | None = None
    _unplaced: list[tuple[int, int, int, bytes]] = field(default_factory=list)  # heap: (relative, ts, n, data)
    _unanchored: list[tuple[int, int, bytes]] = field(default_factory=list)  # (seq, ts, data) before a base
    _ready: deque = field(default_factory=deque)  # placed pieces not handed out yet
    _recent: deque = field(default_factory=lambda: deque(maxlen=_CONFLICT_CHUNKS))
    _latest: int = 0
    _arrivals: int = 0
    _fins: list[tuple[int, int, int]] = field(default_factory=list)  # (seq, payload length, ts)
    _acked: tuple[int, int] | None = None  # the highest ACK of this stream's bytes by the peer: (seq, ts)

    @property
    def chunks(self) -> list[tuple[int, bytes, int]]:
        return [piece for piece in self.window_pieces if not isinstance(piece, Gap)]

    @property
    def gaps(self) -> list[Gap]:
        return [piece for piece in self.window_pieces if isinstance(piece, Gap)]

    def add(self, ts_ns: int, seq: int, flags: int, payload: bytes) -> None:
        if flags & TCP_SYN:
            if not self.syn_seen and self._base is None:
                self._base = (seq + 1) % SEQ_MOD
            self.syn_seen = True
        if flags & TCP_FIN:
            self.fin_ts_ns = ts_ns if self.fin_ts_ns is None else min(self.fin_ts_ns, ts_ns)
            self._fins.append((seq, len(payload), ts_ns))
        if not payload:
            return
        self.held_bytes += len(payload)
        if self._base is None:
            self._unanchored.append((seq, ts_ns, payload))
        else:
            self._push(seq, ts_ns, payload)

    def acknowledged(self, ts_ns: int, ack: int) -> None:
        """The peer acknowledged this stream's bytes up to ``ack``."""
        if self._acked is None or (ack - self._acked[0]) % SEQ_MOD < SEQ_HALF:
            self._acked = (ack, ts_ns)

    def _acked_end(self) -> tuple[int, int] | None:
        """The end of the bytes the peer acknowledged, as an offset, and when (a FIN's sequence number is no byte)."""
        if self._acked is None or self._base is None:
            return None
        ack, ts_ns = self._acked
        end = _relative(ack, self._base)
        if any(end == _relative(seq, self._base) + length + 1 for seq, length, _ in self._fins):
            end -= 1
        return (end, ts_ns) if 0 < end < SEQ_HALF else None

    def _push(self, seq: int, ts_ns: int, payload: bytes) -> None:
        self._arrivals += 1
        heapq.heappush(self._unplaced, (_relative(seq, self._base), ts_ns, self._arrivals, payload))

    def _anchor(self) -> None:
        """Without a SYN, the lowest sequence number seen in circular order is offset 0."""
        if self._base is None and self._unanchored:
            anchor = self._unanchored[0][0]
            self._base = min((seq - anchor + SEQ_HALF) % SEQ_MOD - SEQ_HALF for seq, _, _ in self._unanchored) + anchor
        if self._base is not None:
            for seq, ts_ns, payload in self._unanchored:
                self._push(seq, ts_ns, payload)
            self._unanchored = []

    def place(self, give_up_holes: bool) -> None:
        """Lay out what is contiguous; with ``give_up_holes``, every hole before held bytes becomes a gap."""
        self._anchor()
        end = self.length
        while self._unplaced:
            relative, ts_ns, _, payload = self._unplaced[0]
            stop = relative + len(payload)
            if relative > end and not give_up_holes:
                break
            heapq.heappop(self._unplaced)
            if relative < 0:  # bytes before the ISN: a bogus or pre-epoch segment
                self._drop(payload)
                continue
            if stop <= end:
                self._drop(payload)
                self.conflicting_bytes += self._conflicts(relative, payload)
                continue
            self._latest = max(self._latest, ts_ns)
            if relative > end:
                self._ready.append(Gap(end, relative - end, ts_ns))
                self.gap_count += 1
                end = relative
            overlap = end - relative
            if overlap:
                self.retransmitted_bytes += overlap
                self.conflicting_bytes += self._conflicts(relative, payload[:overlap])
            chunk = (end, payload[overlap:], self._latest)
            self._ready.append(chunk)
            self._recent.append(chunk)
            self.held_bytes -= overlap
            end = stop
        self.length = end

    def _drop(self, payload: bytes) -> None:
        self.retransmitted_bytes += len(payload)
        self.held_bytes -= len(payload)

    def give_up_first_hole(self) -> None:
        """The hole before the first held segment becomes a gap (the memory bound of a window)."""
        if self._unplaced:
            relative, ts_ns, _, _ = self._unplaced[0]
            if relative > self.length:
                self._ready.append(Gap(self.length, relative - self.length, ts_ns))
                self.gap_count += 1
                self.length = relative
        self.place(give_up_holes=False)

    def waiting_since(self) -> int:
        """The capture time of the first segment waiting behind a hole (``_NEVER``: none waits)."""
        return min((ts_ns for _, ts_ns, _, _ in self._unplaced), default=_NEVER)

    def hand_out(self, before_ts_ns: int) -> int:
        """This window's pieces: the placed ones captured before ``before_ts_ns``, in stream order. Returns their
        byte count."""
        self.window_pieces = []
        handed = 0
        while self._ready:
            piece = self._ready[0]
            if (piece.ts_ns if isinstance(piece, Gap) else piece[2]) >= before_ts_ns:
                break
            self.window_pieces.append(self._ready.popleft())
            if not isinstance(piece, Gap):
                handed += len(piece[1])
        self.held_bytes -= handed
        return handed

    def finish(self) -> None:
        """The connection ended: every hole becomes a gap, and a FIN past the end reveals a trailing one."""
        self.place(give_up_holes=True)
        if self._base is None:
            return
        for seq, length, ts_ns in self._fins:
            relative = _relative(seq, self._base) + length
            if self.length < relative < SEQ_HALF:
                self._ready.append(Gap(self.length, relative - self.length, ts_ns))
                self.gap_count += 1
                self.length = relative
        acked = self._acked_end()
        if acked is not None and acked[0] > self.length:  # acknowledged, and never captured
            self._ready.append(Gap(self.length, acked[0] - self.length, max(self._latest, acked[1])))
            self.gap_count += 1
            self.length = acked[0]

    def _conflicts(self, relative: int, payload: bytes) -> int:
        """Bytes of a retransmission that differ from what was already placed (checked in the last chunks)."""
        stop = relative + len(payload)
        differing = 0
        for offset, data, _ in reversed(self._recent):
            if offset + len(data) <= relative:
                break
            low, high = max(offset, relative), min(offset + len(data), stop)
            if low < high and data[low - offset : high - offset] != payload[low - relative : high - relative]:
                placed, arrived = data[low - offset : high - offset], payload[low - relative : high - relative]
                differing += sum(x != y for x, y in zip(placed, arrived, strict=True))
        return differing


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
    window: int = 0  # which window of the connection its streams hold now
    complete: bool = False  # the last window: the facts above are final

    @property
    def conn_id(self) -> str:
        return f"{self.client[0]}:{self.client[1]}>{self.server[0]}:{self.server[1]}#{self.epoch}"

    def add(self, segment: tuple) -> None:
        ts_ns, src, _, sport, _, seq, flags, payload, *ack = segment
        self.packets += 1
        if ts_ns is not None:
            self.first_ts_ns = min(self.first_ts_ns, ts_ns)
            self.last_ts_ns = max(self.last_ts_ns, ts_ns)
        self.rst_seen = self.rst_seen or bool(flags & TCP_RST)
        stream, peer = (self.c2s, self.s2c) if (src, sport) == self.client else (self.s2c, self.c2s)
        stream.add(ts_ns or 0, seq, flags, payload)
        if flags & TCP_ACK and ack and ack[0] is not None:
            peer.acknowledged(ts_ns or 0, ack[0])

    def windows(self, window_bytes: int) -> Iterator[Connection]:
        """While the bytes held reach ``window_bytes``: this connection with a window of pieces in its streams."""
        streams = (self.c2s, self.s2c)
        while self.c2s.held_bytes + self.s2c.held_bytes >= window_bytes:
            if not self._hand_out(_NEVER):
                # a window's bytes all wait behind a hole: it is given up as a gap (the memory bound)
                min(streams, key=Stream.waiting_since).give_up_first_hole()
                continue
            yield self
            self.window += 1

    def cut(self, before_ts_ns: int) -> Iterator[Connection]:
        """This connection with a window of what both streams have placed before ``before_ts_ns``, if anything."""
        if self._hand_out(before_ts_ns):
            yield self
            self.window += 1

    def _hand_out(self, before_ts_ns: int) -> bool:
        """Both streams' placed pieces up to the cut time (``before_ts_ns``, or the capture time of the first segment
        waiting behind a hole, the earlier) into their windows. Returns whether there are any."""
        streams = (self.c2s, self.s2c)
        for stream in streams:
            stream.place(give_up_holes=False)
        cut = min(before_ts_ns, *(stream.waiting_since() for stream in streams))
        for stream in streams:
            stream.hand_out(cut)
        return bool(self.c2s.window_pieces or self.s2c.window_pieces)

    def last_window(self) -> Connection:
        for stream in (self.c2s, self.s2c):
            stream.finish()
            stream.hand_out(_NEVER + 1)
        if self.first_ts_ns == _NEVER:  # no segment had a time
            self.first_ts_ns = 0
        self.complete = True
        return self


def reassemble(
    flow: str, segments: Iterable[tuple], server_ports: frozenset[int], window_bytes: int | None = None
) -> Iterator[Connection]:
    """``segments``: (ts_ns, src, dst, sport, dport, seq, flags, payload) of one flow in capture-time order.
    Each connection once per window (``window_bytes``), or once, whole."""
    reassembly = FlowReassembly(flow, server_ports, window_bytes)
    yield from reassembly.feed(segments)
    yield from reassembly.end()


class FlowReassembly:
    """One flow's reassembly fed its segments in parts (``feed``, then ``end``): between two parts it is plain
    data, so that ``nsq-trace watch`` carries it from one capture file to the next (pickled)."""

    def __init__(self, flow: str, server_ports: frozenset[int], window_bytes: int | None = None):
        self.flow, self.server_ports, self.window_bytes = flow, server_ports, window_bytes
        self.conn: Connection | None = None
        self.client_isn = None
        self.epoch = -1

    def feed(self, segments: Iterable[tuple]) -> Iterator[Connection]:
        """The connections' windows these segments (the flow's next ones, in capture-time order) complete."""
        window_bytes = self.window_bytes
        for segment in segments:
            flags, seq = segment[6], segment[5]
            opens = flags & TCP_SYN and not flags & TCP_ACK
            if self.conn is None or (opens and seq != self.client_isn):
                if self.conn is not None:
                    yield self.conn.last_window()
                if opens:
                    self.client_isn = seq
                self.epoch += 1
                self.conn = _connection(self.flow, self.epoch, segment, self.server_ports)
            self.conn.add(segment)
            if window_bytes is not None:
                yield from self.conn.windows(window_bytes)

    def cut(self, before_ts_ns: int) -> Iterator[Connection]:
        """Its connection's window of what was placed before ``before_ts_ns``, if anything (where a capture file
        ends: what is carried to the next is then little)."""
        if self.conn is not None:
            yield from self.conn.cut(before_ts_ns)

    def end(self) -> Iterator[Connection]:
        """The flow has no more segments: its connection's last window."""
        if self.conn is not None:
            yield self.conn.last_window()

    def closed_before(self, ts_ns: int) -> bool:
        """Its connection ended (RST, or a FIN each way) and sent nothing since ``ts_ns``."""
        conn = self.conn
        return conn is not None and conn.last_ts_ns < ts_ns and (
            conn.rst_seen or (conn.c2s.fin_ts_ns is not None and conn.s2c.fin_ts_ns is not None))


def _connection(flow: str, epoch: int, first: tuple, server_ports: frozenset[int]) -> Connection:
    a, b = (first[1], first[3]), (first[2], first[4])
    opens = first[6] & TCP_SYN and not first[6] & TCP_ACK
    # Without a handshake: a known server port decides, else the lower (non-ephemeral) port.
    if opens or b[1] in server_ports or (a[1] not in server_ports and a[1] > b[1]):
        client, server = a, b
    else:
        client, server = b, a
    return Connection(flow, epoch, client, server, _NEVER, 0, 0, Stream(), Stream(), False)


def _relative(seq: int, base: int) -> int:
    return (seq - base + SEQ_HALF) % SEQ_MOD - SEQ_HALF
