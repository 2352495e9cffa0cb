"""The conformance broker: an asyncio nsqd that a case scripts, and that records both directions of every
connection in the case's transcript (conformance.transcript).

It answers like nsqd v1.3.0 on its own (IDENTIFY, SUB, PUB, MPUB, DPUB, CLS; FIN, REQ and TOUCH of a message not
in flight with E_FIN_FAILED, E_REQ_FAILED, E_TOUCH_FAILED), delivers a message only while the connection's RDY
allows it, and leaves everything else to the case: which messages to send, which heartbeats, which errors, when
to close. The behaviour IDs cited (C-02, P-FIN-04, ID-30, ...) are the catalogue's (conformance/spec/), as in the
broker suite.

TLS, snappy and deflate are real layers (ID-30, ID-31, ID-32, ID-33, ID-34): the JSON answer to IDENTIFY agrees to the
layers the client asked for among those the broker ``offers`` (plus those it is told to ``force`` on a client that did
not ask), then the broker handshakes TLS (the test certificates of conformance/tls) or compresses, and sends one OK
through each new layer. With an ``auth_secret`` the answer says auth_required and AUTH is answered as nsqd does with an
auth server (P-AUTH-08, P-AUTH-09)."""
from __future__ import annotations

import asyncio
import json
import os
import ssl
import time
from pathlib import Path

from conformance.clients.judge import ClientFault
from conformance.transcript import CLIENT_TO_SERVER, NOTE, SERVER_TO_CLIENT, Endpoint, Transcript
from nsq_protocol import monitors, wire
from nsq_protocol.monitors.client_identify import MAX_MSG_TIMEOUT_MS, identify_refusal
from nsq_protocol.monitors.events import MAGIC, STREAM, UNREADABLE

MSG_TIMEOUT_MS = 60_000
TLS_DIR = Path(__file__).parent.parent / "tls"  # test certificates only: server.pem is CN=127.0.0.1, signed by ca.pem
CA_FILE = TLS_DIR / "ca.pem"
LAYERS = ("tls_v1", "snappy", "deflate")
# the transcript's notes of a connection's end, which the client suite's monitors read (clients/monitoring.py)
CLOSED_BY_CLIENT, RESET_BY_CLIENT = "closed by the client", "reset by the client"
CLOSED_BY_BROKER, REFUSED = "closed by the broker", "closed at once"


MAX_RDY_COUNT = 2500  # --max-rdy-count (P-RDY-04), also the IDENTIFY answer's max_rdy_count


def server_tls_context() -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(TLS_DIR / "server.pem", TLS_DIR / "server.key")
    return context


class FakeNsqd:
    def __init__(self, transcript: Transcript, msg_timeout_ms: int = MSG_TIMEOUT_MS):
        self.transcript = transcript
        self.msg_timeout_ms = msg_timeout_ms
        self.connections: list[ClientConnection] = []
        self._accepted: asyncio.Queue[ClientConnection] = asyncio.Queue()
        self._server: asyncio.base_events.Server | None = None
        self.client_gone: str | None = None  # the client's process ended: nothing more will come
        # command name -> (error frame, fatal): what every new connection answers its first such command with; set
        # before the client connects when it may send the command at once (a publisher's PUB)
        self.overrides: dict[bytes, tuple[bytes, bool]] = {}
        self.offers: set[str] = set()  # of LAYERS: what IDENTIFY may turn on for a client that asks
        self.force: set[str] = set()  # of LAYERS: turned on in the answer whether the client asked or not
        self.auth_secret: bytes | None = None  # auth_required, and the secret AUTH must carry
        self.refusing = False  # each new connection is closed as soon as it is accepted (a restarting nsqd)
        self.refused: list[float] = []  # transcript times of the connections so closed
        self.address: tuple[str, int] = ("127.0.0.1", 0)

    async def start(self) -> FakeNsqd:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.address = self._server.sockets[0].getsockname()[:2]
        return self

    @property
    def tcp_address(self) -> str:
        return "%s:%d" % self.address

    async def close(self) -> None:
        for connection in self.connections:
            connection.abort()
        if self._server:
            self._server.close()
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        name = chr(ord("A") + len(self.transcript.endpoints))  # unique across the case's brokers
        self.transcript.endpoints[name] = Endpoint(writer.get_extra_info("peername")[:2],
                                                   writer.get_extra_info("sockname")[:2])
        if self.refusing:
            self.refused.append(self.transcript.now())
            self.transcript.endpoints[name].closed_by_server = True
            self.transcript.note(f"connection {len(self.refused)} from {writer.get_extra_info('peername')[1]} "
                                 f"{REFUSED}", name)
            writer.close()
            return
        connection = ClientConnection(self, name, reader, writer)
        self.connections.append(connection)
        await self._accepted.put(connection)
        await connection.serve()

    async def next_connection(self, timeout: float, why: str = "the client connects") -> ClientConnection:
        expected = f"a TCP connection to {self.tcp_address} within {timeout:g} s"
        try:
            connection = await asyncio.wait_for(self._accepted.get(), timeout)
        except TimeoutError:
            raise ClientFault(why, expected, "no connection") from None
        if connection is None:
            self._accepted.put_nowait(None)
            raise ClientFault(why, expected, self.client_gone)
        return connection

    def client_exited(self, how: str) -> None:
        """The client's process ended: whatever a case waits for will not come."""
        self.client_gone = how
        self._accepted.put_nowait(None)
        for connection in self.connections:
            connection.unread_put(None)


class ClientConnection:
    """One client connection as nsqd sees it: the commands in arrival order, RDY, the messages in flight."""

    def __init__(self, nsqd: FakeNsqd, name: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.nsqd, self.name, self._reader, self._writer = nsqd, name, reader, writer
        self.transcript = nsqd.transcript
        self.received: list[tuple[float, wire.Command]] = []  # (transcript time, command), every command
        self._unread: asyncio.Queue[tuple[float, wire.Command] | None] = asyncio.Queue()
        self.magic: bytes | None = None
        self.identify: dict | None = None
        self.layers: tuple[str, ...] = ()  # what the IDENTIFY answer turned on
        self.authorized = False
        self.chunks: list[tuple[float, bytes]] = []  # (transcript time, bytes) as read from the socket
        self._inflate = None  # the client -> broker compression layer once agreed (wire.*StreamDecoder)
        self._compress = None  # the broker -> client one (wire.*StreamEncoder)
        self.rdy = 0
        self.sub_answered = False  # a SUB answered OK: RDY may follow (P-RDY-02)
        self.in_flight: dict[bytes, float] = {}
        self._ready = asyncio.Condition()
        self.closed = asyncio.Event()
        self.closed_at: float | None = None  # transcript time
        self.close_wait_delay = 0.0  # seconds before CLS is answered: shows whether a client waits for it
        self.closed_by_client = False
        # command name -> the error frame to answer its next one with, and whether the error is fatal (C-23)
        self.overrides: dict[bytes, tuple[bytes, bool]] = dict(nsqd.overrides)
        self._held: bytearray | None = None  # frames written together on release()
        # the fatal error the broker answered the client with on its own, as nsqd would have (a value out of
        # range, a malformed frame): a case waiting for more says so
        self.refused_with: str | None = None
        self.malformed: str | None = None  # the client's frame nsqd could not read, and why
        self._overrun: wire.Command | None = None  # an MPUB whose count reads past its body size, as recorded
        self._message_number = 0

    # ---- reading the client ---------------------------------------------------------------------------------
    async def serve(self) -> None:
        decoder = NsqdDecoder(pause_at_upgrade=True)
        try:
            while data := await self._reader.read(65536):
                self.chunks.append((self.transcript.now(), data))
                while data is not None:
                    try:
                        commands = decoder.feed(self._inflate.feed(data) if self._inflate else data)
                    except wire.ProtocolViolation as violation:
                        self._magic_seen(decoder)
                        for command in violation.commands:
                            await self._received(command)
                        self._unreadable(f"undecodable input: {violation.reason}", violation.reason,
                                         None if decoder.magic != wire.MAGIC_V2 else self._layer() or STREAM)
                        self.malformed = violation.reason
                        layer = self._layer()
                        if layer and violation.reason.startswith(f"{layer}:"):
                            # ID-33, ID-34: bytes the layer cannot read end nsqd's read loop: it closes, no frame
                            self.refused_with = "the close, no error frame"
                            await self.close()
                            return
                        # C-02: nsqd answers a bad magic with E_BAD_PROTOCOL and closes; other garbage E_INVALID
                        await self._fatal(b"E_BAD_PROTOCOL" if decoder.magic != wire.MAGIC_V2 else b"E_INVALID",
                                          violation.reason.encode())
                        return
                    self._magic_seen(decoder)
                    for command in commands:
                        await self._received(command)
                        if self.closed.is_set():
                            return
                    self._overrun_seen(decoder)
                    # paused after an IDENTIFY that asked for layers: what followed it goes through the new ones
                    data = decoder.take_trailing_data() if decoder.paused else None
            self._closed_by_client(CLOSED_BY_CLIENT)
        except (ConnectionError, OSError):
            self._closed_by_client(RESET_BY_CLIENT)
        finally:
            self._closed()

    def _closed_by_client(self, how: str) -> None:
        if not self.closed.is_set():
            self.closed_by_client = True
            self.transcript.endpoints[self.name].closed_by_client = True
            self.transcript.note(how, self.name)

    def _magic_seen(self, decoder: wire.CommandDecoder) -> None:
        if self.magic is None and decoder.magic is not None:
            self.magic = decoder.magic
            wrong = () if self.magic == wire.MAGIC_V2 else (
                monitors.Observed(self._wall_now(), UNREADABLE, MAGIC, f"magic {self.magic!r}"),)  # C-02
            self.transcript.record(self.name, CLIENT_TO_SERVER, [f"MAGIC {self.magic!r}"], self.magic,
                                   observed=wrong)

    def _overrun_seen(self, decoder: NsqdDecoder) -> None:
        """Records an MPUB whose size word frames a body that has all come but holds fewer messages than its count:
        nsqd waits for the rest (P-MPUB-04), the bytes on the wire show the MPUB whole."""
        overrun = decoder.overrun_mpub()
        if overrun is not None and overrun != self._overrun:
            self._overrun = overrun
            self.transcript.record(self.name, NOTE, [f"{overrun.describe()}: its count reads past its body size; "
                                                     "nsqd reads on into what comes next (P-MPUB-04)"],
                                   observed=(monitors.from_command(self._wall_now(), overrun),))

    def _wall_now(self) -> float:
        """Now on the clock of the monitors' events (seconds since the epoch, the transcript's)."""
        return self.transcript.wall_started + self.transcript.now()

    def _layer(self) -> str | None:
        """The compression layer the client's bytes come through now, if any."""
        return next((layer for layer in ("snappy", "deflate") if layer in self.layers and self._inflate), None)

    def _unreadable(self, note: str, why: str, where: str | None) -> None:
        """A note of bytes nsqd could not read; ``where`` (MAGIC, STREAM or a layer): the monitors' event too."""
        observed = () if where is None else (monitors.Observed(self._wall_now(), UNREADABLE, where, why),)
        self.transcript.record(self.name, NOTE, [note], observed=observed)

    async def _received(self, command: wire.Command) -> None:
        self.transcript.record(self.name, CLIENT_TO_SERVER, [command.describe()], command.encode(),
                               observed=(monitors.from_command(self._wall_now(), command),))
        entry = (self.transcript.now(), command)
        self.received.append(entry)
        self._unread.put_nowait(entry)  # before the answer, which may close the connection
        await self._answer(command)

    async def _answer(self, command: wire.Command) -> None:
        name = command.name
        if name in self.overrides:
            error, fatal = self.overrides.pop(name)
            if b"%s" in error:  # the message ID, as nsqd names it (P-FIN-04, P-REQ-06, P-TOUCH-03)
                error %= command.params[0] if command.params else b""
            self._in_flight_done(command)
            if fatal:
                await self._fatal(*error.split(b" ", 1))
            else:
                self.send(wire.FRAME_ERROR, error)
            return
        if name == b"IDENTIFY":
            await self._identify(command)
        elif name == b"AUTH":
            await self._auth(command)
        elif name in (b"SUB", b"PUB", b"MPUB", b"DPUB") and self.nsqd.auth_secret and not self.authorized:
            await self._fatal(b"E_AUTH_FIRST", b"AUTH failed for %s, auth required" % name)  # P-AUTH-09
        elif name == b"MPUB" and (malformed := mpub_refusal(command.body or b"")):
            self.malformed = f"MPUB: {malformed.decode()}"
            await self._fatal(*malformed.split(b" ", 1))  # P-MPUB-02: every body error is fatal
        elif name in (b"SUB", b"PUB", b"MPUB", b"DPUB"):
            self.sub_answered |= name == b"SUB"
            self.send(wire.FRAME_RESPONSE, b"OK")
        elif name == b"RDY":
            raw = command.params[0] if command.params else b"1"  # P-RDY-05: no parameter is RDY 1
            if not self.sub_answered:  # P-RDY-02
                await self._fatal(b"E_INVALID", b"cannot RDY in current state")
            elif raw and not raw.isdigit():  # P-RDY-03
                await self._fatal(b"E_INVALID", b"RDY could not parse count " + raw)
            elif int(raw or b"0") > MAX_RDY_COUNT:  # P-RDY-04
                await self._fatal(b"E_INVALID", b"RDY count %d out of range 0-%d" % (int(raw), MAX_RDY_COUNT))
            else:
                async with self._ready:
                    self.rdy = int(raw or b"0")
                    self._ready.notify_all()
        elif name in (b"FIN", b"REQ", b"TOUCH"):
            message_id = command.params[0] if command.params else b""
            if message_id not in self.in_flight:  # P-FIN, P-REQ, P-TOUCH: non-fatal, the connection stays
                self.send(wire.FRAME_ERROR, b"E_%s_FAILED %s %s failed" % (name, name, message_id))
            elif name == b"TOUCH":
                self.in_flight[message_id] = time.monotonic()
            else:
                self._in_flight_done(command)
        elif name == b"CLS" and self.close_wait_delay:
            asyncio.get_running_loop().call_later(self.close_wait_delay, self.send, wire.FRAME_RESPONSE,
                                                  b"CLOSE_WAIT")
        elif name == b"CLS":  # at once, as nsqd: before a close that came with the CLS is read (NSQC-CLS-001)
            self.send(wire.FRAME_RESPONSE, b"CLOSE_WAIT")
        elif name != b"NOP":
            await self._fatal(b"E_INVALID", b"invalid command " + name)

    def _in_flight_done(self, command: wire.Command) -> None:
        if command.name in (b"FIN", b"REQ") and command.params:
            self.in_flight.pop(command.params[0], None)

    async def _identify(self, command: wire.Command) -> None:
        try:
            self.identify = json.loads(command.body or b"")
            if not isinstance(self.identify, dict):
                raise ValueError("not an object")
        except ValueError:
            await self._fatal(b"E_BAD_BODY", b"IDENTIFY failed to decode JSON body")  # P-ID
            return
        # ID-02, ID-03, ID-04, ID-05, ID-06, ID-07, ID-08: nsqd refuses the connection
        if refusal := identify_refusal(self.identify):
            await self._fatal(b"E_BAD_BODY", refusal.encode())
            return
        if self.identify.get("feature_negotiation") is not True:
            self.send(wire.FRAME_RESPONSE, b"OK")  # ID-20
            return
        asked = set(wire.upgrades(self.identify, request=True))
        self.layers = tuple(layer for layer in LAYERS if layer in (asked & self.nsqd.offers) | self.nsqd.force)
        # ID-21: nsqd's answer; a layer is on where the client asked and the broker offers it (or it is forced);
        # ID-11: the level asked where deflate is on, else 6, capped at --max-deflate-level (6)
        asked_level = self.identify.get("deflate_level")
        level = asked_level if "deflate" in self.layers and isinstance(asked_level, int) and asked_level > 0 else 6
        response = {"max_rdy_count": MAX_RDY_COUNT, "version": "1.3.0", "max_msg_timeout": MAX_MSG_TIMEOUT_MS,
                    "msg_timeout": self.nsqd.msg_timeout_ms, "tls_v1": "tls_v1" in self.layers,
                    "deflate": "deflate" in self.layers, "deflate_level": min(level, 6),
                    "max_deflate_level": 6, "snappy": "snappy" in self.layers, "sample_rate": 0,
                    "auth_required": self.nsqd.auth_secret is not None, "output_buffer_size": 16384,
                    "output_buffer_timeout": 250}
        self.send(wire.FRAME_RESPONSE, json.dumps(response, separators=(",", ":")).encode())
        await self._upgrade()

    async def _upgrade(self) -> None:
        """ID-30: TLS first, then snappy or deflate, one OK through each new layer."""
        if "tls_v1" in self.layers:
            try:
                await self._writer.drain()
                await self._writer.start_tls(server_tls_context(), ssl_handshake_timeout=5.0)  # ID-31
            except (ssl.SSLError, ConnectionError, OSError, TimeoutError) as error:
                self._unreadable(f"TLS handshake failed: {error!r}", f"TLS handshake failed: {error!r}", "tls_v1")
                self.abort()
                return
            self.transcript.note(f"TLS: {self._writer.get_extra_info('cipher')}", self.name)
            self.send(wire.FRAME_RESPONSE, b"OK")
        if "snappy" in self.layers:  # ID-34
            self._compress = wire.SnappyStreamEncoder()
            self._inflate = wire.SnappyStreamDecoder(verify_checksums=True)
        elif "deflate" in self.layers:  # ID-33
            self._compress, self._inflate = wire.DeflateStreamEncoder(), wire.DeflateStreamDecoder()
        if self._compress:
            self.transcript.note(f"{'snappy' if 'snappy' in self.layers else 'deflate'}: both directions "
                                 "compressed from here (the transcript shows them decompressed)", self.name)
            self.send(wire.FRAME_RESPONSE, b"OK")

    async def _auth(self, command: wire.Command) -> None:
        if command.body != self.nsqd.auth_secret:
            await self._fatal(b"E_AUTH_FAILED", b"AUTH failed")  # P-AUTH-06
            return
        self.authorized = True  # P-AUTH-08
        self.send(wire.FRAME_RESPONSE, b'{"identity":"nsqc","identity_url":"","permission_count":1}')

    async def _fatal(self, code: bytes, text: bytes) -> None:
        self.refused_with = (code + b" " + text).decode("utf-8", "replace")
        self.send(wire.FRAME_ERROR, code + b" " + text)
        await self.close()

    def unread_put(self, entry) -> None:
        self._unread.put_nowait(entry)

    def _closed(self) -> None:
        if not self.closed.is_set():
            self.closed_at = self.transcript.now()
            self.closed.set()
            self._unread.put_nowait(None)

    # ---- writing to the client -------------------------------------------------------------------------------
    def send(self, frame_type: int, data: bytes) -> None:
        if self.closed.is_set():
            return
        frame = wire.Frame(frame_type, data)
        self.transcript.record(self.name, SERVER_TO_CLIENT, [frame.describe()], frame.encode(),
                               observed=(monitors.from_frame(self._wall_now(), frame),))
        if self._held is not None:
            self._held += frame.encode()
        else:
            self._write(frame.encode())

    def _write(self, data: bytes) -> None:
        self._writer.write(self._compress.encode(data) if self._compress else data)

    def hold(self) -> None:
        """Keep what is sent from now on for one write on ``release()``: the frames reach the client in one TCP
        segment, as they do whenever a busy client reads after several have arrived."""
        self._held = bytearray()

    def release(self) -> None:
        held, self._held = self._held, None
        if held and not self.closed.is_set():
            self.transcript.note(f"the last frames went out in one write of {len(held)} bytes", self.name)
            self._write(bytes(held))

    def heartbeat(self) -> None:
        self.send(wire.FRAME_RESPONSE, wire.HEARTBEAT)  # C-26

    async def send_message(self, body: bytes, attempts: int = 1, timeout: float = 5.0) -> bytes:
        """Deliver one message once the client's RDY allows one more in flight (C-4.1: nsqd never exceeds RDY)."""
        async with self._ready:
            try:
                await asyncio.wait_for(self._ready.wait_for(lambda: self.rdy > len(self.in_flight)), timeout)
            except TimeoutError:
                raise ClientFault("the client is ready for a message",
                                  f"RDY above {len(self.in_flight)} (messages in flight) within {timeout:g} s",
                                  f"RDY {self.rdy}") from None
        self._message_number += 1
        # 16 lowercase hex characters as nsqd's (C-10), unique across the case's connections
        message_id = b"%02x%014x" % (ord(self.name) - ord("A"), self._message_number)
        self.in_flight[message_id] = time.monotonic()
        self.send(wire.FRAME_MESSAGE, wire.encode_message(time.time_ns(), attempts, message_id, body))
        return message_id

    async def close(self) -> None:
        """Close as nsqd does after a fatal error: what was written goes out first."""
        if not self.closed.is_set():
            self.transcript.endpoints[self.name].closed_by_server = True
            self.transcript.note(CLOSED_BY_BROKER, self.name)
            self._closed()
            try:
                await self._writer.drain()
            except (ConnectionError, OSError):
                pass
            self._writer.close()

    def abort(self) -> None:
        self._closed()
        self._writer.close()

    # ---- what a case waits for -------------------------------------------------------------------------------
    async def expect(self, *names: bytes, timeout: float, why: str) -> wire.Command:
        """The next command named one of ``names`` (those before it were recorded and are skipped)."""
        deadline = time.monotonic() + timeout
        wanted = " or ".join(name.decode() for name in names)
        while True:
            remaining = deadline - time.monotonic()
            try:
                entry = await asyncio.wait_for(self._unread.get(), max(remaining, 0.0))
            except TimeoutError:
                raise ClientFault(why, f"{wanted} within {timeout:g} s", "nothing of that kind") from None
            if entry is None:
                self._unread.put_nowait(None)
                raise ClientFault(why, f"{wanted} within {timeout:g} s", self.nsqd.client_gone or self.ended())
            if entry[1].name in names:
                return entry[1]

    async def expect_none(self, *names: bytes, within: float, why: str) -> None:
        """No command named one of ``names`` during ``within`` seconds (the connection may close)."""
        deadline = time.monotonic() + within
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                entry = await asyncio.wait_for(self._unread.get(), remaining)
            except TimeoutError:
                return
            if entry is None:
                self._unread.put_nowait(None)
                return
            if entry[1].name in names:
                raise ClientFault(why, f"no {' or '.join(n.decode() for n in names)} for {within:g} s",
                                  f"{entry[1].describe()} at {entry[0] * 1000:.0f} ms")

    async def seen(self, name: bytes, since: int, timeout: float, why: str, matching=lambda command: True,
                   expected: str = "") -> int:
        """The index in ``received`` of the first ``name`` command at or after ``since`` that ``matching`` accepts,
        waiting at most ``timeout`` seconds; unlike ``expect``, in whatever order it came with others."""
        deadline = time.monotonic() + timeout
        while True:
            for index in range(since, len(self.received)):
                command = self.received[index][1]
                if command.name == name and matching(command):
                    return index
            if time.monotonic() >= deadline or self.closed.is_set():
                raise ClientFault(why, f"{expected or name.decode()} within {timeout:g} s",
                                  ("; ".join(command.describe() for _, command in self.received[since:]) or "nothing")
                                  + (f"; {self.ended()}" if self.closed.is_set() else ""))
            await asyncio.sleep(0.02)

    async def subscribed(self, timeout: float = 5.0) -> wire.Command:
        """Wait for the consumer's first RDY after its SUB: the point where messages can flow."""
        await self.expect(b"SUB", timeout=timeout, why="the consumer subscribes")
        return await self.expect(b"RDY", timeout=timeout, why="the consumer sends RDY after SUB")

    def ended(self) -> str:
        """How the connection ended, for a case that waited for more: a refusal names what nsqd refused."""
        if self.malformed:
            return f"the connection closed: the client sent a malformed frame ({self.malformed}), {self.refused_with}"
        if self.refused_with:
            return f"the connection closed: nsqd v1.3.0 refuses what the client sent with {self.refused_with}"
        return "the connection closed first" + (" (by the client)" if self.closed_by_client else "")

    def commands(self, *names: bytes) -> list[wire.Command]:
        return [command for _, command in self.received if not names or command.name in names]


class NsqdDecoder(wire.CommandDecoder):
    """nsqd's reading of the client's stream (P-MPUB-04: an MPUB by its count), which can also show an MPUB as its
    size word frames it."""

    def overrun_mpub(self) -> wire.Command | None:
        """The MPUB the undecoded bytes start with, its body as its size word frames it, when that body has all come
        (the decoder, reading by the count, waits for more); None otherwise."""
        pending = bytes(self._buffer)
        newline = pending.find(b"\n")
        if self.paused or not pending.startswith(b"MPUB ") or newline < 0 or len(pending) < newline + 5:
            return None
        size = int.from_bytes(pending[newline + 1:newline + 5], "big", signed=True)
        body = pending[newline + 5:newline + 5 + size]
        if size <= 0 or len(body) < size:
            return None
        return wire.Command(b"MPUB", tuple(self.split(pending[:newline])[1:]), body)


def mpub_refusal(body: bytes) -> bytes | None:
    """The error nsqd v1.3.0 answers an MPUB body it cannot read with (P-MPUB-02), or None."""
    if len(body) < 4:
        return b"E_BAD_BODY MPUB failed to read message count"
    count = int.from_bytes(body[:4], "big", signed=True)
    if count <= 0:
        return b"E_BAD_BODY MPUB invalid message count %d" % count
    position = 4
    for index in range(count):
        if len(body) - position < 4:
            return b"E_BAD_MESSAGE MPUB failed to read message(%d) body size" % index
        size = int.from_bytes(body[position:position + 4], "big", signed=True)
        position += 4
        if size <= 0:
            return b"E_BAD_MESSAGE MPUB invalid message(%d) body size %d" % (index, size)
        if len(body) - position < size:
            return b"E_BAD_MESSAGE MPUB failed to read message body"
        position += size
    return None


def case_token() -> str:
    """A name part that differs per case and per run, for topics and channels."""
    return os.urandom(3).hex()
