"""pcap / pcapng record walking into Arrow batches of TCP segments.

Generic: nothing here knows NSQ. A file (or a byte range of it) becomes rows of ``PACKET_SCHEMA``:
one row per TCP segment, or one *error row* (``error`` set, a stable name such as
``pcap_truncated_record``) for input that cannot be walked. Corrupt input is counted, never raised.

Formats: pcap (micro- and nanosecond magic, both byte orders), pcapng (SHB/IDB/EPB/SPB/OPB, per
interface link type and ``if_tsresol``). Link types: Ethernet (with VLAN tags), Linux cooked
SLL/SLL2, BSD null/loop, raw IP. Network: IPv4, IPv6 with extension headers. IP fragments are
skipped as a named error (``ip_fragment``): NSQ traffic over TCP is never fragmented in practice.

Byte ranges: a reader for ``[start, end)`` of a local file walks record headers from the file start (cheap: one
small unpack per record, no payload reads) and emits the records that *begin* inside its range, so
adjacent ranges never lose or repeat a record. On object storage (``read/storage.py``) that walk would read the whole
file before the range: there a reader reads its range and one record's worth beyond (ranged reads), and finds the
first record boundary at or after ``start`` from the bytes themselves (``pcap_resync``: a chain of plausible
record headers). The reader of the range before knows the true boundary (its walk reaches it) and checks the
guess against it: a wrong one is the error row ``split_resync_mismatch``, never a silent loss. A pcapng file on
object storage is one range (its interface blocks come first and a range needs them).
"""

from __future__ import annotations

import array
import itertools
import mmap
import os
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from spark_analysis.read.storage import LOCAL, Storage, is_local, local_path

PACKET_SCHEMA = pa.schema(
    [
        ("file", pa.string()),
        ("offset", pa.int64()),  # byte offset of the record in its file
        ("ts_ns", pa.int64()),  # capture time, nanoseconds since the epoch
        ("flow", pa.string()),  # canonical "lowIP port|highIP port" of both directions
        ("src", pa.string()),
        ("dst", pa.string()),
        ("sport", pa.int32()),
        ("dport", pa.int32()),
        ("seq", pa.int64()),
        ("ack", pa.int64()),
        ("flags", pa.int32()),
        ("payload", pa.binary()),  # null when read with payload="reference"
        ("payload_offset", pa.int64()),  # where the payload lies in the file
        ("payload_length", pa.int32()),
        ("error", pa.string()),  # null for a segment; a stable error name otherwise
        ("detail", pa.string()),
    ]
)
PACKET_DDL = (
    "file STRING, offset BIGINT, ts_ns BIGINT, flow STRING, src STRING, dst STRING, sport INT, "
    "dport INT, seq BIGINT, ack BIGINT, flags INT, payload BINARY, payload_offset BIGINT, "
    "payload_length INT, "
    "error STRING, detail STRING"
)

TCP_FIN, TCP_SYN, TCP_RST, TCP_PSH, TCP_ACK = 0x01, 0x02, 0x04, 0x08, 0x10

PCAP_MAGICS = {  # magic as read little-endian -> (byte order, nanosecond timestamps)
    0xA1B2C3D4: ("<", False),
    0xA1B23C4D: ("<", True),
    0xD4C3B2A1: (">", False),
    0x4D3CB2A1: (">", True),
}
PCAPNG_SHB = 0x0A0D0D0A
_FORGET_EVERY = 16 << 20  # bytes walked between two releases of the pages behind
PCAPNG_BYTE_ORDER_MAGIC = 0x1A2B3C4D

LINKTYPE_NULL, LINKTYPE_ETHERNET, LINKTYPE_RAW, LINKTYPE_LOOP = 0, 1, 101, 108
LINKTYPE_SLL, LINKTYPE_SLL2, LINKTYPE_IPV4, LINKTYPE_IPV6 = 113, 276, 228, 229
_RAW_LINKTYPES = {LINKTYPE_RAW, 12, 14, LINKTYPE_IPV4, LINKTYPE_IPV6}

ETHERTYPE_IPV4, ETHERTYPE_IPV6 = 0x0800, 0x86DD
_VLAN_ETHERTYPES = {0x8100, 0x88A8, 0x9100}
_NULL_FAMILIES_IPV6 = {24, 28, 30}
_IPV6_SKIPPABLE = {0, 43, 60}  # hop-by-hop, routing, destination options
IPPROTO_TCP = 6

# A record longer than this cannot be a packet (largest snaplen in use is 262144); guards the walk.
MAX_RECORD = 1 << 20
BATCH_BYTES = 8 << 20
RESYNC_CHAIN = 8  # consecutive plausible record headers that mark a record boundary found mid-file
RESYNC_BYTES = 2 << 20  # read after a range's start to find its first record
RESYNC_SECONDS = 366 * 86400  # a record's time lies within this of the file's first record


@dataclass(frozen=True)
class ByteRange:
    """Records starting in ``[start, end)`` of ``path``."""

    path: str
    start: int
    end: int


def split_file(path: str, split_bytes: int, storage: Storage = LOCAL) -> list[ByteRange]:
    size = storage.size(path)
    if not is_local(path) and size > split_bytes > 0:
        with storage.open_input(path) as remote:
            if remote.read_at(min(size, 4), 0) == struct.pack("<I", PCAPNG_SHB):
                split_bytes = 0
    if split_bytes <= 0 or size <= split_bytes:
        return [ByteRange(path, 0, max(size, 1))]
    return [ByteRange(path, start, min(start + split_bytes, size)) for start in range(0, size, split_bytes)]


class _Batcher:
    """Column lists that become a RecordBatch every ~BATCH_BYTES of payload."""

    def __init__(self, path: str, copy_payload: bool):
        self.path = path
        self.copy_payload = copy_payload
        self.frame_start = 0  # file offset of the frame being parsed
        self.walked_to = None  # the first record boundary at or after the range's end, once a pcap walk reached it
        self._endpoints: dict[tuple, tuple[str, str, str]] = {}  # per-packet address formatting is costly
        self._reset()

    def _reset(self):
        self.columns = {name: [] for name in PACKET_SCHEMA.names}
        self.payload_bytes = 0

    def segment(self, offset, ts_ns, addresses, sport, dport, seq, ack, flags, frame, start, end):
        c = self.columns
        endpoints = self._endpoints.get((addresses, sport, dport))
        if endpoints is None:
            endpoints = self._endpoints[(addresses, sport, dport)] = _endpoints(addresses, sport, dport)
        src, dst, flow = endpoints
        c["file"].append(self.path)
        c["offset"].append(offset)
        c["ts_ns"].append(ts_ns)
        c["flow"].append(flow)
        c["src"].append(src)
        c["dst"].append(dst)
        c["sport"].append(sport)
        c["dport"].append(dport)
        c["seq"].append(seq)
        c["ack"].append(ack)
        c["flags"].append(flags)
        c["payload"].append(bytes(frame[start:end]) if self.copy_payload else None)
        c["payload_offset"].append(self.frame_start + start)
        c["payload_length"].append(end - start)
        c["error"].append(None)
        c["detail"].append(None)
        self.payload_bytes += end - start

    def error(self, offset, ts_ns, name, detail):
        c = self.columns
        for column in PACKET_SCHEMA.names:
            c[column].append(None)
        c["file"][-1] = self.path
        c["offset"][-1] = offset
        c["ts_ns"][-1] = ts_ns
        c["error"][-1] = name
        c["detail"][-1] = detail

    def full(self) -> bool:
        return (self.copy_payload and self.payload_bytes >= BATCH_BYTES) or len(self.columns["file"]) >= 65536

    def flush(self) -> pa.RecordBatch | None:
        if not self.columns["file"]:
            return None
        arrays = [
            _payload_array(self.columns[f.name]) if f.name == "payload" else pa.array(self.columns[f.name], type=f.type)
            for f in PACKET_SCHEMA
        ]
        self._reset()
        return pa.RecordBatch.from_arrays(arrays, schema=PACKET_SCHEMA)


def _payload_array(payloads: list) -> pa.Array:
    """One join and an offsets array: several times faster than pa.array() over many large bytes."""
    validity = None
    if None in payloads:
        validity = pa.array([p is not None for p in payloads]).buffers()[1]
        payloads = [p or b"" for p in payloads]
    offsets = array.array("i", itertools.accumulate(map(len, payloads), initial=0))
    return pa.Array.from_buffers(
        pa.binary(), len(payloads), [validity, pa.py_buffer(offsets), pa.py_buffer(b"".join(payloads))]
    )


def read_payloads(paths: list[str], offsets: list[int], lengths: list[int]) -> list[bytes]:
    """The payload bytes of segments read with ``copy_payload=False``. Read, not mapped: a mapping would make the
    capture's pages the decoding process's resident memory while it lasts."""
    descriptors = {}
    try:
        for path in set(paths):
            descriptors[path] = os.open(path, os.O_RDONLY)
        segments = zip(paths, offsets, lengths, strict=True)
        return [os.pread(descriptors[path], length, offset) for path, offset, length in segments]
    finally:
        for descriptor in descriptors.values():
            os.close(descriptor)


def _endpoints(addresses: bytes, sport: int, dport: int) -> tuple[str, str, str]:
    """Printable source and destination, and the flow key shared by both directions."""
    family = socket.AF_INET if len(addresses) == 8 else socket.AF_INET6
    half = len(addresses) // 2
    src, dst = socket.inet_ntop(family, addresses[:half]), socket.inet_ntop(family, addresses[half:])
    low, high = sorted(((src, sport), (dst, dport)))
    return src, dst, f"{low[0]} {low[1]}|{high[0]} {high[1]}"


def read_range(byte_range: ByteRange, copy_payload: bool = True, storage: Storage = LOCAL) -> Iterator[pa.RecordBatch]:
    """Yield Arrow batches of the TCP segments (and error rows) of one byte range.

    ``copy_payload=False`` leaves ``payload`` null: a consumer on the same file system reads the
    bytes at ``payload_offset`` itself (``read_payloads``), so they never travel through a shuffle."""
    batcher = _Batcher(byte_range.path, copy_payload)
    if not is_local(byte_range.path):
        yield from _read_remote_range(byte_range, batcher, storage)
        return
    try:
        with open(local_path(byte_range.path), "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size == 0:
                if byte_range.start == 0:
                    batcher.error(0, None, "capture_empty", "file has no bytes")
                yield from _flushed(batcher)
                return
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                yield from _walk(data, byte_range, batcher)
    except OSError as exc:
        if byte_range.start == 0:
            batcher.error(0, None, "capture_unreadable", str(exc))
    yield from _flushed(batcher)


def _read_remote_range(byte_range: ByteRange, batcher: _Batcher, storage: Storage) -> Iterator[pa.RecordBatch]:
    """A range of a file on object storage: the file's header, and from the range's first record to one record past
    its end, read into an anonymous mapping at their offsets (the pages between are never touched: no memory)."""
    try:
        with storage.open_input(byte_range.path) as remote:
            size = remote.size()
            if size == 0:
                if byte_range.start == 0:
                    batcher.error(0, None, "capture_empty", "file has no bytes")
                yield from _flushed(batcher)
                return
            head = remote.read_at(min(size, 40), 0)
            pcapng = head[:4] == struct.pack("<I", PCAPNG_SHB)
            begin = 0 if byte_range.start == 0 or pcapng else pcap_resync(remote, byte_range.start, size, head)
            stop = size if pcapng else min(size, byte_range.end + 16 + MAX_RECORD)
            with mmap.mmap(-1, stop) as data:
                data[: len(head)] = head
                if begin < stop:
                    remote.seek(begin)
                    with memoryview(data) as whole, whole[begin:stop] as window:
                        remote.readinto(window)  # straight into place: no second copy of the range
                yield from _walk(data, byte_range, batcher, max(begin, 24))
            boundary = batcher.walked_to
            if boundary is not None and boundary < size:
                guessed = pcap_resync(remote, byte_range.end, size, head)
                if guessed != boundary:
                    batcher.error(boundary, None, "split_resync_mismatch",
                                  f"the next range starts at {guessed}, the record boundary is at {boundary}")
    except OSError as exc:
        if byte_range.start == 0:
            batcher.error(0, None, "capture_unreadable", str(exc))
    yield from _flushed(batcher)


def pcap_resync(remote, start: int, size: int, head: bytes) -> int:
    """The first pcap record boundary at or after ``start``, from the bytes there alone: the first offset where
    ``RESYNC_CHAIN`` consecutive plausible record headers begin (or that many run to the file's end). ``head``: the
    file's first 40 bytes (its header and first record's). Not a pcap: the file's end (nothing to read)."""
    if len(head) < 24 or struct.unpack_from("<I", head)[0] not in PCAP_MAGICS:
        return size
    if start <= 24:
        return 24
    order, nano = PCAP_MAGICS[struct.unpack_from("<I", head)[0]]
    header = struct.Struct(order + "IIII")
    snaplen = struct.unpack_from(order + "I", head, 16)[0] or MAX_RECORD
    first_seconds = header.unpack_from(head, 24)[0] if len(head) >= 40 else None
    fraction_limit = 1_000_000_000 if nano else 1_000_000
    window = remote.read_at(min(size, start + RESYNC_BYTES) - start, start)

    def plausible(position: int) -> bool:
        for _ in range(RESYNC_CHAIN):
            if start + position == size:
                return True
            if position + 16 > len(window):
                return True  # as far as was read, every header fits
            seconds, fraction, included, original = header.unpack_from(window, position)
            if (fraction >= fraction_limit or included > min(snaplen, MAX_RECORD) or included > original
                    or original > MAX_RECORD or start + position + 16 + included > size
                    or (first_seconds is not None and abs(seconds - first_seconds) > RESYNC_SECONDS)):
                return False
            position += 16 + included
        return True

    return next((start + candidate for candidate in range(min(len(window), 16 + MAX_RECORD))
                 if plausible(candidate)), size)


def _flushed(batcher: _Batcher) -> Iterator[pa.RecordBatch]:
    batch = batcher.flush()
    if batch is not None:
        yield batch


def _walk(data, byte_range: ByteRange, batcher: _Batcher, first: int = 24) -> Iterator[pa.RecordBatch]:
    """``first``: where a pcap's records begin to be walked (after its header, or a range's resynchronised start)."""
    if len(data) < 4:
        if byte_range.start == 0:
            batcher.error(0, None, "capture_truncated_header", f"{len(data)} bytes")
        return
    (magic,) = struct.unpack_from("<I", data, 0)
    if magic in PCAP_MAGICS:
        records = _pcap_records(data, byte_range, batcher, *PCAP_MAGICS[magic], first)
    elif magic == PCAPNG_SHB:
        records = _pcapng_records(data, byte_range, batcher)
    else:
        if byte_range.start == 0:
            batcher.error(0, None, "capture_bad_magic", f"0x{magic:08x} is neither pcap nor pcapng")
        return
    frame = None
    for offset, ts_ns, linktype, batcher.frame_start, frame in records:
        _packet(batcher, offset, ts_ns, linktype, frame)
        if batcher.full():
            yield batcher.flush()
    del frame  # the last slice of the mmap must go before the mmap can close


def _pcap_records(data, byte_range, batcher, order, nano, first):
    if len(data) < 24:
        if byte_range.start == 0:
            batcher.error(0, None, "capture_truncated_header", f"pcap header needs 24 bytes, file has {len(data)}")
        return
    linktype = struct.unpack_from(order + "I", data, 20)[0] & 0x0FFFFFFF
    header = struct.Struct(order + "IIII")
    scale = 1 if nano else 1000
    offset, size = first, len(data)
    view = memoryview(data)  # frames are sliced without copying; only payloads are copied, once
    forgotten = offset - offset % mmap.PAGESIZE
    while offset < byte_range.end:
        forgotten = _forget_behind(data, offset, forgotten)
        if offset + 16 > size:
            if offset < size and offset >= byte_range.start:
                batcher.error(offset, None, "pcap_truncated_record", f"{size - offset} bytes left for a 16-byte header")
            return
        seconds, fraction, included, original = header.unpack_from(data, offset)
        if included > MAX_RECORD:
            if offset >= byte_range.start:
                batcher.error(offset, None, "pcap_corrupt_record", f"record length {included}")
            return
        if offset >= byte_range.start:
            ts_ns = seconds * 1_000_000_000 + fraction * scale
            if offset + 16 + included > size:
                batcher.error(
                    offset,
                    ts_ns,
                    "pcap_truncated_record",
                    f"record needs {included} bytes, {size - offset - 16} left",
                )
                return
            yield offset, ts_ns, linktype, offset + 16, view[offset + 16 : offset + 16 + included]
        offset += 16 + included
    batcher.walked_to = offset


def _pcapng_records(data, byte_range, batcher):
    size = len(data)
    offset = 0
    order = "<"
    interfaces: list[tuple[int, int]] = []  # (linktype, ticks per second) per interface id
    view = memoryview(data)
    forgotten = 0
    while offset < byte_range.end:
        forgotten = _forget_behind(data, offset, forgotten)
        if offset + 12 > size:
            if offset < size and offset >= byte_range.start:
                batcher.error(offset, None, "pcapng_truncated_block", f"{size - offset} bytes left")
            return
        (block_type,) = struct.unpack_from(order + "I", data, offset)
        if block_type == PCAPNG_SHB:
            (bom,) = struct.unpack_from("<I", data, offset + 8)
            order = "<" if bom == PCAPNG_BYTE_ORDER_MAGIC else ">"
            interfaces = []
        (length,) = struct.unpack_from(order + "I", data, offset + 4)
        if length < 12 or length % 4 or length > MAX_RECORD + 64 or offset + length > size:
            if offset >= byte_range.start:
                name = (
                    "pcapng_truncated_block" if offset + length > size and length % 4 == 0 else "pcapng_corrupt_block"
                )
                batcher.error(offset, None, name, f"block type 0x{block_type:x} length {length}")
            return
        body = offset + 8
        if block_type == 1:  # Interface Description Block
            linktype = struct.unpack_from(order + "H", data, body)[0]
            interfaces.append((linktype, _pcapng_tsresol(data, order, body + 8, offset + length - 4)))
        elif block_type in (6, 2) and offset >= byte_range.start:  # Enhanced / obsolete Packet Block
            if block_type == 6:
                interface, high, low, included, original = struct.unpack_from(order + "IIIII", data, body)
            else:
                interface, _drops, high, low, included, original = struct.unpack_from(order + "HHIIII", data, body)
            if interface >= len(interfaces):
                batcher.error(offset, None, "pcapng_unknown_interface", f"interface {interface}")
            elif body + 20 + included > offset + length:
                batcher.error(offset, None, "pcapng_corrupt_block", f"captured length {included} > block")
            else:
                linktype, ticks = interfaces[interface]
                ts_ns = ((high << 32) | low) * 1_000_000_000 // ticks
                yield offset, ts_ns, linktype, body + 20, view[body + 20 : body + 20 + included]
        elif block_type == 3 and offset >= byte_range.start:  # Simple Packet Block: interface 0, no time
            (original,) = struct.unpack_from(order + "I", data, body)
            if not interfaces:
                batcher.error(offset, None, "pcapng_unknown_interface", "simple packet block before any IDB")
            else:
                included = min(original, length - 16)
                yield offset, None, interfaces[0][0], body + 4, view[body + 4 : body + 4 + included]
        offset += length


def _forget_behind(data: mmap.mmap, offset: int, forgotten: int) -> int:
    """The capture's pages behind ``offset`` leave this process's resident memory (the page cache keeps them): a
    reader hops over every record before its byte range, and would otherwise hold the file up to its range."""
    if offset - forgotten < _FORGET_EVERY:
        return forgotten
    upto = offset - offset % mmap.PAGESIZE
    data.madvise(mmap.MADV_DONTNEED, forgotten, upto - forgotten)
    return upto


def _pcapng_tsresol(data, order, position, end) -> int:
    while position + 4 <= end:
        code, length = struct.unpack_from(order + "HH", data, position)
        if code == 0:
            break
        if code == 9 and length >= 1:  # if_tsresol: 10^-v, or 2^-v with the high bit set
            value = data[position + 4]
            return 1 << (value & 0x7F) if value & 0x80 else 10**value
        position += 4 + ((length + 3) & ~3)
    return 1_000_000


def _packet(batcher, offset, ts_ns, linktype, frame):
    if linktype == LINKTYPE_ETHERNET:
        if len(frame) < 14:
            return batcher.error(offset, ts_ns, "link_truncated", f"ethernet frame of {len(frame)} bytes")
        ethertype, position = struct.unpack_from(">H", frame, 12)[0], 14
        while ethertype in _VLAN_ETHERTYPES and len(frame) >= position + 4:
            ethertype, position = struct.unpack_from(">H", frame, position + 2)[0], position + 4
    elif linktype == LINKTYPE_SLL:
        if len(frame) < 16:
            return batcher.error(offset, ts_ns, "link_truncated", f"SLL frame of {len(frame)} bytes")
        ethertype, position = struct.unpack_from(">H", frame, 14)[0], 16
    elif linktype == LINKTYPE_SLL2:
        if len(frame) < 20:
            return batcher.error(offset, ts_ns, "link_truncated", f"SLL2 frame of {len(frame)} bytes")
        ethertype, position = struct.unpack_from(">H", frame, 0)[0], 20
    elif linktype in (LINKTYPE_NULL, LINKTYPE_LOOP):
        if len(frame) < 4:
            return batcher.error(offset, ts_ns, "link_truncated", f"null/loop header of {len(frame)} bytes")
        # DLT_NULL stores the family in the capturing host's byte order; DLT_LOOP in network order.
        family = struct.unpack_from(">I" if linktype == LINKTYPE_LOOP else "<I", frame, 0)[0]
        if family > 0xFFFF:
            family = struct.unpack_from(">I", frame, 0)[0]
        ethertype = ETHERTYPE_IPV6 if family in _NULL_FAMILIES_IPV6 else ETHERTYPE_IPV4 if family == 2 else 0
        position = 4
    elif linktype in _RAW_LINKTYPES:
        version = frame[0] >> 4 if frame else 0
        ethertype = {4: ETHERTYPE_IPV4, 6: ETHERTYPE_IPV6}.get(version, 0)
        position = 0
    else:
        return batcher.error(offset, ts_ns, "unsupported_linktype", f"link type {linktype}")
    if ethertype == ETHERTYPE_IPV4:
        _ipv4(batcher, offset, ts_ns, frame, position)
    elif ethertype == ETHERTYPE_IPV6:
        _ipv6(batcher, offset, ts_ns, frame, position)
    # Other ethertypes (ARP, ...) are not TCP and not an error.


def _ipv4(batcher, offset, ts_ns, frame, position):
    if len(frame) < position + 20:
        return batcher.error(offset, ts_ns, "ip_truncated", "IPv4 header cut short")
    version_ihl, total_length, flags_fragment, protocol = (
        frame[position],
        *struct.unpack_from(">H2xH", frame, position + 2),
        frame[position + 9],
    )
    if protocol != IPPROTO_TCP:
        return
    header_length = (version_ihl & 0x0F) * 4
    if flags_fragment & 0x3FFF:  # more-fragments bit or a fragment offset
        return batcher.error(offset, ts_ns, "ip_fragment", "fragmented IPv4 packet skipped")
    if header_length < 20 or total_length < header_length:
        return batcher.error(offset, ts_ns, "ip_corrupt", f"IPv4 ihl {header_length} total {total_length}")
    addresses = bytes(frame[position + 12 : position + 20])
    # Ethernet pads short frames; the IP total length says where the packet really ends.
    end = position + total_length
    _tcp(batcher, offset, ts_ns, frame, position + header_length, end, addresses)


def _ipv6(batcher, offset, ts_ns, frame, position):
    if len(frame) < position + 40:
        return batcher.error(offset, ts_ns, "ip_truncated", "IPv6 header cut short")
    payload_length = struct.unpack_from(">H", frame, position + 4)[0]
    next_header = frame[position + 6]
    addresses = bytes(frame[position + 8 : position + 40])
    end = position + 40 + payload_length
    position += 40
    while next_header in _IPV6_SKIPPABLE or next_header == 44:
        if next_header == 44:
            return batcher.error(offset, ts_ns, "ip_fragment", "fragmented IPv6 packet skipped")
        if len(frame) < position + 2:
            return batcher.error(offset, ts_ns, "ip_truncated", "IPv6 extension header cut short")
        next_header, position = frame[position], position + (frame[position + 1] + 1) * 8
    if next_header != IPPROTO_TCP:
        return
    _tcp(batcher, offset, ts_ns, frame, position, end, addresses)


def _tcp(batcher, offset, ts_ns, frame, position, end, addresses):
    if len(frame) < position + 20:
        return batcher.error(offset, ts_ns, "tcp_truncated", "TCP header cut short")
    sport, dport, seq, ack, offset_flags = struct.unpack_from(">HHIIH", frame, position)
    data_start = position + (offset_flags >> 12) * 4
    if data_start > end or data_start < position + 20:
        return batcher.error(offset, ts_ns, "tcp_corrupt", f"data offset {(offset_flags >> 12) * 4}")
    if end > len(frame):
        # Snaplen cut the payload: keep what was captured; reassembly will show the rest as a gap.
        batcher.error(offset, ts_ns, "snaplen_truncated", f"{end - len(frame)} payload bytes not captured")
        end = len(frame)
    batcher.segment(offset, ts_ns, addresses, sport, dport, seq, ack, offset_flags & 0x1FF, frame, data_start, end)
