"""Hostile captures: connections of a broken broker and a broken client, drawn by hypothesis and written as pcap.

A connection is a list of pieces, each sent in one direction at its own time: valid commands and frames, invalid
ones (unknown verbs, missing parameters, bodies of a lying size), error texts under any frame type (the broker bug
of issue 32: `E_BAD_TOPIC ...` as a response frame), responses where errors are due, segments the capture lost,
garbage, and a last frame or command cut short. It may start mid-connection (no SYN, no magic) or negotiate
compression and then send garbage through the new layer. Each piece remembers the bytes no decoder can make sense
of (``undecodable``), so that a test can check they are accounted for in the ``errors`` table.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, replace

from hypothesis import strategies as st

from nsq_protocol import wire
from spark_analysis.generate.capture import EPOCH_NS, MS, Capture, Connection

CLIENT, SERVER = "c2s", "s2c"
TOPICS = st.sampled_from(["t", "orders", "", "bad topic!", "x" * 70, None])
ERROR_CODES = st.sampled_from(["E_INVALID", "E_BAD_TOPIC", "E_BAD_CHANNEL", "E_BAD_BODY", "E_BAD_MESSAGE",
                               "E_PUB_FAILED", "E_FIN_FAILED", "E_REQ_FAILED", "E_TOUCH_FAILED", "E_AUTH_FAILED",
                               "E_UNAUTHORIZED", "", "E_", "NOT_AN_ERROR"])
# Bytes that never make a frame header (its type field has three zero bytes) nor a command line (no newline): a
# decoder can only skip them.
GARBAGE = st.binary(min_size=1, max_size=300).map(lambda data: bytes(0x80 | byte for byte in data))
MESSAGE_ID = st.one_of(st.just(b"0123456789abcdef"), st.binary(min_size=16, max_size=16))
IDENTIFY_BODIES = st.sampled_from([b"{}", b"not json", b'{"msg_timeout": "x", "heartbeat_interval": "y"}',
                                  b'{"msg_timeout": 1000, "heartbeat_interval": -1}', b"[1, 2]", b'{"client_id": null}',
                                  b'{"feature_negotiation": true, "output_buffer_timeout": null}'])
# nsqd's answer to IDENTIFY, with values of any type (a broken broker's): the layers it agrees to switch the rest
IDENTIFY_RESPONSES = st.fixed_dictionaries({}, optional={
    "msg_timeout": st.sampled_from([1000, -1, "x", None, 10**30, 1.5]),
    "heartbeat_interval": st.sampled_from([1000, -1, 0, "x"]),
    "max_rdy_count": st.sampled_from([2500, 0, "x"]),
    "output_buffer_timeout": st.sampled_from([250, -1, None]),
    "snappy": st.booleans(),
    "deflate": st.booleans(),
    "tls_v1": st.booleans(),
}).map(lambda fields: json.dumps(fields).encode())
VERBS = ["IDENTIFY", "AUTH", "SUB", "PUB", "MPUB", "DPUB", "RDY", "FIN", "REQ", "TOUCH", "CLS", "NOP"]


@dataclass
class Piece:
    direction: str
    data: bytes
    undecodable: int = 0  # of its bytes, how many no decoder can read (garbage after a broken header)
    captured: bool = True  # False: a segment the capture lost (a gap)
    raw: bool = False  # sent past the negotiated compression as is


@dataclass
class HostileConnection:
    pieces: list[Piece]
    handshake: bool = True  # False: the capture starts mid-connection
    close: bool = True
    compressed: str | None = None  # snappy | deflate: negotiated by the first two pieces

    @property
    def captured(self) -> bool:
        """Whether the capture holds any packet of it."""
        return self.handshake or self.close or any(piece.captured and piece.data for piece in self.pieces)

    def undecodable(self, direction: str) -> int:
        return sum(piece.undecodable for piece in self.pieces if piece.direction == direction and piece.captured)


def _param(text: str | None) -> tuple:
    return () if text is None else (text,)


@st.composite
def commands(draw) -> Piece:
    """A command a client may send, valid or not."""
    verb = draw(st.sampled_from(VERBS + ["FOO", ""]))
    topic = draw(TOPICS)
    body = draw(st.binary(max_size=40))
    if verb in ("PUB", "DPUB"):
        params = _param(topic) + (() if verb == "PUB" else (draw(st.sampled_from(["0", "100", "-5", "x", ""])),))
        data = wire.encode_command(verb, *params, body=body)
    elif verb == "MPUB":
        bodies = draw(st.lists(st.binary(max_size=10), max_size=3))
        mpub = struct.pack(">I", draw(st.sampled_from([len(bodies), 0, 9]))) + b"".join(
            struct.pack(">I", len(b)) + b for b in bodies)
        data = wire.encode_command(verb, *_param(topic), body=draw(st.sampled_from([mpub, body])))
    elif verb == "IDENTIFY":
        data = wire.encode_command(verb, body=draw(IDENTIFY_BODIES))
    elif verb == "AUTH":
        data = wire.encode_command(verb, body=body)
    elif verb == "SUB":
        data = wire.encode_command(verb, *_param(topic), *draw(st.sampled_from([(), ("ch",), ("", "extra")])))
    elif verb in ("FIN", "REQ", "TOUCH"):
        msg_id = draw(MESSAGE_ID)
        extra = draw(st.sampled_from([(), ("0",), ("99999999999999999999",), ("x",)]))
        data = wire.encode_command(verb, msg_id, *extra)
    elif verb == "RDY":
        data = wire.encode_command(verb, *draw(st.sampled_from([(), ("",), ("1",), ("-1",), ("2500",), ("a",)])))
    else:
        data = wire.encode_command(verb, *draw(st.lists(st.sampled_from(["a", "", "1"]), max_size=3)))
    if draw(st.booleans()) and data.endswith(b"\n") and verb not in wire.BODY_COMMANDS:
        data = data[:-1] + b"\r\n"  # C-14
    return Piece(CLIENT, data)


@st.composite
def client_garbage(draw) -> Piece:
    """A body command whose size is out of range, then garbage: the command decoder fails there and skips it all."""
    garbage = draw(GARBAGE)
    return Piece(CLIENT, b"PUB t\n" + b"\xff\xff\xff\xff" + garbage, undecodable=4 + len(garbage))


@st.composite
def frames(draw) -> Piece:
    """A frame a broker may send, valid or not: error texts under any frame type, responses where errors are due."""
    frame_type = draw(st.sampled_from([wire.FRAME_RESPONSE, wire.FRAME_ERROR, wire.FRAME_MESSAGE]))
    kind = draw(st.sampled_from(["ok", "heartbeat", "close_wait", "identify", "error", "message", "text"]))
    if kind == "ok":
        data = b"OK"
    elif kind == "heartbeat":
        data = wire.HEARTBEAT
    elif kind == "close_wait":
        data = b"CLOSE_WAIT"
    elif kind == "identify":
        data = draw(IDENTIFY_RESPONSES)
    elif kind == "error":
        code = draw(ERROR_CODES)
        data = f"{code} {draw(st.sampled_from(['', 'PUB topic name must be valid', 'FIN 0123456789abcdef failed']))}"
        data = data.encode()
    elif kind == "message":
        data = wire.encode_message(draw(st.sampled_from([0, -1, 2**62])), draw(st.sampled_from([0, 1, 65535])),
                                   draw(MESSAGE_ID), draw(st.binary(max_size=20)))
    else:
        data = draw(st.binary(max_size=30))
    return Piece(SERVER, wire.encode_frame(frame_type, data))


@st.composite
def server_garbage(draw) -> Piece:
    """A header no frame has (an unknown type, a size out of range), then garbage."""
    header = draw(st.sampled_from([struct.pack(">Ii", 8, 7), struct.pack(">Ii", 2, 0), b"\xff\xff\xff\xff\0\0\0\1"]))
    garbage = draw(GARBAGE)
    return Piece(SERVER, header + garbage, undecodable=len(header) + len(garbage))


@st.composite
def connections(draw) -> HostileConnection:
    pieces = draw(st.lists(st.one_of(commands(), commands(), client_garbage(), frames(), frames(), server_garbage()),
                           max_size=25))
    for piece in pieces:
        if piece.undecodable == 0 and draw(st.integers(0, 9)) == 0:
            piece.captured = False  # the capture lost it: a gap, and a resync after it
    handshake = draw(st.booleans())
    negotiation = draw(st.sampled_from([None, "identify", "snappy", "deflate"])) if handshake else None
    compressed = negotiation if negotiation in ("snappy", "deflate") else None
    if handshake:
        opening = [Piece(CLIENT, wire.MAGIC_V2)]
        if negotiation == "identify":  # whatever the broker answers, what follows is decoded as it says
            opening += [Piece(CLIENT, wire.encode_command("IDENTIFY", body=draw(IDENTIFY_BODIES))),
                        Piece(SERVER, wire.encode_frame(wire.FRAME_RESPONSE, draw(IDENTIFY_RESPONSES)))]
        elif compressed:
            identify = json.dumps({"feature_negotiation": True, compressed: True}).encode()
            response = json.dumps({compressed: True, "max_rdy_count": 2500, "msg_timeout": 60000}).encode()
            opening += [Piece(CLIENT, wire.encode_command("IDENTIFY", body=identify)),
                        Piece(SERVER, wire.encode_frame(wire.FRAME_RESPONSE, response))]
            # nothing is decodable past garbage sent through a compression layer: the rest of the direction is lost
            pieces = [replace(piece, raw=draw(st.integers(0, 4)) == 0) for piece in pieces]
        pieces = opening + pieces
    for direction in (CLIENT, SERVER):
        last = [p for p in pieces if p.direction == direction and p.captured]
        # an MPUB is framed by its count and message sizes (P-MPUB-04): a cut one may still be a whole command
        if last and not last[-1].undecodable and draw(st.integers(0, 3)) == 0 and not compressed \
                and not last[-1].data.startswith(b"MPUB"):
            piece = last[-1]
            piece.data = piece.data[:-draw(st.integers(1, len(piece.data)))]
            piece.undecodable = len(piece.data)  # a frame or command the stream ended inside
            if direction == CLIENT and piece.data.split(b"\n", 1)[0].split(b" ", 1)[0] not in wire.BODY_COMMANDS:
                # but for the lines it still ends (a binary message ID may hold a newline): those are read
                piece.undecodable -= piece.data.rfind(b"\n") + 1
    return HostileConnection(pieces, handshake, draw(st.booleans()), compressed)


def write_pcap(path, conns: list[HostileConnection]) -> None:
    """Each connection on its own client port, its pieces a millisecond apart."""
    capture = Capture(str(path), "pcap")
    for index, hostile in enumerate(conns):
        conn = Connection(capture, f"hostile-{index}", 40000 + index, 1000 + 7 * index)
        ts_ns = EPOCH_NS + index * 1000 * MS
        if hostile.handshake:
            conn.open(ts_ns)
        for step, piece in enumerate(hostile.pieces, start=1):
            conn.send(piece.direction, ts_ns + step * MS, piece.data, captured=piece.captured, raw=piece.raw)
            if hostile.compressed and step == 3:  # after nsqd's answer to IDENTIFY, both ways (ID-30)
                conn.compress(hostile.compressed)
        if hostile.close:
            conn.close(ts_ns + (len(hostile.pieces) + 1) * MS)
    capture.close()
