"""nsqlookupd's TCP protocol "  V1" (nsqlookupd/lookup_protocol_v1.go; the L-TCP-* items of
conformance/spec/nsqlookupd.toml): lines of a command and space-separated parameters; IDENTIFY followed by a 4-byte
size and a JSON body. Every reply is a 4-byte big-endian size and the data, with no frame type (L-TCP-02); every error
is fatal: its text is the reply, then the connection closes (L-TCP-21), and the producer's registrations go with it
(L-TCP-13).

Memory stays bounded whatever a client sends: a line keeps its first _MAX_LINE bytes (the rest is read and
dropped up to the newline), an IDENTIFY body its first _MAX_BODY. nsqlookupd keeps both whole, and a negative
IDENTIFY size panics it; here that size is a body that cannot be read."""
from __future__ import annotations

import logging
import socket
import struct
import time

from ..http_router import go_json
from ..identify import go_unmarshal
from ..wire import is_valid_name
from .options import VERSION
from .registration_db import PeerInfo, Producer, Registration, RegistrationDB

log = logging.getLogger("nsqlookupd")

MAGIC_V1 = b"  V1"
_SIZE = struct.Struct(">i")
_MAX_LINE = 64 * 1024
_MAX_BODY = 1024 * 1024
_PEER_INFO_FIELDS = {"remote_address": str, "hostname": str, "broadcast_address": str, "tcp_port": int,
                     "http_port": int, "version": str, "topology_zone": str, "topology_region": str}
# strings.TrimSpace: unicode.IsSpace, which is not str.strip's set (that one also takes \x1c..\x1f).
_GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a" \
            "\u2028\u2029\u202f\u205f\u3000"


class ClientError(Exception):
    """nsqlookupd's FatalClientErr: `code` and text are the reply; the connection then closes (L-TCP-21)."""

    def __init__(self, code: str, text: str, cause: str = ""):
        super().__init__(f"{code} {text}")
        self.cause = cause


def send_response(sock: socket.socket, data: bytes) -> None:
    sock.sendall(_SIZE.pack(len(data)) + data)  # L-TCP-02


class ClientV1:
    """One connection: its socket, its buffered input and, once it IDENTIFYed, the producer's PeerInfo."""

    def __init__(self, sock: socket.socket, address: str):
        self.sock = sock
        self.address = address
        self.reader = sock.makefile("rb")
        self.peer_info: PeerInfo | None = None

    def __str__(self) -> str:
        return self.address

    def read_line(self) -> bytes | None:
        """The next line without its newline, its first _MAX_LINE bytes; None at the end of the input."""
        line = self.reader.readline(_MAX_LINE)
        if not line.endswith(b"\n"):
            if len(line) < _MAX_LINE:
                return None  # Go's ReadString: a last line without its newline is an error, not a command
            rest = line
            while rest and not rest.endswith(b"\n"):
                rest = self.reader.readline(_MAX_LINE)
            if not rest:
                return None
        return line.rstrip(b"\n")

    def read_exactly(self, size: int, keep: int) -> tuple[bytes, bool] | None:
        """`size` bytes, of which the first `keep` are returned with whether they are all; None at an early end."""
        kept = self.reader.read(min(size, keep))
        if len(kept) < min(size, keep):
            return None
        left = size - len(kept)
        while left:
            dropped = self.reader.read(min(left, 65536))
            if not dropped:
                return None
            left -= len(dropped)
        return kept, size <= keep


class LookupProtocolV1:
    def __init__(self, db: RegistrationDB, options, tcp_port: int, http_port: int):
        self.db = db
        self.options = options
        self.tcp_port = tcp_port
        self.http_port = http_port

    def io_loop(self, client: ClientV1) -> None:
        try:
            while True:
                line = client.read_line()
                if line is None:
                    break
                params = line.decode("utf-8", "surrogateescape").strip(_GO_SPACE).split(" ")  # L-TCP-20
                try:
                    response = self.exec(client, params)
                except ClientError as error:
                    cause = f" - {error.cause}" if error.cause else ""
                    log.error("[%s] - %s%s", client, error, cause)
                    send_response(client.sock, str(error).encode("utf-8", "surrogateescape"))
                    break  # L-TCP-21: every V1 error is fatal
                send_response(client.sock, response)
        except OSError as error:
            log.error("client(%s) - %s", client, error)
        log.info("PROTOCOL(V1): [%s] exiting ioloop", client)
        if client.peer_info is not None:  # L-TCP-13
            for registration in self.db.lookup_registrations(client.peer_info.id):
                removed, _ = self.db.remove_producer(registration, client.peer_info.id)
                if removed:
                    log.info("DB: client(%s) UNREGISTER category:%s key:%s subkey:%s", client, *registration)

    def exec(self, client: ClientV1, params: list[str]) -> bytes:
        command = params[0]
        if command == "PING":
            return self.ping(client)
        if command == "IDENTIFY":
            return self.identify(client)
        if command == "REGISTER":
            return self.register(client, params[1:])
        if command == "UNREGISTER":
            return self.unregister(client, params[1:])
        raise ClientError("E_INVALID", f"invalid command {command}")  # L-TCP-10

    def ping(self, client: ClientV1) -> bytes:
        """L-TCP-09: answered before IDENTIFY too; after it, the producer counts as active again (L-TCP-19)."""
        if client.peer_info is not None:
            now = time.time_ns()
            log.info("CLIENT(%s): pinged (last ping %.3fs)", client.peer_info.id,
                     (now - client.peer_info.last_update) / 1e9)
            client.peer_info.last_update = now
        return b"OK"

    def identify(self, client: ClientV1) -> bytes:
        if client.peer_info is not None:
            raise ClientError("E_INVALID", "cannot IDENTIFY again")  # L-TCP-06
        size_bytes = client.read_exactly(4, 4)
        if size_bytes is None:
            raise ClientError("E_BAD_BODY", "IDENTIFY failed to read body size", "EOF")  # L-TCP-07
        size = _SIZE.unpack(size_bytes[0])[0]
        body = client.read_exactly(size, _MAX_BODY) if size >= 0 else None
        if body is None:
            raise ClientError("E_BAD_BODY", "IDENTIFY failed to read body", "unexpected EOF")
        data, whole = body
        fields = go_unmarshal(data, _PEER_INFO_FIELDS) if whole else None
        if fields is None:
            raise ClientError("E_BAD_BODY", "IDENTIFY failed to decode JSON body")
        fields["remote_address"] = client.address  # the body's own is overwritten
        if not fields["broadcast_address"] or not fields["tcp_port"] or not fields["http_port"] \
                or not fields["version"]:
            raise ClientError("E_BAD_BODY", "IDENTIFY missing fields")
        peer_info = PeerInfo(id=client.address, **fields)
        log.info("CLIENT(%s): IDENTIFY Address:%s TCP:%d HTTP:%d Version:%s", client, peer_info.broadcast_address,
                 peer_info.tcp_port, peer_info.http_port, peer_info.version)
        client.peer_info = peer_info
        if self.db.add_producer(Registration("client", "", ""), Producer(peer_info)):
            log.info("DB: client(%s) REGISTER category:client key: subkey:", client)
        return go_json({  # L-TCP-05: json.Marshal of a map, keys sorted
            "broadcast_address": self.options.broadcast_address,
            "hostname": socket.gethostname(),
            "http_port": self.http_port,
            "tcp_port": self.tcp_port,
            "version": VERSION,
        })

    def register(self, client: ClientV1, params: list[str]) -> bytes:
        """L-TCP-12: a channel's REGISTER registers its topic too."""
        peer_info = self._identified(client)
        topic, channel = _topic_channel("REGISTER", params)
        if channel and self.db.add_producer(Registration("channel", topic, channel), Producer(peer_info)):
            log.info("DB: client(%s) REGISTER category:channel key:%s subkey:%s", client, topic, channel)
        if self.db.add_producer(Registration("topic", topic, ""), Producer(peer_info)):
            log.info("DB: client(%s) REGISTER category:topic key:%s subkey:", client, topic)
        return b"OK"

    def unregister(self, client: ClientV1, params: list[str]) -> bytes:
        """L-TCP-14, L-TCP-15, L-TCP-16, L-TCP-17: the names stay registered without this producer, except ephemeral
        ones left empty."""
        peer_info = self._identified(client)
        topic, channel = _topic_channel("UNREGISTER", params)
        if channel:
            registration = Registration("channel", topic, channel)
            removed, left = self.db.remove_producer(registration, peer_info.id)
            if removed:
                log.info("DB: client(%s) UNREGISTER category:channel key:%s subkey:%s", client, topic, channel)
            if left == 0 and channel.endswith("#ephemeral"):
                self.db.remove_registration(registration)
            return b"OK"
        for registration in self.db.find_registrations("channel", topic, "*"):  # L-TCP-15
            removed, _ = self.db.remove_producer(registration, peer_info.id)
            if removed:
                log.warning("client(%s) unexpected UNREGISTER category:channel key:%s subkey:%s", client, topic,
                            registration.subkey)
        registration = Registration("topic", topic, "")
        removed, left = self.db.remove_producer(registration, peer_info.id)
        if removed:
            log.info("DB: client(%s) UNREGISTER category:topic key:%s subkey:", client, topic)
        if left == 0 and topic.endswith("#ephemeral"):  # L-TCP-16
            self.db.remove_registration(registration)
        return b"OK"

    @staticmethod
    def _identified(client: ClientV1) -> PeerInfo:
        if client.peer_info is None:
            raise ClientError("E_INVALID", "client must IDENTIFY")  # L-TCP-08
        return client.peer_info


def _topic_channel(command: str, params: list[str]) -> tuple[str, str]:
    """L-TCP-11: the topic, then an optional channel (further parameters are ignored), both valid names."""
    if not params:
        raise ClientError("E_INVALID", f"{command} insufficient number of params")
    topic = params[0]
    channel = params[1] if len(params) >= 2 else ""
    if not _valid_name(topic):
        raise ClientError("E_BAD_TOPIC", f"{command} topic name '{topic}' is not valid")
    if channel and not _valid_name(channel):
        raise ClientError("E_BAD_CHANNEL", f"{command} channel name '{channel}' is not valid")
    return topic, channel


def _valid_name(name: str) -> bool:
    return is_valid_name(name.encode("utf-8", "surrogateescape"))
