"""``nsq-trace capture``: record the NSQ traffic of a command into a pcap.

tcpdump when it is installed (whole packets, ``-U`` so nothing is lost at stop), else a packet socket read by a
thread of this process. Both need the right to open a raw socket (root or CAP_NET_RAW).
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time

SETTLE_SECONDS = 1.0  # the sniffer must be listening before the command starts, and drain after
RECEIVE_BUFFER = 64 << 20
# bytes read per frame: loopback's MTU of 65,536 and its link header make frames of 65,550 bytes, past the 65,535 a
# sniffer often reads; 262,144 is the largest snaplen in use
FRAME_READ = 262_144
SO_RCVBUFFORCE, SO_TIMESTAMPNS = 33, 35  # <asm-generic/socket.h>
SOL_PACKET, PACKET_STATISTICS, PACKET_OUTGOING, ETH_P_ALL = 263, 6, 4, 0x0003  # <linux/if_packet.h>, if_ether.h
IPPROTO_TCP = 6
PCAP_NANO_MAGIC, LINKTYPE_ETHERNET = 0xA1B23C4D, 1
ANCILLARY_SPACE = socket.CMSG_SPACE(16)  # one struct timespec


def capture(ports: list[int], output: str, command: list[str], interface: str = "lo") -> int:
    """Run ``command`` while capturing ``tcp port <port>`` of each of ``ports`` (nsqd's, nsqlookupd's) on
    ``interface``; return its exit status."""
    bpf = " or ".join(f"tcp port {port}" for port in ports)
    tcpdump = shutil.which("tcpdump")
    if tcpdump:
        sniffer = subprocess.Popen(
            [tcpdump, "-i", interface, "-s", "0", "-U", "-w", output, bpf], stderr=subprocess.DEVNULL
        )
        status = _run_while_listening(command, lambda: (sniffer.terminate(), sniffer.wait(timeout=10)))
    else:
        status = _socket_capture(ports, output, command, interface)
    print(f"captured {bpf} on {interface} -> {output} (command exit status {status})", file=sys.stderr)
    return status


def _run_while_listening(command: list[str], stop_sniffer) -> int:
    """The command's exit status; the sniffer listens a while before it starts, and drains a while after."""
    time.sleep(SETTLE_SECONDS)
    try:
        return subprocess.call(command)
    finally:
        time.sleep(SETTLE_SECONDS)
        stop_sniffer()


def _socket_capture(ports: list[int], output: str, command: list[str], interface: str) -> int:
    """A packet socket on ``interface`` read by a thread that keeps the TCP segments of ``ports`` as they come: the
    kernel's receive time of each (SO_TIMESTAMPNS), whole frames, written to a nanosecond pcap (memory stays flat).
    It parses no more than the ports (a dissecting sniffer such as scapy's fell behind the suite's traffic on a busy
    machine and lost thousands of packets); what the kernel dropped anyway is said at the end."""
    wanted = frozenset(ports)
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    for option in (SO_RCVBUFFORCE, socket.SO_RCVBUF):  # FORCE goes past net.core.rmem_max (root, CAP_NET_ADMIN)
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, option, RECEIVE_BUFFER)
            break
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    sock.bind((interface, 0))
    sock.settimeout(0.2)
    stop = threading.Event()
    with open(output, "wb") as pcap:
        pcap.write(struct.pack("<IHHiIII", PCAP_NANO_MAGIC, 2, 4, 0, 0, FRAME_READ, LINKTYPE_ETHERNET))

        def read() -> None:
            while not stop.is_set():
                try:
                    frame, ancillary, _, address = sock.recvmsg(FRAME_READ, ANCILLARY_SPACE)
                except TimeoutError:
                    continue
                # the sending side's copy: on loopback every packet is seen twice, kept once as tcpdump does
                if address[2] == PACKET_OUTGOING or not wanted.intersection(_tcp_ports(frame)):
                    continue
                seconds, nanoseconds = _received_at(ancillary)
                pcap.write(struct.pack("<IIII", seconds, nanoseconds, len(frame), len(frame)) + frame)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            status = _run_while_listening(command, stop.set)
            reader.join()
            _, dropped = struct.unpack("II", sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
        finally:
            stop.set()
            sock.close()
    if dropped:
        print(f"warning: the kernel dropped {dropped:,} packets the sniffer could not read in time: the capture "
              "has gaps", file=sys.stderr)
    return status


def _tcp_ports(frame: bytes) -> tuple[int, ...]:
    """An Ethernet frame's TCP source and destination ports (IPv4 or IPv6 without extension headers), else ()."""
    ethertype = frame[12:14]
    if ethertype == b"\x08\x00" and len(frame) >= 34 and frame[23] == IPPROTO_TCP:
        start = 14 + (frame[14] & 0x0F) * 4
    elif ethertype == b"\x86\xdd" and len(frame) >= 54 and frame[20] == IPPROTO_TCP:
        start = 54
    else:
        return ()
    return struct.unpack_from(">HH", frame, start) if len(frame) >= start + 4 else ()


def _received_at(ancillary: list) -> tuple[int, int]:
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
            return struct.unpack("qq", data[:16])
    now = time.time_ns()
    return now // 1_000_000_000, now % 1_000_000_000
