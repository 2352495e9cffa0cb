"""The conformance lookupd: an asyncio nsqlookupd HTTP API that a case scripts (which producers /lookup lists,
whether the lookupd is up), and that records each query in the case's transcript.

It answers like nsqlookupd v1.3.0 (L-HTTP-04): ``GET /lookup?topic=T`` -> 200 ``{"channels": [], "producers":
[PEER...]}`` for the case's topic, 404 ``TOPIC_NOT_FOUND`` for another, 400 ``MISSING_ARG_TOPIC`` without one;
``/ping`` -> ``OK``; JSON with ``X-NSQ-Content-Type: nsq; version=1.0`` (H-01), which clients such as gnsq read to
tell the v1 answer from the old wrapped one. Producers left out of ``listed`` are what tombstoned, inactive or
vanished producers are to a client: absent from /lookup (L-HTTP-04, L-HTTP-12, L-TCP-19). A lookupd that is down
resets every connection at once: its port stays bound (parallel runs on loopback would take a freed one).

Each query reaches the client's monitors (conformance/clients/monitoring.py) through the transcript: an answered one
as a note carrying its ``HttpExchange`` (transcript times), one reset while down as the note ``QUERY_RESET``."""
from __future__ import annotations

import asyncio
import json
import socket
import struct
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from conformance.clients.judge import ClientFault
from conformance.transcript import NOTE, Transcript
from nsq_protocol.http import HttpExchange, Request, Response

QUERY_RESET = "a query reset: the lookupd is down"


@dataclass(frozen=True)
class Query:
    at: float  # transcript time
    target: str  # the request target, e.g. /lookup?topic=nsqc-1a2b3c
    path: str
    topic: str | None


class FakeNsqlookupd:
    def __init__(self, transcript: Transcript, topic: str, name: str = "L"):
        self.transcript, self.topic, self.name = transcript, topic, name
        self.listed: list[str] = []  # host:port of the producers /lookup lists, in order
        self.queries: list[Query] = []
        self._arrived = asyncio.Condition()
        self._server: asyncio.base_events.Server | None = None
        self.address: tuple[str, int] = ("127.0.0.1", 0)
        self.up = False
        self.refused = 0  # connections reset while down: the client's queries that found it down

    async def start(self) -> FakeNsqlookupd:
        """Up: listening and answering (again, after ``stop()``: a lookupd that comes back)."""
        if self._server is None:
            self._server = await asyncio.start_server(self._serve, *self.address)
            self.address = self._server.sockets[0].getsockname()[:2]
        self.up = True
        self.transcript.note(f"nsqlookupd {self.name} up on {self.http_address}", self.name)
        return self

    async def stop(self) -> None:
        """Down: every connection is reset at once, as by a lookupd that is not running."""
        self.up = False
        self.transcript.note(f"nsqlookupd {self.name} down", self.name)

    async def close(self) -> None:
        if self._server:
            self._server.close()
            await self._server.wait_closed()

    @property
    def http_address(self) -> str:
        return "%s:%d" % self.address

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.up:
            self.refused += 1
            self.transcript.note(QUERY_RESET, self.name)
            writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.close()  # with SO_LINGER 0: a reset, as close to "connection refused" as a bound port gets
            return
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5.0)
            method, target = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")[:2]
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ValueError, OSError):
            writer.close()
            return
        asked = self.transcript.now()
        status, body = await self._answer(method, target)
        headers = {"content-type": "text/plain; charset=utf-8" if body == b"OK" else "application/json; charset=utf-8",
                   **({} if body == b"OK" else {"x-nsq-content-type": "nsq; version=1.0"})}
        exchange = HttpExchange(asked, Request(method, target, b""), Response(status, body, headers),
                                self.transcript.now())
        self.transcript.record(self.name, NOTE, [f"HTTP {method} {target} -> {status} {body.decode()}"],
                               observed=(exchange,))
        lines = "".join(f"{name.title()}: {value}\r\n" for name, value in headers.items())
        writer.write(b"HTTP/1.1 %d %s\r\n%sContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (
            status, {200: b"OK", 400: b"Bad Request", 404: b"Not Found"}[status], lines.encode(), len(body), body))
        try:
            await writer.drain()
        except (ConnectionError, OSError):
            pass
        writer.close()

    async def _answer(self, method: str, target: str) -> tuple[int, bytes]:
        parts = urlsplit(target)
        if parts.path == "/ping":
            return 200, b"OK"  # L-HTTP-01
        if parts.path != "/lookup" or method != "GET":
            return 404, b'{"message":"NOT_FOUND"}'  # L-HTTP-14
        topic = parse_qs(parts.query).get("topic", [None])[0]
        async with self._arrived:
            self.queries.append(Query(self.transcript.now(), target, parts.path, topic))
            self._arrived.notify_all()
        if topic is None:
            return 400, b'{"message":"MISSING_ARG_TOPIC"}'
        if topic != self.topic:
            return 404, b'{"message":"TOPIC_NOT_FOUND"}'
        return 200, json.dumps({"channels": [], "producers": [self._peer(address) for address in self.listed]},
                               separators=(",", ":")).encode()

    @staticmethod
    def _peer(address: str) -> dict:
        host, port = address.rsplit(":", 1)
        return {"remote_address": f"{host}:{port}", "hostname": "nsqc-fake-nsqd", "broadcast_address": host,
                "tcp_port": int(port), "http_port": int(port), "version": "1.3.0", "topology_zone": "",
                "topology_region": ""}

    async def queried(self, count: int, timeout: float, why: str) -> list[Query]:
        """The first ``count`` /lookup queries, waiting at most ``timeout`` seconds for them."""
        async with self._arrived:
            try:
                await asyncio.wait_for(self._arrived.wait_for(lambda: len(self.queries) >= count), timeout)
            except TimeoutError:
                raise ClientFault(why, f"{count} GET /lookup on nsqlookupd {self.name} within {timeout:g} s",
                                  f"{len(self.queries)}") from None
        return self.queries[:count]
