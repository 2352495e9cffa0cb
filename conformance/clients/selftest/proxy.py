"""A proxy between a client and the fake nsqd that breaks what the client sends (or what it is told), command by
command: the selftest's way of making a good client faulty (faults.py)."""
from __future__ import annotations

import asyncio

from conformance.transcript import Transcript
from nsq_protocol import wire


class _Proxy:
    """What both proxies share: a listening port on loopback in front of ``upstream``, closed with its streams."""

    def __init__(self, upstream: tuple[str, int], transcript: Transcript, fault):
        self.upstream, self.transcript, self.fault = upstream, transcript, fault
        self._server: asyncio.base_events.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self):
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    @property
    def tcp_address(self) -> str:
        return "%s:%d" % self._server.sockets[0].getsockname()[:2]

    async def close(self) -> None:
        for writer in self._writers:
            writer.close()
        self._server.close()
        await self._server.wait_closed()

    async def _accept(self, client_reader, client_writer) -> None:
        raise NotImplementedError


class FaultyProxy(_Proxy):
    def __init__(self, upstream: tuple[str, int], transcript: Transcript, fault):
        super().__init__(upstream, transcript, fault)
        self.accepted = 0

    async def _accept(self, client_reader, client_writer) -> None:
        self.accepted += 1
        self._writers.append(client_writer)
        if self.fault.refuse_after and self.accepted > self.fault.refuse_after:
            self.transcript.note(f"selftest fault {self.fault.name}: connection {self.accepted} refused")
            client_writer.close()
            return
        server_reader, server_writer = await asyncio.open_connection(*self.upstream)
        self._writers.append(server_writer)
        await asyncio.gather(self._client_to_server(client_reader, server_writer),
                             self._server_to_client(server_reader, client_writer, server_writer),
                             return_exceptions=True)

    async def _client_to_server(self, reader, writer) -> None:
        decoder = wire.CommandDecoder(pause_at_upgrade=True)
        upgraded = None  # chunks passed on since IDENTIFY asked for a layer: from then on bytes pass unread
        state: dict = {}  # what the fault keeps about this connection's commands
        try:
            while data := await reader.read(65536):
                if upgraded is None and decoder.paused:
                    upgraded, data = 0, decoder.take_trailing_data() + data
                if upgraded is not None:
                    writer.write(self.fault.upgraded(upgraded, data))
                    upgraded += 1
                    await writer.drain()
                    continue
                magic_seen = decoder.magic is not None
                commands = decoder.feed(data)
                if not magic_seen and decoder.magic is not None:
                    writer.write(self.fault.magic(decoder.magic))
                for command in commands:
                    if delay := self.fault.delay(command, state):
                        await asyncio.sleep(delay)
                    writer.write(self.fault.command(command, state))
                    if command.name == self.fault.hang_up_after:
                        self.transcript.note(f"selftest fault {self.fault.name}: hung up after {command.describe()}")
                        await writer.drain()
                        return
                await writer.drain()
        finally:
            writer.close()

    async def _server_to_client(self, reader, writer, upstream_writer) -> None:
        decoder = wire.FrameDecoder(pause_at_upgrade=True)
        upgraded = False  # past the IDENTIFY answer that turned a layer on: the bytes pass unread
        try:
            while data := await reader.read(65536):
                if upgraded:
                    writer.write(data)
                    await writer.drain()
                    continue
                for frame in decoder.feed(data):
                    replacement = self.fault.frame(frame)
                    if replacement is None:  # the fault closes the client's connection here
                        self.transcript.note(f"selftest fault {self.fault.name}: closed on {frame.describe()}")
                        upstream_writer.close()
                        return
                    writer.write(replacement)
                if decoder.paused:
                    upgraded = True
                    writer.write(decoder.take_trailing_data())
                    upstream_writer.write(self.fault.after_answer(frame.data))
                await writer.drain()
            if self.fault.storm:  # the broker closed: reconnects without any backoff
                self.transcript.note(f"selftest fault {self.fault.name}: {self.fault.storm} reconnects at once")
                for _ in range(self.fault.storm):
                    _, storm_writer = await asyncio.open_connection(*self.upstream)
                    storm_writer.write(wire.MAGIC_V2)
                    storm_writer.close()
        finally:
            writer.close()


class FaultyLookupProxy(_Proxy):
    """A proxy in front of the fake nsqlookupd, one HTTP request per connection: the fault may change or refuse
    the client's query (``fault.lookup``) or answer it with the first answer it got (``fault.lookup_stale``).
    ``shared`` is what the case's proxies know together: the queries so far, whether one failed, the first answer."""

    def __init__(self, upstream: tuple[str, int], transcript: Transcript, fault, shared: dict):
        super().__init__(upstream, transcript, fault)
        self.shared = shared
        shared.setdefault("queries", 0)
        shared.setdefault("failed", False)
        self.index = shared.setdefault("lookupds", 0)  # 0 for the case's first lookupd, 1 for its second...
        shared["lookupds"] += 1

    async def _accept(self, client_reader, client_writer) -> None:
        try:
            head = await client_reader.readuntil(b"\r\n\r\n")
            request_line, rest = head.split(b"\r\n", 1)
            method, target, version = request_line.decode("latin-1").split(" ")
            self.shared["queries"] += 1
            changed = self.fault.lookup({**self.shared, "lookupd": self.index}, target)
            if changed is None:
                self.transcript.note(f"selftest fault {self.fault.name}: {method} {target} refused")
                return
            if self.fault.lookup_stale and "first_answer" in self.shared:
                self.transcript.note(f"selftest fault {self.fault.name}: {target} answered with the first answer")
                client_writer.write(self.shared["first_answer"])
                return
            answers = await asyncio.gather(*(self._ask(f"{method} {changed} {version}\r\n".encode("latin-1") + rest)
                                             for _ in range(self.fault.lookup_copies)))
            answer = answers[0]
            if not answer:  # the lookupd is down
                self.shared["failed"] = True
                return
            self.shared.setdefault("first_answer", answer)
            client_writer.write(answer)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, OSError):
            pass
        finally:
            client_writer.close()

    async def _ask(self, request: bytes) -> bytes:
        """The lookupd's answer to ``request``; b"" when it is down."""
        try:
            server_reader, server_writer = await asyncio.open_connection(*self.upstream)
            server_writer.write(request)
            answer = await server_reader.read()
            server_writer.close()
        except OSError:
            return b""
        return answer
