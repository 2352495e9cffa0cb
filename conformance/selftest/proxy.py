"""A TCP proxy in front of a broker that breaks exactly one behaviour (a fault of ``faults.py``), to prove the
suite notices.

One proxy stands in front of one port. A connection whose client starts with an HTTP request line speaks HTTP
(the suite asks with ``Connection: close``): the fault sees the request line and body, and the whole response.
Any other speaks the TCP protocol (the magic ``  V2``): the proxy decodes the client's commands and the broker's
frames and lets the fault rewrite, drop or answer them. A fault with a ``relay`` puts a V1 relay of its own between
the broker and the nsqlookupd that ``PUT /config/nsqlookupd_tcp_addresses`` names (the registration faults). A
fault without a hook for a direction leaves that direction's bytes untouched.

Compressed and TLS sessions are rewritten up to the upgrade (ID-30) and forwarded untouched after it.
"""

from __future__ import annotations

import contextlib
import json
import re
import select
import socket
import threading
import time
from collections.abc import Callable

from conformance.selftest.faults import BY_NAME, Fault, HttpRequest
from nsq_protocol import wire, wire_v1

# Bodies above this are forwarded as they come, unrewritten: the proxy never holds a body the broker refuses by its
# size alone (P-PUB-03, H-PUB-01), nor waits for one the client sends in part.
_MAX_REWRITTEN_BODY = 64 * 1024
_INCOMPLETE_AFTER = 0.05  # seconds held bytes wait for the rest (a command) or the next frame (a held response)


def _unchanged(command: wire.Command, session) -> None:
    """The command hook of a fault that only watches the commands (``dies_on``)."""


class Session:
    """One proxied connection: the two sockets, a lock that keeps whole frames whole when the proxy answers in the
    broker's place, and the fault's memory of this connection."""

    def __init__(self, client: socket.socket, server: socket.socket, fault: Fault):
        self.client, self.server, self.fault = client, server, fault
        self.state: dict = {}
        self.pending = b""  # frames a fault holds back (flushed when the broker is quiet for a moment)
        self.hang_up = False  # set by a fault: close both sides after this write
        self._lock = threading.Lock()
        self._closed = False
        self.request_path = ""  # HTTP: the path of the request the response answers

    def to_client(self, data: bytes) -> None:
        if data:
            with self._lock:
                self.client.sendall(data)

    def client_done(self) -> None:
        """The client closed (or half-closed) its side: so does the proxy towards the broker, whose answers still
        come through until it closes (P-PUB-05: a body cut short gets its error)."""
        if self.fault.linger:
            time.sleep(self.fault.linger)  # the broker notices the client's departure late
        with contextlib.suppress(OSError):
            self.server.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for sock in (self.client, self.server):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


class FaultyProxy:
    def __init__(self, upstream: tuple[str, int] | None, fault: str | Fault, v1: bool = False):
        self.fault = BY_NAME[fault] if isinstance(fault, str) else fault
        self.upstream, self.v1 = upstream, v1  # the upstream may be set after the listener's port is known
        # /info names the broker's ports; a proxy that stands in for the broker names its own (broker -> proxy)
        self.info_ports: dict[int, int] = {}
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = self.listener.getsockname()[:2]
        self._closing = threading.Event()
        self._relays: dict[str, FaultyProxy] = {}
        self._sessions: set[Session] = set()
        self.hung = False  # a fault's ``hang`` death: connections accepted, nothing answered
        self._held: list[socket.socket] = []  # the clients a hung proxy accepted

    def start(self) -> FaultyProxy:
        threading.Thread(target=self._accept, daemon=True, name="proxy-accept").start()
        return self

    def stop(self) -> None:
        self._closing.set()
        self.listener.close()
        for relay in self._relays.values():
            relay.stop()

    def die(self) -> None:
        """The fault's ``dies_on`` command came: as a broker that exits (its port refuses, its connections end) or
        hangs (connections are accepted and nothing is answered any more)."""
        if self.fault.death == "hang":
            self.hung = True
            for session in list(self._sessions):
                with contextlib.suppress(OSError):
                    session.server.close()  # nothing more flows; the clients stay connected, unanswered
            return
        self._closing.set()
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread: until then the port still accepts
        self.listener.close()
        for session in list(self._sessions):
            session.close()

    def revive(self) -> None:
        """Up again on the same port, as a restarted broker: no held connections, listening anew."""
        for sock in self._held:
            sock.close()
        self._held.clear()
        for session in list(self._sessions):
            session.close()
        self.hung = False
        if self._closing.is_set():
            self.listener = socket.create_server(self.address)
            self._closing.clear()
            self.start()

    def relay_to(self, address: str) -> str:
        """The address of this fault's V1 relay in front of the nsqlookupd at ``address``."""
        if address not in self._relays:
            host, _, port = address.rpartition(":")
            self._relays[address] = FaultyProxy((host, int(port)), self.fault, v1=True).start()
        return "%s:%d" % self._relays[address].address

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.hung:
                self._held.append(client)
                continue
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            session = Session(client, server, self.fault)
            self._sessions.add(session)
            threading.Thread(target=self._serve, args=(session,), daemon=True).start()

    def _serve(self, session: Session) -> None:
        """Tell the protocol from the client's first bytes, then pump both ways."""
        try:
            first = session.client.recv(65536)
        except OSError:
            first = b""
        if not first:
            session.close()
            return
        if self.v1:
            up, down = self._v1_commands, self._raw
        elif re.match(rb"[A-Z]{3,7} /", first):
            up, down = self._http_request, self._http_response
        else:
            up, down = self._commands, self._frames
        threading.Thread(target=self._pump, args=(down, session, False), daemon=True).start()
        self._pump(up, session, True, first)

    def _pump(self, handler, session: Session, from_client: bool, first: bytes = b"") -> None:
        with contextlib.suppress(OSError):
            handler(session, first)
        self._sessions.discard(session)
        if self.hung:
            return  # a hung broker leaves its clients connected and unanswered
        if from_client and not session.hang_up:
            session.client_done()
        elif not session.fault.keeps_client_open:
            session.close()
        else:  # the broker hung up; the client is left waiting on an open socket
            with contextlib.suppress(OSError):
                session.server.close()

    @staticmethod
    def _stream(source: socket.socket, first: bytes = b""):
        """What ``source`` sends until it closes, after ``first``."""
        if first:
            yield first
        while data := source.recv(65536):
            yield data

    # ---- TCP protocol V2 --------------------------------------------------------------------------------------
    def _commands(self, session: Session, first: bytes) -> None:
        """Client -> broker: commands through the fault's ``command`` hook, whole commands at a time. Bytes the
        decoder holds for a command that does not complete soon go on as they are, and the rest of the
        connection with them (the suite's framing cases: a body shorter than its size, a half-close inside one)."""
        hook = session.fault.command or (_unchanged if session.fault.dies_on else None)
        decoder, held = wire.CommandDecoder(max_body_size=_MAX_REWRITTEN_BODY, pause_at_upgrade=True), b""
        data = first
        while True:
            if hook is None:
                session.server.sendall(held + data)
                held = b""
            else:
                start, held = decoder.offset, held + data
                try:
                    commands = decoder.feed(data)
                except wire.ProtocolViolation as exc:  # input no client should send: the suite's syntax cases
                    commands, consumed, hook = exc.commands, exc.offset - start, None
                else:
                    consumed = decoder.offset - start
                if session.fault.dies_on and any(session.fault.dies_on(command) for command in commands):
                    self.die()
                    return
                session.server.sendall(self._rewritten(commands, held[:consumed], session, hook, magic=start == 0))
                held = held[consumed:]
                if decoder.paused:  # TLS or compression follows the IDENTIFY: the rest as it comes
                    held, hook, data = held + decoder.take_trailing_data(), None, b""
                    continue
            if held and not select.select([session.client], [], [], _INCOMPLETE_AFTER)[0]:
                hook, data = None, b""
                continue
            data = session.client.recv(65536)
            if not data:
                session.server.sendall(held)
                return

    @staticmethod
    def _rewritten(commands: list, raw: bytes, session: Session, hook: Callable, magic: bool) -> bytes:
        """The raw bytes when the fault changes none of the commands, else its rewrite of each."""
        rewrites = [hook(command, session) for command in commands]
        if all(rewrite is None for rewrite in rewrites):
            return raw
        pairs = zip(commands, rewrites, strict=True)
        return (raw[:4] if magic else b"") + b"".join(
            command.encode() if rewrite is None else rewrite for command, rewrite in pairs)

    def _frames(self, session: Session, _: bytes) -> None:
        """Broker -> client: frames through the fault's ``frame`` hook; frames the fault holds back go out when the
        broker is quiet for a moment."""
        hook = session.fault.frame
        decoder = wire.FrameDecoder(pause_at_upgrade=True)
        while True:
            if session.pending and not select.select([session.server], [], [], _INCOMPLETE_AFTER)[0]:
                session.to_client(session.pending)
                session.pending = b""
            data = session.server.recv(65536)
            if not data:
                session.to_client(session.pending)
                return
            if hook is None:
                session.to_client(data)
                continue
            try:
                frames = decoder.feed(data)
            except wire.ProtocolViolation:  # not the V2 protocol (nsqlookupd's V1 replies): as it comes
                session.to_client(data)
                hook = None
                continue
            out = b"".join(frame.encode() if (rewrite := hook(frame, session)) is None else rewrite
                           for frame in frames)
            if decoder.paused:  # TLS or compression from here on: forwarded as it comes
                out, hook = out + decoder.take_trailing_data(), None
            session.to_client(out)
            if session.hang_up:
                return

    # ---- HTTP ---------------------------------------------------------------------------------------------------
    def _http_request(self, session: Session, first: bytes) -> None:
        """Client -> broker: the first request through the fault's ``request`` hook (which may answer it itself),
        the rest as it comes."""
        data = first
        hook = session.fault.request
        if hook is not None or session.fault.relay is not None:
            while b"\r\n\r\n" not in data and (more := session.client.recv(65536)):
                data += more
            head, separator, rest = data.partition(b"\r\n\r\n")
            length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
            small = length is not None and int(length.group(1)) <= _MAX_REWRITTEN_BODY  # else it streams through
            while small and len(rest) < int(length.group(1)) and (more := session.client.recv(65536)):
                rest += more
            request = HttpRequest.parse(head, rest if small else None)
            if request is not None and separator:
                answer = self._relayed(request, session) if session.fault.relay else hook(request, session)
                if isinstance(answer, bytes):
                    session.to_client(answer)
                    session.hang_up = True
                    return
                if answer is not None:
                    data = answer.encode() + (b"" if small else rest)
        session.request_path = data.split(b" ", 2)[1].partition(b"?")[0].decode("latin-1") if b" " in data else ""
        session.server.sendall(data)
        for more in self._stream(session.client):
            session.server.sendall(more)

    def _relayed(self, request: HttpRequest, session: Session) -> HttpRequest | None:
        """The registration faults: the nsqlookupd addresses set over HTTP become those of relays with the fault."""
        if request.method != "PUT" or request.path != "/config/nsqlookupd_tcp_addresses":
            return None
        try:
            addresses = json.loads(request.body)
        except ValueError:
            return None
        return request.with_body(json.dumps([self.relay_to(address) for address in addresses]).encode())

    def _http_response(self, session: Session, _: bytes) -> None:
        hook, first = session.fault.response, session.server.recv(65536)
        standing_in = self.info_ports and session.request_path == "/info"  # known once the broker answers
        if hook is None and not standing_in:
            for data in self._stream(session.server, first):
                session.to_client(data)
            return
        response = first
        with contextlib.suppress(OSError):  # a reset after the answer (it closed with input unread) ends it too
            while data := session.server.recv(65536):
                response += data
        head, separator, body = response.partition(b"\r\n\r\n")
        if not response.startswith(b"HTTP/") or not separator:  # not an HTTP answer (a bad magic's error frame)
            session.to_client(response)
            return
        if standing_in:
            body = re.sub(rb'"(tcp|http)_port":(\d+)', lambda match: b'"%s_port":%d' % (
                match.group(1), self.info_ports.get(int(match.group(2)), int(match.group(2)))), body)
        if hook is not None:
            head, body = hook(head, body, session)
        head = re.sub(rb"(?i)content-length: *\d+", b"Content-Length: %d" % len(body), head)
        session.to_client(head + b"\r\n\r\n" + body)

    # ---- the V1 relay (broker -> nsqlookupd) ------------------------------------------------------------------------
    def _v1_commands(self, session: Session, first: bytes) -> None:
        """What the broker sends nsqlookupd, through the fault's ``relay`` hook: a dropped command is answered OK in
        nsqlookupd's place (the broker reads an answer to each command before its next: L-TCP-02, R-01)."""
        decoder = wire_v1.V1CommandDecoder()
        for data in self._stream(session.client, first):
            magic = decoder.magic
            commands = decoder.feed(data)
            if magic is None and decoder.magic is not None:
                session.server.sendall(decoder.magic)
            for command in commands:
                if session.fault.relay(command):
                    session.server.sendall(wire_v1.encode_command(command.name, *command.params, body=command.body))
                else:
                    session.to_client(wire_v1.encode_reply(b"OK"))

    def _raw(self, session: Session, _: bytes) -> None:
        for data in self._stream(session.server):
            session.to_client(data)
