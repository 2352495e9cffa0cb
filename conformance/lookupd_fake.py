"""The suite's fake nsqlookupd: what a broker registers is checked here (spec/registration.toml, R-01, R-02, R-03,
R-04, R-05, R-06, R-07, R-08, R-09, R-10, R-11).

It accepts the broker's connections, reads the magic and the commands (IDENTIFY with its body), logs each one
with its arrival time, and answers like nsqlookupd: IDENTIFY with nsqlookupd's JSON (or, when told, with an
``identify_reply`` nsqd must hang up on), everything else `OK`.
The IDENTIFY reply names its HTTP port, where `GET /channels?topic=` answers what `channels` holds for the topic
(nothing for any other): nsqd asks it for a new topic's channels and creates them (nsqd.go GetTopic)."""
from __future__ import annotations

import json
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from nsq_protocol import wire_v1
from nsq_protocol.wire import ProtocolViolation

_MAX_BODY = 1 << 20


@dataclass(frozen=True)
class Event:
    at: float  # time.monotonic()
    connection: int  # the broker's connections, numbered from 1 in accept order
    line: str  # "MAGIC", a command line, or "CLOSED"
    body: dict | None = None  # IDENTIFY's JSON


class FakeLookupd:
    def __init__(self, address: tuple[str, int] = ("127.0.0.1", 0), identify_reply: bytes | None = None):
        self.listener = socket.create_server(address)
        self.identify_reply = identify_reply  # instead of nsqlookupd's JSON: E_INVALID, or what is not JSON
        self.address = self.listener.getsockname()[:2]
        self.events: list[Event] = []
        self._lock = threading.Lock()
        self._connections = 0
        self._open: dict[int, socket.socket] = {}  # by connection number: what drop() closes
        self.channels: dict[str, list[str]] = {}  # what GET /channels?topic= answers (none for other topics)
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _channels_handler(self.channels))
        self._http.daemon_threads = True

    def start(self) -> FakeLookupd:
        threading.Thread(target=self._accept, daemon=True, name="fake-lookupd").start()
        threading.Thread(target=self._http.serve_forever, daemon=True, name="fake-lookupd-http").start()
        return self

    def stop(self) -> None:
        self.listener.close()
        self._http.shutdown()
        self._http.server_close()

    def drop(self) -> None:
        """Close every connection of the broker's, as a lookupd that goes away does (R-10): it learns of it only
        when it next writes."""
        with self._lock:
            connections = list(self._open.values())
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def since(self, start: int) -> list[Event]:
        with self._lock:
            return self.events[start:]

    def mark(self) -> int:
        """A position in the log: `since(mark)` is what came after."""
        with self._lock:
            return len(self.events)

    def settle(self, timeout: float, quiet: float = 0.3) -> None:
        """Wait (at most `timeout`) until a broker has IDENTIFYed and its REGISTERs of what it already has are
        over: a topic created during them would be registered twice (R-09, R-11)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                identified = any(event.line == "IDENTIFY" for event in self.events)
                last = self.events[-1].at if self.events else 0.0
            if identified and time.monotonic() - last >= quiet:
                return
            time.sleep(0.05)

    def _log(self, connection: int, line: str, body: dict | None = None) -> None:
        with self._lock:
            self.events.append(Event(time.monotonic(), connection, line, body))

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                self._connections += 1
                number = self._connections
                self._open[number] = conn
            threading.Thread(target=self._serve, args=(conn, number), daemon=True).start()

    def _serve(self, conn: socket.socket, number: int) -> None:
        commands = wire_v1.V1CommandDecoder(max_body_size=_MAX_BODY)
        try:
            while data := conn.recv(65536):
                magic_seen = commands.magic is not None
                decoded = commands.feed(data)  # a magic other than "  V1" raises: the connection ends
                if not magic_seen and commands.magic is not None:
                    self._log(number, "MAGIC")
                for command in decoded:
                    line = b" ".join((command.name, *command.params)).decode("utf-8", "replace")
                    if command.name == b"IDENTIFY":
                        try:
                            document = json.loads(command.body)
                        except ValueError:
                            document = None
                        if not isinstance(document, dict):  # the cases read it as the object it must be
                            document = {"undecodable": command.body[:200].decode("utf-8", "replace")}
                        self._log(number, line, document)
                        reply = self.identify_reply or json.dumps(
                            {"broadcast_address": "127.0.0.1", "hostname": "conformance-lookupd",
                             "http_port": self._http.server_address[1], "tcp_port": self.address[1],
                             "version": "1.3.0"}, separators=(",", ":")).encode()
                    else:
                        self._log(number, line)
                        reply = b"OK"
                    conn.sendall(wire_v1.encode_reply(reply))
        except (OSError, ProtocolViolation):
            pass
        finally:
            self._log(number, "CLOSED")
            with self._lock:
                self._open.pop(number, None)
            conn.close()


def _channels_handler(channels: dict[str, list[str]]) -> type[BaseHTTPRequestHandler]:
    class Channels(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            url = urllib.parse.urlsplit(self.path)
            topic = urllib.parse.parse_qs(url.query).get("topic", [""])[0]
            found = url.path == "/channels"
            body = json.dumps({"channels": channels.get(topic, [])} if found else {"message": "NOT_FOUND"}).encode()
            self.send_response(200 if found else 404)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    return Channels
