"""Rewrite a recorded Ethernet/IPv4 pcap into other container and network forms, at test time.

Each variant carries exactly the same TCP segments with the same timestamps, so the analysis must
report the same counts. Written with struct (not the code under test) so a walker bug cannot hide.
"""

from __future__ import annotations

import ipaddress
import struct


def records(path) -> list[tuple[int, bytes]]:
    """(timestamp in ns, Ethernet frame) of a little-endian microsecond pcap."""
    with open(path, "rb") as handle:
        data = handle.read()
    assert struct.unpack_from("<I", data)[0] == 0xA1B2C3D4 and struct.unpack_from("<I", data, 20)[0] == 1
    out, offset = [], 24
    while offset < len(data):
        seconds, micros, included, _ = struct.unpack_from("<IIII", data, offset)
        out.append((seconds * 10**9 + micros * 1000, data[offset + 16 : offset + 16 + included]))
        offset += 16 + included
    return out


def write_pcap(path, frames, linktype=1, nanoseconds=False, big_endian=False):
    order = ">" if big_endian else "<"
    magic = 0xA1B23C4D if nanoseconds else 0xA1B2C3D4
    with open(path, "wb") as handle:
        handle.write(struct.pack(order + "IHHiIII", magic, 2, 4, 0, 0, 262144, linktype))
        for ts_ns, frame in frames:
            fraction = ts_ns % 10**9 if nanoseconds else ts_ns % 10**9 // 1000
            handle.write(struct.pack(order + "IIII", ts_ns // 10**9, fraction, len(frame), len(frame)) + frame)


def write_pcapng(path, frames, linktype=1):
    """One section, one interface with nanosecond resolution (if_tsresol = 9), Enhanced Packet Blocks."""

    def block(block_type, body):
        body += b"\0" * (-len(body) % 4)
        return struct.pack("<II", block_type, len(body) + 12) + body + struct.pack("<I", len(body) + 12)

    with open(path, "wb") as handle:
        handle.write(block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)))
        options = struct.pack("<HHB3x", 9, 1, 9) + struct.pack("<HH", 0, 0)
        handle.write(block(1, struct.pack("<HHI", linktype, 0, 262144) + options))
        for ts_ns, frame in frames:
            handle.write(
                block(
                    6,
                    struct.pack("<IIIII", 0, ts_ns >> 32, ts_ns & 0xFFFFFFFF, len(frame), len(frame)) + frame,
                )
            )


def to_ipv6(frames):
    """Ethernet/IPv4/TCP -> Ethernet/IPv6/TCP with 2001:db8::a.b.c.d addresses (TCP bytes untouched)."""
    out = []
    for ts_ns, frame in frames:
        ip = frame[14:]
        header_length = (ip[0] & 0x0F) * 4
        total = struct.unpack_from(">H", ip, 2)[0]
        segment = ip[header_length:total]
        addresses = [
            ipaddress.IPv6Address("2001:db8::" + str(ipaddress.IPv4Address(ip[i : i + 4]))).packed for i in (12, 16)
        ]
        header = struct.pack(">IHBB", 6 << 28, len(segment), 6, 64) + addresses[0] + addresses[1]
        out.append((ts_ns, frame[:12] + b"\x86\xdd" + header + segment))
    return out


def to_linux_sll2(frames):
    """Ethernet -> Linux cooked v2 (link type 276): 20-byte header with the protocol first."""
    return [
        (ts, frame[12:14] + b"\0\0" + struct.pack(">IHBB", 1, 1, 0, 6) + frame[6:12] + b"\0\0" + frame[14:])
        for ts, frame in frames
    ]


def split_by_time(frames, parts: int) -> list[list]:
    """Cut the capture at equal time steps, as tcpdump -G rotation does."""
    start, end = frames[0][0], frames[-1][0]
    step = (end - start) // parts + 1
    pieces = [[] for _ in range(parts)]
    for ts_ns, frame in frames:
        pieces[(ts_ns - start) // step].append((ts_ns, frame))
    return pieces
