"""``nsq-trace capture``: record the NSQ traffic of a command into a pcap.

tcpdump when it is installed (whole packets, ``-U`` so nothing is lost at stop), else scapy's
sniffer. Both need the right to open a raw socket (root or CAP_NET_RAW).
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import struct
import subprocess
import sys
import time

SETTLE_SECONDS = 1.0  # the sniffer must be listening before the command starts, and drain after
RECEIVE_BUFFER = 16 << 20
# bytes read per frame: loopback's MTU of 65,536 and its link header make frames longer than scapy's default read of
# 65,535, which would cut them; 262,144 is the largest snaplen in use
FRAME_READ = 262_144
SO_RCVBUFFORCE, SOL_PACKET, PACKET_STATISTICS = 33, 263, 6  # <linux/socket.h>, <linux/if_packet.h>


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
        status = _scapy_capture(ports, output, command, interface)
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


def _scapy_capture(ports: list[int], output: str, command: list[str], interface: str) -> int:
    """scapy's sniffer, writing each packet as it comes (memory stays flat), on a socket with a receive buffer of
    ``RECEIVE_BUFFER`` (scapy asks for 64 KiB, which a few 64 KiB loopback segments fill while its thread is off the
    CPU), and what it could not keep said at the end: the packets the kernel dropped, the frames scapy cut."""
    from scapy.all import IP, TCP, AsyncSniffer, PcapWriter, conf

    counts = {"cut": 0}
    # The sending socket type drops the kernel's outgoing copy of each packet, as tcpdump does: on loopback every
    # packet is seen twice by a listening socket.
    class WholeFrames(conf.L2socket):
        def recv(self, x=FRAME_READ, **kwargs):
            return super().recv(x, **kwargs)

    sock = WholeFrames(iface=interface)
    for option in (SO_RCVBUFFORCE, socket.SO_RCVBUF):  # FORCE goes past net.core.rmem_max (root, CAP_NET_ADMIN)
        with contextlib.suppress(OSError):
            sock.ins.setsockopt(socket.SOL_SOCKET, option, RECEIVE_BUFFER)
            break
    writer = PcapWriter(output, linktype=conf.l2types.layer2num.get(sock.LL), sync=False, snaplen=FRAME_READ)

    def keep(packet):
        writer.write(packet)
        if IP in packet and packet[IP].len > len(packet[IP]):
            counts["cut"] += 1

    # A Python-side filter: scapy compiles BPF only when libpcap is installed.
    sniffer = AsyncSniffer(
        opened_socket=sock,
        store=False,
        prn=keep,
        lfilter=lambda packet: TCP in packet and not {packet[TCP].sport, packet[TCP].dport}.isdisjoint(ports),
    )
    sniffer.start()
    try:
        status = _run_while_listening(command, sniffer.stop)
        _, dropped = struct.unpack("II", sock.ins.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
    finally:
        sock.close()
        writer.close()
    if dropped:
        print(f"warning: the kernel dropped {dropped:,} packets the sniffer could not read in time: the capture "
              "has gaps", file=sys.stderr)
    if counts["cut"]:
        print(f"warning: {counts['cut']:,} frames were longer than scapy reads and were cut (the analysis reports "
              "them as snaplen_truncated)", file=sys.stderr)
    return status
