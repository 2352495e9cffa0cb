"""Timestamped wire transcripts of one case, and their export as a pcap Wireshark opens."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

CLIENT_TO_SERVER, SERVER_TO_CLIENT, NOTE = ">", "<", "#"


@dataclass
class Event:
    at: float  # seconds since the transcript started
    connection: str  # "A", "B", ... or "HTTP"
    direction: str  # CLIENT_TO_SERVER, SERVER_TO_CLIENT or NOTE
    lines: list[str]  # decoded commands / frames, one per line
    wire: bytes = b""  # the bytes as they crossed the socket (compressed if negotiated)
    json_data: dict[int, bytes] = field(default_factory=dict)  # line index -> a frame's whole JSON data (compare)
    observed: tuple = ()  # the commands or frames as the monitors take them (nsq_protocol.monitors.Observed)

    def as_dict(self) -> dict:
        return {"at_ms": round(self.at * 1000, 1), "connection": self.connection,
                "direction": self.direction, "lines": self.lines, "wire_bytes": len(self.wire)}


@dataclass
class Endpoint:
    """The TCP 4-tuple of one recorded connection, for the pcap."""
    client: tuple[str, int]
    server: tuple[str, int]
    closed_by_server: bool = False
    closed_by_client: bool = False


@dataclass
class Transcript:
    started: float = field(default_factory=time.monotonic)
    wall_started: float = field(default_factory=time.time)
    events: list[Event] = field(default_factory=list)
    endpoints: dict[str, Endpoint] = field(default_factory=dict)

    def now(self) -> float:
        return time.monotonic() - self.started

    def record(self, connection: str, direction: str, lines: list[str], wire: bytes = b"",
               json_data: dict[int, bytes] | None = None, observed: tuple = ()) -> None:
        self.events.append(Event(self.now(), connection, direction, lines, wire, json_data or {}, observed))

    def wall_time(self, event: Event) -> float:
        return self.wall_started + event.at

    def note(self, text: str, connection: str = "-") -> None:
        self.record(connection, NOTE, [text])

    def render(self) -> str:
        out = []
        for event in self.events:
            for index, line in enumerate(event.lines):
                prefix = f"{event.at * 1000:9.1f} ms {event.connection:>4} {event.direction} " if index == 0 \
                    else " " * 20
                out.append(prefix + line)
        return "\n".join(out)

    def as_dicts(self) -> list[dict]:
        return [event.as_dict() for event in self.events]

    def write_pcap(self, path: Path) -> None:
        """One synthetic TCP session per connection (handshake, data both ways, FIN), with the
        recorded timestamps and payloads, on loopback addresses."""
        from scapy.layers.inet import IP, TCP
        from scapy.layers.l2 import Ether
        from scapy.utils import wrpcap

        packets = []
        sequence: dict[tuple[str, str], int] = {}

        def packet(name: str, direction: str, flags: str, payload: bytes, at: float):
            endpoint = self.endpoints[name]
            source, target = (endpoint.client, endpoint.server) if direction == CLIENT_TO_SERVER \
                else (endpoint.server, endpoint.client)
            reverse = SERVER_TO_CLIENT if direction == CLIENT_TO_SERVER else CLIENT_TO_SERVER
            seq = sequence.setdefault((name, direction), 1000 if direction == CLIENT_TO_SERVER else 5000)
            ack = sequence.setdefault((name, reverse), 1000 if reverse == CLIENT_TO_SERVER else 5000)
            frame = (Ether() / IP(src=source[0], dst=target[0])
                     / TCP(sport=source[1], dport=target[1], flags=flags, seq=seq,
                           ack=ack if "A" in flags else 0))
            if payload:
                frame = frame / payload
            frame.time = self.wall_started + at
            packets.append(frame)
            sequence[(name, direction)] = seq + len(payload) + (1 if ("S" in flags or "F" in flags) else 0)

        opened: set[str] = set()
        for event in self.events:
            if event.connection not in self.endpoints or event.direction == NOTE:
                continue
            if event.connection not in opened:
                opened.add(event.connection)
                packet(event.connection, CLIENT_TO_SERVER, "S", b"", event.at)
                packet(event.connection, SERVER_TO_CLIENT, "SA", b"", event.at)
                packet(event.connection, CLIENT_TO_SERVER, "A", b"", event.at)
            wire = event.wire
            # Loopback MSS is large, but keep segments Wireshark-friendly.
            for start in range(0, len(wire), 16384):
                packet(event.connection, event.direction, "PA", wire[start:start + 16384], event.at)
        end = self.now()
        for name in opened:
            endpoint = self.endpoints[name]
            if endpoint.closed_by_server:
                packet(name, SERVER_TO_CLIENT, "FA", b"", end)
            if endpoint.closed_by_client:
                packet(name, CLIENT_TO_SERVER, "FA", b"", end)
        path.parent.mkdir(parents=True, exist_ok=True)
        wrpcap(str(path), packets)
