"""The simulated broker's side of a capture: packets written to pcap or pcapng through a write buffer, and TCP
connections on loopback with their sequence numbers and optional compression. Bytes are written with struct (no
per-packet objects)."""

from __future__ import annotations

import struct

from nsq_protocol import wire

EPOCH_NS = 1_800_000_000 * 10**9
MS = 1_000_000
HEARTBEAT_NS = 1000 * MS
MSG_TIMEOUT_NS = 1000 * MS
MAX_SEGMENT = 65535 - 54  # Ethernet+IPv4+TCP frames of at most 65535 bytes, as many pcap readers (scapy) expect
SERVER = ("127.0.0.1", 4150)

_PCAP_RECORD = struct.Struct("<IIII")
_TCP = struct.Struct(">HHIIBBHHH")
_IP_LENGTH = struct.Struct(">H")
_PCAPNG_EPB = struct.Struct("<IIIIIII")


class Capture:
    """Packets to a pcap or pcapng file through an 8 MiB write buffer."""

    def __init__(self, path: str, file_format: str):
        self.handle = open(path, "wb")
        self.pcapng = file_format == "pcapng"
        self.buffer: list[bytes] = []
        self.buffered = 0
        self.bytes_written = 0
        if self.pcapng:
            shb = struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)
            idb = struct.pack("<HHI", 1, 0, 262144) + struct.pack("<HHB3xHH", 9, 1, 9, 0, 0)
            self._out(struct.pack("<II", 0x0A0D0D0A, 28) + shb + struct.pack("<I", 28))
            self._out(struct.pack("<II", 1, 32) + idb + struct.pack("<I", 32))
        else:
            self._out(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))

    def packet(self, ts_ns: int, frame: bytes):
        if self.pcapng:
            padding = -len(frame) % 4
            total = 32 + len(frame) + padding
            self._out(_PCAPNG_EPB.pack(6, total, 0, ts_ns >> 32, ts_ns & 0xFFFFFFFF, len(frame), len(frame)))
            self._out(frame + b"\0" * padding + struct.pack("<I", total))
        else:
            self._out(_PCAP_RECORD.pack(ts_ns // 10**9, ts_ns % 10**9 // 1000, len(frame), len(frame)))
            self._out(frame)

    def _out(self, data: bytes):
        self.buffer.append(data)
        self.buffered += len(data)
        if self.buffered >= 8 << 20:
            self.flush()

    def flush(self):
        self.handle.write(b"".join(self.buffer))
        self.bytes_written += self.buffered
        self.buffer, self.buffered = [], 0

    def close(self):
        self.flush()
        self.handle.close()


class Connection:
    """One TCP connection: headers prebuilt per direction, sequence numbers, optional compression."""

    def __init__(self, capture: Capture, name: str, client_port: int, isn: int):
        self.capture = capture
        self.name = name
        self.port = client_port
        self.seq = {"c2s": isn, "s2c": (isn * 7919) & 0xFFFFFFFF}
        ether = b"\0" * 12 + b"\x08\x00"
        address = bytes([127, 0, 0, 1])
        self.ip_tail = b"\0\0\x40\0\x40\x06\0\0" + address + address
        self.ether = ether
        self.ports = {"c2s": (client_port, SERVER[1]), "s2c": (SERVER[1], client_port)}
        self.encoders = {}
        self.closed = False
        self.delivered = 0  # all deliveries, captured or not
        self.counts = {
            "heartbeats": 0,
            "nops": 0,
            "deliveries": 0,
            "fin": 0,
            "req": 0,
            "touch": 0,
            "fin_failed": 0,
            "publish_commands": 0,
            "messages_published": 0,
            "cls": 0,
        }

    def _segment(self, direction: str, ts_ns: int, flags: int, payload: bytes = b"", captured: bool = True):
        sport, dport = self.ports[direction]
        other = "s2c" if direction == "c2s" else "c2s"
        seq = self.seq[direction]
        if captured:
            tcp = _TCP.pack(sport, dport, seq, self.seq[other], 0x50, flags, 65535, 0, 0)
            ip = b"\x45\x00" + _IP_LENGTH.pack(40 + len(payload)) + self.ip_tail
            self.capture.packet(ts_ns, self.ether + ip + tcp + payload)
        self.seq[direction] = (seq + len(payload) + (1 if flags & 0x03 else 0)) & 0xFFFFFFFF

    def open(self, ts_ns: int):
        self._segment("c2s", ts_ns, 0x02)
        self._segment("s2c", ts_ns + 20_000, 0x12)
        self._segment("c2s", ts_ns + 40_000, 0x10)

    def close(self, ts_ns: int, first: str = "c2s"):
        """FIN from ``first``'s sender, the other's FIN, the last ACK."""
        other = "s2c" if first == "c2s" else "c2s"
        self._segment(first, ts_ns, 0x11)
        self._segment(other, ts_ns + 30_000, 0x11)
        self._segment(first, ts_ns + 60_000, 0x10)

    def send(self, direction: str, ts_ns: int, data: bytes, captured: bool = True, raw: bool = False):
        """``raw``: past the negotiated compression, as a broken peer may send it."""
        encoder = None if raw else self.encoders.get(direction)
        if encoder is not None:
            data = encoder.encode(data)
        for start in range(0, len(data), MAX_SEGMENT):
            self._segment(direction, ts_ns, 0x18, data[start : start + MAX_SEGMENT], captured)

    def compress(self, codec: str):
        for direction in ("c2s", "s2c"):
            self.encoders[direction] = wire.SnappyStreamEncoder() if codec == "snappy" else wire.DeflateStreamEncoder(6)


class Consumer:
    def __init__(self, conn: Connection, topic: str, channel: str, rdy: int, codec: str | None):
        self.conn, self.topic, self.channel, self.rdy, self.codec = conn, topic, channel, rdy, codec
        self.in_flight = 0
