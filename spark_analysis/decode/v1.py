"""nsqlookupd's connections in a capture: what producers (nsqds) tell a lookupd over the TCP protocol "  V1"
(R-* and L-TCP-* in conformance/spec/), through ``nsq_protocol.wire_v1``.

Its walks (``walks``) turn a connection's windows into rows of ``EVENT_SCHEMA``: a ``command`` row per IDENTIFY
(``identify``), REGISTER, UNREGISTER (``topic``, ``channel``, ``producer``: ``broadcast_address:tcp_port`` of the
IDENTIFY) and PING, a ``frame`` row per reply (``response`` or ``error`` with its code: L-TCP-02); decode/v2.py pairs
each command with its reply and adds the connection row (``lookupd``, with the producer). A connection is nsqlookupd's
when it starts with the magic "  V1", or, caught mid-stream, when it goes to nsqlookupd's port (4160 by default).
"""

from __future__ import annotations

import re

from nsq_protocol import wire_v1
from nsq_protocol.wire import ProtocolViolation
from spark_analysis.decode.events import CommandWalk, StreamWalk, first_bytes
from spark_analysis.decode.identify import identify_struct
from spark_analysis.decode.kinds import Direction, Kind
from spark_analysis.read.reassembly import Connection

LOOKUPD_PORTS = frozenset({4160})  # nsqlookupd's default --tcp-address port
_COMMAND_START = re.compile(rb"(?:^|(?<=\n))(?:IDENTIFY\n|(?:REGISTER|UNREGISTER) |PING\n)")
_REPLY_START = re.compile(rb"\x00\x00\x00\x02OK|\x00\x00\x00[\x05-\x7f]E_[A-Z_]+ ")


def is_lookupd(conn: Connection) -> bool:
    start = first_bytes(conn.c2s, 4)
    return start == wire_v1.MAGIC_V1 or (not start and conn.server[1] in LOOKUPD_PORTS)


def walks(conn: Connection) -> list[StreamWalk]:
    """The replies' walk, then the commands' (``producer``, ``identify``): decode.ConnectionDecoder drives them."""
    return [_Replies(conn.s2c), _Commands(conn.c2s)]


class _Commands(CommandWalk):
    command_start = _COMMAND_START

    def __init__(self, stream):
        super().__init__(stream)
        self.decoder = wire_v1.V1CommandDecoder()
        self.producer: str | None = None  # broadcast_address:tcp_port, as nsqlookupd lists it (L-HTTP lookup)
        self.identify: dict | None = None  # the last IDENTIFY, as identify.IDENTIFY_TYPE

    def _commands(self, commands):
        for command in commands.commands():
            name = command.name.decode("latin-1")
            params = [param.decode("latin-1") for param in command.params]
            if name == "IDENTIFY":
                self.identify = identify_struct(command.body)
                if self.producer is None and self.identify["broadcast_address"] is not None:
                    self.producer = f"{self.identify['broadcast_address']}:{self.identify['tcp_port']}"
                self.rows.add(self.ts_ns, self.direction, Kind.COMMAND, name, identify=self.identify)
            elif name in ("REGISTER", "UNREGISTER"):
                self.rows.add(self.ts_ns, self.direction, Kind.COMMAND, name, topic=params[0] if params else None,
                              channel=params[1] if len(params) > 1 else None, producer=self.producer)
            else:
                self.rows.add(self.ts_ns, self.direction, Kind.COMMAND, name, arguments=" ".join(params) or None)


class _Replies(StreamWalk):
    direction = Direction.SERVER

    def __init__(self, stream):
        super().__init__(stream)
        self.decoder = wire_v1.V1ReplyDecoder()

    def reset(self):
        self.decoder = wire_v1.V1ReplyDecoder()

    def find_start(self, buffer, start: int) -> int:
        match = _REPLY_START.search(buffer, start)
        return match.start() if match else -1

    def feed(self, data: bytes):
        try:
            replies = self.decoder.feed(data)
        except ProtocolViolation as exc:
            self._replies(exc.decoded)
            self.violation("reply", exc)
            return
        self._replies(replies)

    def _replies(self, replies):
        for reply in replies:
            text = reply.decode("utf-8", "replace")
            if wire_v1.is_error(reply):  # L-TCP-21: the code, then the text; the connection then ends
                self.rows.add(self.ts_ns, self.direction, Kind.FRAME, "error", code=text.split(" ", 1)[0], text=text)
            else:
                self.rows.add(self.ts_ns, self.direction, Kind.FRAME, "response", text=text)
