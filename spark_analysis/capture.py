"""``nsq-trace capture``: record the NSQ traffic of a command into a pcap.

tcpdump when it is installed (whole packets, ``-U`` so nothing is lost at stop), else scapy's
sniffer. Both need the right to open a raw socket (root or CAP_NET_RAW).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time

SETTLE_SECONDS = 1.0  # the sniffer must be listening before the command starts, and drain after


def capture(ports: list[int], output: str, command: list[str], interface: str = "lo") -> int:
    """Run ``command`` while capturing ``tcp port <port>`` of each of ``ports`` (nsqd's, nsqlookupd's) on
    ``interface``; return its exit status."""
    bpf = " or ".join(f"tcp port {port}" for port in ports)
    tcpdump = shutil.which("tcpdump")
    if tcpdump:
        sniffer = subprocess.Popen(
            [tcpdump, "-i", interface, "-s", "0", "-U", "-w", output, bpf], stderr=subprocess.DEVNULL
        )
        time.sleep(SETTLE_SECONDS)
        try:
            status = subprocess.call(command)
        finally:
            time.sleep(SETTLE_SECONDS)
            sniffer.terminate()
            sniffer.wait(timeout=10)
    else:
        from scapy.all import TCP, AsyncSniffer, conf, wrpcap

        # A Python-side filter: scapy compiles BPF only when libpcap is installed. The sending socket type drops
        # the kernel's outgoing copy of each packet, as tcpdump does: on loopback every packet is seen twice.
        sniffer = AsyncSniffer(
            iface=interface,
            L2socket=conf.L2socket,
            store=True,
            lfilter=lambda packet: TCP in packet and not {packet[TCP].sport, packet[TCP].dport}.isdisjoint(ports),
        )
        sniffer.start()
        time.sleep(SETTLE_SECONDS)
        try:
            status = subprocess.call(command)
        finally:
            time.sleep(SETTLE_SECONDS)
            packets = sniffer.stop()
        wrpcap(output, packets)
    print(f"captured {bpf} on {interface} -> {output} (command exit status {status})", file=sys.stderr)
    return status
