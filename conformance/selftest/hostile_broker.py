"""A hostile fake nsqd: TCP protocol V2 and an HTTP API on loopback that answer mostly as nsqd would, but lie.

Issue 23 item 2: every value a broker sends is validated before the suite uses it. This broker answers each
command plausibly (a small in-memory broker: topics, channels, RDY, FIN/REQ/TOUCH, heartbeats) and, per connection
and per HTTP request, a seeded ``random.Random`` of its :class:`HostilePlan` picks which answers lie and how:
garbage frames, frame sizes that lie, odd error frames, IDENTIFY JSON of the wrong types, truncated or oversized
JSON, garbage inside an agreed TLS or compression layer, short message frames, a close at any point; over HTTP a
wrong status, a garbage, truncated or oversized body, a lying Content-Length, JSON of the wrong types. It never
dies and answers the suite's liveness probe (IDENTIFY ``{}`` on a fresh connection, GET /ping), so the only ERROR
the suite may give is the one about a target that is unreachable or died.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import struct
import time
from collections import deque
from dataclasses import dataclass, field

from conformance.selftest.hostile_http import HttpSession
from conformance.selftest.hostile_plan import HOSTILITIES, HostilePlan, Liar
from nsq_protocol import wire

MAX_CLAIMED_SIZE = 4 * 1024 * 1024  # a lying frame size claims at most this, and is never sent in full
HEARTBEAT_SECONDS = 1.0  # much faster than nsqd's 30 s: the suite's heartbeat cases end quickly


# ---- a small in-memory broker, so that cases get far enough to read what the lies are mixed into -----------

@dataclass
class _Message:
    id: bytes
    body: bytes
    timestamp: int
    attempts: int = 0


@dataclass
class _Channel:
    name: str
    queue: deque = field(default_factory=deque)
    subscribers: list = field(default_factory=list)
    paused: bool = False


@dataclass
class _Topic:
    name: str
    channels: dict = field(default_factory=dict)
    backlog: deque = field(default_factory=deque)  # messages published before any channel existed
    message_count: int = 0
    paused: bool = False


class _State:
    def __init__(self):
        self.topics: dict[str, _Topic] = {}
        self.next_id = 0

    def topic(self, name: str) -> _Topic:
        return self.topics.setdefault(name, _Topic(name))

    def channel(self, topic: _Topic, name: str) -> _Channel:
        if name not in topic.channels:
            channel = topic.channels[name] = _Channel(name)
            if len(topic.channels) == 1:
                channel.queue.extend(topic.backlog)
                topic.backlog.clear()
        return topic.channels[name]

    def publish(self, topic_name: str, body: bytes) -> None:
        topic = self.topic(topic_name)
        topic.message_count += 1
        self.next_id += 1
        if not topic.channels:
            topic.backlog.append(_Message(b"%016x" % self.next_id, body, time.time_ns()))
        for channel in topic.channels.values():
            channel.queue.append(_Message(b"%016x" % self.next_id, body, time.time_ns()))
            for subscriber in channel.subscribers:
                subscriber.wake.set()


# ---- the TCP side ----------------------------------------------------------------------------------------

class _TcpSession:
    def __init__(self, broker: HostileBroker, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 liar: Liar):
        self.broker, self.reader, self.writer, self.liar = broker, reader, writer, liar
        self.commands = wire.CommandDecoder(pause_at_upgrade=True)
        self.inflate = None  # the client's compression layer, once agreed
        self.compress = None  # ours
        self.channel: _Channel | None = None
        self.ready = 0
        self.in_flight: dict[bytes, _Message] = {}
        self.wake = asyncio.Event()
        self.tasks: list[asyncio.Task] = []
        self.first_command = True
        self.closing = False
        self.out = bytearray()  # what the next flush sends

    # sending: every frame goes through the agreed compression layer
    def write(self, data: bytes) -> None:
        if not self.closing:
            self.out += self.compress.encode(data) if self.compress else data

    async def flush(self) -> None:
        if self.out:
            self.writer.write(bytes(self.out))
            self.out.clear()
        await self.writer.drain()

    def frame(self, frame_type: int, data: bytes) -> None:
        self.write(wire.encode_frame(frame_type, data))

    def respond(self, data: bytes) -> None:
        self.lie_or(lambda: self.frame(wire.FRAME_RESPONSE, data))

    def error(self, code: str, text: str = "", fatal: bool = False) -> None:
        self.lie_or(lambda: self.frame(wire.FRAME_ERROR, f"{code} {text}".strip().encode()))
        if fatal:
            self.closing = True

    def lie_or(self, honest) -> None:
        """The honest answer, or one of the enabled lies instead of it (or around it)."""
        liar = self.liar
        if liar.lies("close"):
            self.lie_close(honest)
        elif liar.lies("garbage-frame"):
            self.write(liar.pick([
                wire.encode_frame(liar.pick([3, 4, 7, 255, -1, 0x7FFFFFFF]), b"garbage"),
                os.urandom(liar.pick([1, 3, 7, 8, 64])),
                b"HTTP/1.1 200 OK\r\n\r\n",
            ]))
            honest()
        elif liar.lies("lying-frame-size"):
            size = liar.pick([0, 1, 3, -1, MAX_CLAIMED_SIZE, 0x7FFFFFFF, 0xFFFFFFFF])
            self.write(struct.pack(">I", size & 0xFFFFFFFF) + struct.pack(">i", wire.FRAME_RESPONSE) + b"OK"[
                :liar.pick([0, 2])])
            if size == MAX_CLAIMED_SIZE:
                self.closing = True  # a promise of 4 MB, broken at once
        elif liar.lies("odd-error"):
            self.frame(wire.FRAME_ERROR, liar.pick([b"", b" ", b"E_", b"\xff\xfe\xfd", b"E_INVALID",
                                                    b"e_invalid lower case", b"E_NOT_A_CODE something",
                                                    b"E_BAD_BODY \xff\xfe", b"ERROR"]))
            if liar.rng.random() < 0.5:
                self.closing = True
        elif liar.lies("short-message"):
            self.frame(wire.FRAME_MESSAGE, self.odd_message())
            honest()
        else:
            honest()

    def lie_close(self, honest) -> None:
        choice = self.liar.rng.randrange(3)
        if choice:
            before = len(self.out)
            honest()
            if choice == 1:  # half of the answer
                del self.out[before + max(1, (len(self.out) - before) // 2):]
        self.closing = True

    def odd_message(self) -> bytes:
        liar = self.liar
        return wire.encode_message(liar.pick([0, -1, 2 ** 62]), liar.pick([0, 1, 65535]),
                                   liar.pick([b"\xff" * 16, b"0" * 16, b"not-an-id-really"]),
                                   liar.pick([b"", b"\xff\xfe", b"x" * 100]))

    # the session
    async def run(self) -> None:
        self.tasks.append(asyncio.create_task(self.heartbeats()))
        try:
            magic = await self.reader.readexactly(4)
            if magic != wire.MAGIC_V2:
                self.error("E_BAD_PROTOCOL", f"protocol version {magic!r} unsupported", fatal=True)
                return
            self.commands.feed(magic)
            while not self.closing:
                data = await self.reader.read(65536)
                if not data:
                    return
                self.feed(data)
                self.deliver()
                await self.flush()
        except (ConnectionError, asyncio.IncompleteReadError, wire.ProtocolViolation):
            pass
        finally:
            for task in self.tasks:
                task.cancel()
            if self.channel is not None and self in self.channel.subscribers:
                self.channel.subscribers.remove(self)
                self.channel.queue.extendleft(reversed(list(self.in_flight.values())))
            self.closing = False  # what the last answer wrote still goes out
            try:
                await self.flush()
            except ConnectionError:
                pass
            self.writer.close()

    def feed(self, data: bytes) -> None:
        plain = self.inflate.feed(data) if self.inflate else data
        try:
            commands = self.commands.feed(plain)
        except wire.ProtocolViolation as exc:
            self.error("E_INVALID", exc.reason, fatal=True)
            return
        for command in commands:
            if self.closing:
                return
            self.answer(command)
            self.first_command = False

    async def heartbeats(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_SECONDS)
            if self.closing or self.writer.is_closing():
                return
            self.respond(wire.HEARTBEAT)
            if not await self.send_out():
                return

    def deliver(self) -> None:
        channel = self.channel
        while channel is not None and not channel.paused and channel.queue and len(self.in_flight) < self.ready:
            message = channel.queue.popleft()
            message.attempts += 1
            self.in_flight[message.id] = message
            self.lie_or(lambda message=message: self.frame(wire.FRAME_MESSAGE, wire.encode_message(
                message.timestamp, message.attempts, message.id, message.body)))

    async def wait_for_messages(self) -> None:
        while not self.closing:
            await self.wake.wait()
            self.wake.clear()
            self.deliver()
            if not await self.send_out():
                return

    async def send_out(self) -> bool:
        """Flush from a task beside the reading loop; False: the session is over (a lie closed it, or the peer)."""
        try:
            await self.flush()
        except ConnectionError:
            return False
        if self.closing:
            self.writer.close()
        return not self.closing

    def answer(self, command: wire.Command) -> None:
        name = command.name.decode("ascii", "replace") if isinstance(command.name, bytes) else str(command.name)
        params = [param.decode("utf-8", "replace") for param in command.params]
        state = self.broker.state
        if name == "IDENTIFY":
            self.identify(command.body or b"")
        elif name == "NOP":
            pass
        elif name in ("PUB", "DPUB") and params:
            state.publish(params[0], command.body or b"")
            self.respond(b"OK")
        elif name == "MPUB" and params:
            try:
                bodies = wire.parse_mpub_body(command.body or b"")
            except wire.ProtocolViolation as exc:
                self.error("E_BAD_BODY", exc.reason, fatal=True)
                return
            for body in bodies:
                state.publish(params[0], body)
            self.respond(b"OK")
        elif name == "SUB" and len(params) == 2:
            if self.channel is not None:
                self.error("E_INVALID", "cannot SUB in current state", fatal=True)
                return
            self.channel = state.channel(state.topic(params[0]), params[1])
            self.channel.subscribers.append(self)
            self.tasks.append(asyncio.create_task(self.wait_for_messages()))
            self.respond(b"OK")
        elif name == "RDY" and params and params[0].isdigit():
            self.ready = int(params[0])
            self.wake.set()
        elif name in ("FIN", "REQ", "TOUCH") and params:
            message = self.in_flight.get(params[0].encode())
            if message is None:
                self.error(f"E_{name}_FAILED", f"{name} {params[0]} failed ID not in flight")
                return
            if name != "TOUCH":
                del self.in_flight[message.id]
            if name == "REQ" and self.channel is not None:
                self.channel.queue.append(message)
            self.wake.set()
        elif name == "CLS":
            self.respond(b"CLOSE_WAIT")
        elif name == "AUTH":
            self.error("E_AUTH_DISABLED", "AUTH disabled", fatal=True)
        else:
            self.error("E_INVALID", f"invalid command {name}", fatal=True)

    def identify(self, body: bytes) -> None:
        try:
            fields = json.loads(body)
        except ValueError:
            self.error("E_BAD_BODY", "IDENTIFY failed to decode JSON body", fatal=True)
            return
        probe = self.first_command and body == b"{}"  # the suite's liveness probe: always answered honestly
        if not isinstance(fields, dict):
            self.error("E_BAD_BODY", "IDENTIFY failed to decode JSON body", fatal=True)
            return
        if not fields.get("feature_negotiation"):
            if probe:
                self.frame(wire.FRAME_RESPONSE, b"OK")
            else:
                self.respond(b"OK")
            return
        response = {
            "max_rdy_count": 2500, "version": "1.3.0", "max_msg_timeout": 900000,
            "msg_timeout": fields.get("msg_timeout") or 60000, "tls_v1": False,
            "deflate": fields.get("deflate") is True, "deflate_level": fields.get("deflate_level") or 6,
            "max_deflate_level": 6, "snappy": fields.get("snappy") is True and fields.get("deflate") is not True,
            "sample_rate": fields.get("sample_rate") or 0, "auth_required": False,
            "output_buffer_size": fields.get("output_buffer_size") or 16384,
            "output_buffer_timeout": fields.get("output_buffer_timeout") or 250,
        }
        liar = self.liar
        garbage_layer = None
        if liar.lies("bad-upgrade"):
            garbage_layer = liar.pick(["tls_v1", "deflate", "snappy"])
            response.update({"tls_v1": False, "deflate": False, "snappy": False, garbage_layer: True})
        encoded = json.dumps(response).encode()
        if liar.lies("identify-types"):
            encoded = json.dumps(self.wrong_types(response)).encode().replace(b'"__inf__"', b"1e309")
        elif liar.lies("bad-json"):
            encoded = liar.pick([encoded[:liar.rng.randrange(1, len(encoded))],
                                 encoded[:-1] + b', "padding": "' + b"x" * (2 * 1024 * 1024) + b'"}',
                                 b"[" + encoded + b"]", b"null", b"{}", b'{"max_rdy_count": 25', b"{\xff\xfe}"])
        self.frame(wire.FRAME_RESPONSE, encoded)
        layers = wire.upgrades(encoded)
        if garbage_layer is not None and layers:
            self.write(os.urandom(liar.pick([1, 16, 200])) if liar.rng.random() < 0.7 else wire.encode_frame(
                wire.FRAME_RESPONSE, b"OK"))  # garbage, or the OK left plain where the layer was due
            self.closing = liar.rng.random() < 0.5
            self.commands.take_trailing_data()
            return
        if "tls_v1" in layers:  # no certificate here: an agreed TLS layer is garbage
            self.write(os.urandom(32))
            self.closing = True
            return
        if "deflate" in layers:
            level = response.get("deflate_level") if isinstance(response, dict) else 6
            self.inflate, self.compress = wire.DeflateStreamDecoder(), wire.DeflateStreamEncoder(
                level if type(level) is int and 1 <= level <= 9 else 6)
        elif "snappy" in layers:
            self.inflate, self.compress = wire.SnappyStreamDecoder(), wire.SnappyStreamEncoder()
        trailing = self.commands.take_trailing_data()
        if layers:
            self.respond(b"OK")
        if trailing and self.inflate:
            self.commands = wire.CommandDecoder()
            for command in self.commands.feed(self.inflate.feed(trailing)):
                self.answer(command)

    def wrong_types(self, response: dict):
        liar = self.liar
        key = liar.pick(sorted(response))
        damaged = dict(response)
        if key == "deflate_level" or liar.rng.random() < 0.3:
            key = "deflate_level"
            damaged["deflate"] = True
        damaged[key] = liar.pick([-5, "x", None, "__inf__", [], {}, "2500", True, 10 ** 30, -1])
        if liar.rng.random() < 0.3:
            damaged.pop(liar.pick(sorted(damaged)), None)
        return liar.pick([damaged, damaged, [damaged], list(damaged.values())])


class HostileBroker:
    """The fake nsqd on two loopback ports, served from the running event loop; ``start`` then ``stop``."""

    def __init__(self, plan: HostilePlan):
        self.plan = plan
        self.state = _State()
        self.started = time.time()
        self.connections = 0
        self._servers: list[asyncio.base_events.Server] = []
        self._registrations: list[asyncio.Task] = []
        self.tcp_address: tuple[str, int] = ("127.0.0.1", 0)
        self.http_address: tuple[str, int] = ("127.0.0.1", 0)

    def _liar(self) -> Liar:
        self.connections += 1
        return Liar(self.plan, random.Random(self.plan.seed * 1_000_003 + self.connections))

    async def start(self) -> HostileBroker:
        tcp = await asyncio.start_server(self._tcp, "127.0.0.1", 0)
        http = await asyncio.start_server(self._http, "127.0.0.1", 0)
        self._servers = [tcp, http]
        self.tcp_address = tcp.sockets[0].getsockname()[:2]
        self.http_address = http.sockets[0].getsockname()[:2]
        return self

    def register_with(self, addresses: list[str]) -> None:
        """nsqd's lookup loop, hostile too: a connection to each nsqlookupd, IDENTIFY, REGISTERs, PINGs."""
        for task in self._registrations:
            task.cancel()
        self._registrations = [asyncio.get_running_loop().create_task(self._register(address))
                               for address in addresses]

    async def _register(self, address: str) -> None:
        liar = self._liar()
        host, _, port = address.rpartition(":")
        try:
            reader, writer = await asyncio.open_connection(host, int(port))
        except (OSError, ValueError):
            return
        identify = json.dumps({"broadcast_address": "127.0.0.1", "hostname": "hostile", "tcp_port":
                               self.tcp_address[1], "http_port": self.http_address[1], "version": "1.3.0"}).encode()
        if liar.lies("bad-json") or liar.lies("identify-types"):
            identify = liar.pick([b"[1, 2]", b'"x"', b"null", identify[:10], b"\xff\xfe", b"{}"])
        registered: set[tuple[str, ...]] = set()
        try:
            writer.write(b"  V1IDENTIFY\n" + struct.pack(">I", len(identify)) + identify)
            while True:
                now = {(topic.name,) for topic in self.state.topics.values()} | {
                    (topic.name, channel) for topic in self.state.topics.values() for channel in topic.channels}
                for key in sorted(now - registered):
                    writer.write(b"REGISTER " + " ".join(key).encode() + b"\n")
                for key in sorted(registered - now, reverse=True):
                    writer.write(b"UNREGISTER " + " ".join(key).encode() + b"\n")
                registered = now
                if liar.lies("garbage-frame"):
                    writer.write(liar.pick([os.urandom(12) + b"\n", b"\xff\xfe REGISTER\n",
                                            b"IDENTIFY\n\xff\xff\xff\xff"]))
                if liar.lies("close"):
                    return
                writer.write(b"PING\n")
                await writer.drain()
                await asyncio.sleep(0.5)
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        for task in self._registrations:
            task.cancel()
        for server in self._servers:
            server.close()
        for server in self._servers:
            server.close_clients() if hasattr(server, "close_clients") else None
            await server.wait_closed()

    async def _tcp(self, reader, writer) -> None:
        await _TcpSession(self, reader, writer, self._liar()).run()

    async def _http(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
            lines = head.decode("latin-1").split("\r\n")
            method, target = (lines[0].split(" ") + ["", ""])[:2]
            headers = {line.split(":", 1)[0].strip().lower(): line.split(":", 1)[1].strip()
                       for line in lines[1:] if ":" in line}
            length = int(headers.get("content-length", "0") or 0)
            body = await asyncio.wait_for(reader.readexactly(min(length, 8 * 1024 * 1024)), 30)
            probe = headers.get("host") == "target" and target == "/ping"
            writer.write(HttpSession(self, self._liar()).answer(method, target, body, probe))
            await writer.drain()
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            writer.close()


async def serve_forever(plan: HostilePlan) -> None:
    """``python -m conformance.selftest.hostile_broker SEED``: the broker on its own, for a look by hand."""
    broker = await HostileBroker(plan).start()
    print("hostile nsqd: TCP %s:%d HTTP %s:%d (%s)" % (*broker.tcp_address, *broker.http_address, plan.describe()),
          flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    import sys

    asyncio.run(serve_forever(HostilePlan(frozenset(HOSTILITIES), int(sys.argv[1]) if len(sys.argv) > 1 else 0)))
