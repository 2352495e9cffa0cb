"""The model client: a small NSQ client written to do what the client cases require, on nsq_protocol.wire, behind
the same driver contract as the libraries' drivers. Every case PASSes for it, which shows that a case's FAIL for a
library is the library's doing, and the selftest breaks its output to show that each case catches a fault."""
import asyncio
import itertools
import json
import signal
import socket
import ssl
from collections import deque
from urllib.parse import quote

from driver_contract import emit, env, listed

from nsq_protocol import wire

NON_FATAL = (b"E_FIN_FAILED", b"E_REQ_FAILED", b"E_TOUCH_FAILED")  # C-23
# seconds: the first reconnect delay and backoff, each doubled while failures go on, up to the bound (the backoff's:
# unless NSQC_MAX_BACKOFF_MS says otherwise)
RECONNECT_AFTER, MAX_RECONNECT_AFTER, BACKOFF, MAX_BACKOFF, REDISTRIBUTE_EVERY = 0.5, 8.0, 0.5, 4.0, 2.0
# the layers the client may ask for (ID-30), each turned on by its order ("1")
ASKED = {layer for layer, order in (("tls_v1", "NSQC_TLS"), ("snappy", "NSQC_SNAPPY"), ("deflate", "NSQC_DEFLATE"))
         if env.get(order) == "1"}


class Connection:
    def __init__(self, client, address: str, discovered: bool = False):
        self.client, self.address = client, address
        self.discovered = discovered  # found on /lookup: not reconnected to, the next /lookup says if it is back
        self.writer: asyncio.StreamWriter | None = None
        self.responses: asyncio.Queue = asyncio.Queue()  # answers to PUB, MPUB, DPUB, SUB, CLS in order
        self.rdy = 0
        self.connected = asyncio.Event()

    async def run(self):
        failed = 0  # sessions in a row that ended before they were ready
        while not self.client.stopping:
            try:
                await self._session()
            except (OSError, asyncio.IncompleteReadError, wire.ProtocolViolation):
                pass
            failed = 0 if self.connected.is_set() else failed + 1
            self.connected.clear()
            self.responses.put_nowait(None)
            if self.discovered:
                self.client.connections.remove(self)
                return
            await asyncio.sleep(min(RECONNECT_AFTER * 2 ** max(failed - 1, 0), MAX_RECONNECT_AFTER))

    async def _session(self):
        host, port = self.address.split(":")
        self.reader, self.writer = await asyncio.open_connection(host, int(port))
        self.rdy, self._inflate, self._compress, self._pending = 0, None, None, deque()
        self._decoder = wire.FrameDecoder(pause_at_upgrade=True)
        identify = {"client_id": socket.gethostname(), "hostname": socket.getfqdn(), "user_agent": "nsqc-model/1.0",
                    "feature_negotiation": True, "heartbeat_interval": int(env.get("NSQC_HEARTBEAT_INTERVAL_MS",
                                                                                   "30000")),
                    **{layer: layer in ASKED for layer in ("tls_v1", "snappy", "deflate")}}
        self.writer.write(wire.MAGIC_V2 + wire.encode_command("IDENTIFY", body=wire.identify_body(identify)))
        try:
            answer = await self._frame()
            if answer.frame_type != wire.FRAME_RESPONSE or not await self._negotiate(answer.data, host):
                return
            if self.client.consumer:
                self.send(wire.encode_command("SUB", env["NSQC_TOPIC"], env["NSQC_CHANNEL"]))
            self.connected.set()
            await self._read()
        finally:
            self.writer.close()

    async def _negotiate(self, answer: bytes, host: str) -> bool:
        """The layers the IDENTIFY answer turns on (ID-30: TLS, then snappy or deflate, an OK through each), then
        AUTH when the answer requires it. A layer the client did not ask for is refused: False, the connection
        ends (NSQC-NEG-002)."""
        layers = set(wire.upgrades(answer))
        if not layers <= ASKED:
            return False
        if "tls_v1" in layers:
            self._decoder.take_trailing_data()  # nothing: the broker sends no more until the handshake
            await self.writer.start_tls(ssl.create_default_context(cafile=env["NSQC_TLS_CA_FILE"]),
                                        server_hostname=host)
            await self._ok()
        if layers & {"snappy", "deflate"}:
            self._compress, self._inflate = (wire.SnappyStreamEncoder(), wire.SnappyStreamDecoder()) \
                if "snappy" in layers else (wire.DeflateStreamEncoder(), wire.DeflateStreamDecoder())
            self._pending.extend(self._decoder.feed(self._inflate.feed(self._decoder.take_trailing_data())))
            await self._ok()
        if answer[:1] == b"{" and json.loads(answer).get("auth_required"):
            self.send(wire.encode_command("AUTH", body=env.get("NSQC_AUTH_SECRET", "").encode()))
            return (await self._frame()).frame_type == wire.FRAME_RESPONSE
        return True

    async def _ok(self):
        frame = await self._frame()
        if frame.data != b"OK":
            raise wire.ProtocolViolation(f"upgrade answered {frame.describe()}")

    async def _frame(self):
        while not self._pending:
            data = await self.reader.read(65536)
            if not data:
                raise asyncio.IncompleteReadError(b"", None)
            self._pending.extend(self._decoder.feed(self._inflate.feed(data) if self._inflate else data))
        return self._pending.popleft()

    async def _read(self):
        while True:
            frame = await self._frame()
            if frame.is_heartbeat:
                self.send(wire.encode_command("NOP"))  # C-26
            elif frame.frame_type == wire.FRAME_MESSAGE:
                self.client.received(self, frame)
            elif frame.frame_type == wire.FRAME_ERROR and frame.error_code.encode() in NON_FATAL:
                continue
            elif frame.frame_type == wire.FRAME_RESPONSE and frame.data == b"OK" and self.client.consumer \
                    and not self.rdy:
                self.set_rdy(self.client.share(self))  # SUB's OK
            else:
                self.responses.put_nowait(frame)

    def send(self, data: bytes):
        if self.writer and not self.writer.is_closing():
            self.writer.write(self._compress.encode(data) if self._compress else data)

    def set_rdy(self, count: int):
        self.rdy = count
        self.send(wire.encode_command("RDY", count))


class Client:
    def __init__(self):
        self.consumer = env["NSQC_ROLE"] == "consumer"
        self.stopping = False
        self.connections = [Connection(self, address) for address in listed("NSQC_NSQD_TCP_ADDRESSES")]
        self.lookupds = listed("NSQC_LOOKUPD_HTTP_ADDRESSES")
        self.poll_interval = int(env.get("NSQC_LOOKUPD_POLL_INTERVAL_MS", "60000")) / 1000
        self.tasks = set()
        self.max_in_flight = int(env.get("NSQC_MAX_IN_FLIGHT", "1"))
        self.max_attempts = int(env.get("NSQC_MAX_ATTEMPTS", "0"))
        self.max_backoff = int(env.get("NSQC_MAX_BACKOFF_MS", MAX_BACKOFF * 1000)) / 1000
        self.backing_off = False
        self.failures = 0  # handler failures in a row: the backoff doubles with each, a success ends it

    def share(self, connection) -> int:
        """RDY spread within max_in_flight: an equal share each, 1 for the first ones when there are too few."""
        count, index = len(self.connections), self.connections.index(connection)
        return max(self.max_in_flight // count, 1 if index < self.max_in_flight else 0)

    def received(self, connection, frame):
        message_id = frame.message_id
        if self.max_attempts and frame.attempts > self.max_attempts:
            emit("discarded", id=message_id.decode(), attempts=frame.attempts)
            connection.send(wire.encode_command("FIN", message_id))
            return
        emit("message", id=message_id.decode(), attempts=frame.attempts, body=frame.body.decode())
        asyncio.get_running_loop().create_task(self.handle(connection, message_id, json.loads(frame.body)))

    async def handle(self, connection, message_id, order):
        action = order["do"]
        if action == "fin":
            connection.send(wire.encode_command("FIN", message_id))
            if self.failures:
                self.failures = 0
                for each in self.connections:  # recovered: every connection gets its share again
                    each.set_rdy(self.share(each))
        elif action == "req":
            connection.send(wire.encode_command("REQ", message_id, order["delay_ms"]))
        elif action == "fail":
            connection.send(wire.encode_command("REQ", message_id, 1000))
            await self.back_off()
        elif action == "touch":
            for _ in range(order["times"]):
                await asyncio.sleep(order["every_ms"] / 1000)
                connection.send(wire.encode_command("TOUCH", message_id))
            await asyncio.sleep(order["every_ms"] / 1000)
            connection.send(wire.encode_command("FIN", message_id))

    def connect(self, connection):
        task = asyncio.get_running_loop().create_task(connection.run())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def discover(self):
        """Poll the lookupds one after the other (a lookupd that is down only costs its turn) and connect to every
        producer /lookup lists that the consumer is not connected to."""
        for number in itertools.count():
            try:
                producers = await lookup(self.lookupds[number % len(self.lookupds)], env["NSQC_TOPIC"])
            except (OSError, ValueError, KeyError, asyncio.IncompleteReadError):
                producers = []
            for address in producers:
                if address not in {connection.address for connection in self.connections}:
                    connection = Connection(self, address, discovered=True)
                    self.connections.append(connection)
                    self.connect(connection)
            await asyncio.sleep(self.poll_interval)

    async def back_off(self):
        """RDY 0 everywhere for a backoff that doubles with each failure in a row, then RDY 1 on one connection
        to test the water; the full shares come back after a success (handle, "fin")."""
        self.failures += 1
        if self.backing_off:
            return
        self.backing_off = True
        for connection in self.connections:
            connection.set_rdy(0)
        await asyncio.sleep(min(BACKOFF * 2 ** (self.failures - 1), self.max_backoff))
        self.connections[0].set_rdy(1)
        self.backing_off = False

    async def redistribute(self):
        """More connections than max_in_flight: every few seconds one that holds RDY gives it up (RDY 0 first,
        so that the sum never exceeds max_in_flight) to one that has none."""
        while True:
            await asyncio.sleep(REDISTRIBUTE_EVERY)
            holding = [c for c in self.connections if c.rdy > 0 and c.connected.is_set()]
            starved = [c for c in self.connections if c.rdy == 0 and c.connected.is_set()]
            if len(self.connections) > self.max_in_flight and holding and starved and not self.failures:
                holding[0].set_rdy(0)
                starved[0].set_rdy(1)
                self.connections.append(self.connections.pop(self.connections.index(holding[0])))

    async def publish(self):
        connection = self.connections[0]
        await connection.connected.wait()
        topic = env["NSQC_TOPIC"]
        for operation in json.loads(env.get("NSQC_PUBLISH", "[]")):
            op = operation["op"]
            if op == "pub":
                connection.send(wire.encode_command("PUB", topic, body=operation["body"].encode()))
            elif op == "mpub":
                body = wire.mpub_body([body.encode() for body in operation["bodies"]])
                connection.send(wire.encode_command("MPUB", topic, body=body))
            else:
                connection.send(wire.encode_command("DPUB", topic, operation["defer_ms"],
                                                    body=operation["body"].encode()))
            answer = await connection.responses.get()
            ok = answer is not None and answer.frame_type == wire.FRAME_RESPONSE
            emit("published", op=op, ok=ok, error="" if ok else (answer.describe() if answer else "closed"))

    async def stop(self):
        self.stopping = True
        for connection in list(self.connections):
            if self.consumer and connection.connected.is_set():
                connection.send(wire.encode_command("CLS"))  # P-CLS-02: then wait for CLOSE_WAIT
                try:
                    await asyncio.wait_for(connection.responses.get(), 2.0)
                except TimeoutError:
                    pass
            if connection.writer:
                connection.writer.close()


async def lookup(lookupd: str, topic: str) -> list[str]:
    """GET /lookup?topic=: the producers' host:port (an answer other than 200 lists none)."""
    host, port = lookupd.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(f"GET /lookup?topic={quote(topic)} HTTP/1.0\r\nHost: {lookupd}\r\n"
                 "Accept: application/vnd.nsq; version=1.0\r\n\r\n".encode())
    answer = await reader.read()
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    if head.split(b" ")[1:2] != [b"200"]:
        return []
    return [f"{producer['broadcast_address']}:{producer['tcp_port']}" for producer in json.loads(body)["producers"]]


async def main():
    client = Client()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    for connection in client.connections:
        client.connect(connection)
    tasks = [asyncio.create_task(client.discover())] if client.lookupds else []
    if client.consumer:
        tasks.append(asyncio.create_task(client.redistribute()))
    if not client.consumer:
        tasks.append(asyncio.create_task(client.publish()))
    await stop.wait()
    await client.stop()
    for task in [*tasks, *client.tasks]:
        task.cancel()
    emit("stopped")


asyncio.run(main())
