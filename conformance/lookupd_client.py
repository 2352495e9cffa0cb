"""A test connection to an nsqlookupd's TCP protocol "  V1" (conformance/spec/nsqlookupd.toml, L-TCP-*): commands are
lines, IDENTIFY adds a 4-byte size and a JSON body, and every reply is a 4-byte big-endian size and the data,
with no frame type (L-TCP-02). Sends and receives are recorded in the case's transcript like V2's."""
from __future__ import annotations

import json
import socket
import time
from collections import deque

from conformance.client import Mismatch, open_test_socket
from conformance.transcript import CLIENT_TO_SERVER, SERVER_TO_CLIENT, Transcript
from nsq_protocol import wire_v1
from nsq_protocol.wire import ProtocolViolation


def port_nothing_listens_on() -> socket.socket:
    """A loopback socket bound and never listened on, held while its port is a fake producer's: an nsqlookupd that
    calls its producers back (a POST /topic/delete) finds it refused, never another program's server (not 4151)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock


_PRODUCER_PORTS = (port_nothing_listens_on(), port_nothing_listens_on())  # held for the whole run
PRODUCER = {"broadcast_address": "127.0.0.1", "hostname": "conformance",
            "tcp_port": _PRODUCER_PORTS[0].getsockname()[1], "http_port": _PRODUCER_PORTS[1].getsockname()[1],
            "version": "1.3.0"}


def identify_command(fields: dict) -> bytes:
    return wire_v1.encode_command("IDENTIFY", body=json.dumps(fields).encode())


class V1Connection:
    def __init__(self, name: str, address: tuple[str, int], transcript: Transcript, time_scale: float,
                 send_magic: bool = True):
        self.name = name
        self.transcript = transcript
        self.time_scale = time_scale
        self.sock = open_test_socket(name, address, transcript, time_scale, program="nsqlookupd")
        self._replies = wire_v1.V1ReplyDecoder()
        self._received: deque[bytes] = deque()
        self._ports = (port_nothing_listens_on(), port_nothing_listens_on())
        # the ports it registers as a producer: its own, so that a case finds it in /nodes and /lookup
        self.tcp_port, self.http_port = (held.getsockname()[1] for held in self._ports)
        self.last_sent = self.last_verb = "the magic"  # for a failure's message: what the reply was awaited for
        if send_magic:
            self.send(wire_v1.MAGIC_V1)

    def send(self, data: bytes) -> None:
        self.last_sent = repr(data[:60])
        self.last_verb = "the magic" if data == wire_v1.MAGIC_V1 else data.split(b"\n")[0].split(b" ")[0].decode(
            "ascii", "replace")
        self.transcript.record(self.name, CLIENT_TO_SERVER, [repr(data[:120])], data)
        try:
            self.sock.sendall(data)
        except OSError as exc:
            raise Mismatch("nsqlookupd accepts the client's bytes", "write succeeds", f"write failed: {exc}") from exc

    def reply(self, timeout: float = 2.0, expected: str = "a reply") -> bytes:
        """The next V1 reply; a close or silence instead is a Mismatch naming what was sent and ``expected``."""
        deadline = time.monotonic() + timeout * self.time_scale
        while not self._received:
            chunk = self._read(deadline)
            if chunk is None:
                raise Mismatch(f"nsqlookupd replies to {self.last_sent}", expected, "the connection closed",
                               f"connection closed after {self.last_verb}")
            if chunk == b"":
                raise Mismatch(f"nsqlookupd replies to {self.last_sent}", f"{expected} within {timeout:g} s",
                               "nothing arrived", f"no answer to {self.last_verb}")
            self._decode(chunk)
        return self._received.popleft()

    def _decode(self, chunk: bytes) -> None:
        try:
            self._received.extend(self._replies.feed(chunk))
        except ProtocolViolation as exc:
            raise Mismatch("a V1 reply is [4-byte size][data] (L-TCP-02)", "a size >= 0", exc.reason) from None

    def command(self, data: bytes, expected: str = "a reply") -> bytes:
        self.send(data)
        return self.reply(expected=expected)

    def identify(self, **fields) -> dict:
        reply = self.command(identify_command({**PRODUCER, "tcp_port": self.tcp_port, "http_port": self.http_port,
                                               **fields}), "a JSON object")
        try:
            return json.loads(reply)
        except ValueError:
            raise Mismatch("the IDENTIFY reply is JSON (L-TCP-05)", "a JSON object", reply[:200]) from None

    def closed(self, timeout: float = 2.0) -> bool:
        """True when the server closes within `timeout` without another byte."""
        deadline = time.monotonic() + timeout * self.time_scale
        while True:
            chunk = self._read(deadline)
            if chunk is None:
                return not (self._received or self._replies.pending)
            if chunk == b"":
                return False
            self._decode(chunk)

    def _read(self, deadline: float) -> bytes | None:
        """Bytes; b"" at the deadline; None when the server closed (EOF or reset)."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return b""
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            return b""
        except OSError:
            data = b""
        if not data:
            self.transcript.note("server closed the connection", self.name)
            self.transcript.endpoints[self.name].closed_by_server = True
            return None
        self.transcript.record(self.name, SERVER_TO_CLIENT, [repr(data[:200])], data)
        return data

    def close(self) -> None:
        endpoint = self.transcript.endpoints[self.name]
        if not (endpoint.closed_by_server or endpoint.closed_by_client):
            self.transcript.note("client closes", self.name)  # for lookupd's monitors: its registrations go (L-TCP-13)
            endpoint.closed_by_client = True
        self.sock.close()
        for held in self._ports:
            held.close()
