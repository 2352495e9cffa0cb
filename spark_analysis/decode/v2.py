"""NSQ decoding of reassembled connections into event rows, through ``nsq_protocol.wire``.

One connection in, rows of ``EVENT_SCHEMA`` out: commands (client -> server), frames (server ->
client), one ``publish`` row per published message, gaps, decode errors, and one ``connection`` row.
The server stream is decoded first: its IDENTIFY response says whether both directions switch to
snappy or deflate (ID-30, ID-33, ID-34) or to TLS (reported as opaque bytes).

Resync: after a gap, or when the capture starts mid-connection, decoding restarts at the first
offset that holds a plausible frame (server) or command line (client); skipped bytes are counted
in an ``undecodable_bytes`` error row. A compressed stream cannot be resynchronised: after a gap in
it the rest of that direction is reported as ``compressed_stream_gap``.
"""

from __future__ import annotations

import re
import struct
import zlib
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nsq_protocol import wire
from nsq_protocol.tls_records import TlsReader
from spark_analysis.decode import v1
from spark_analysis.decode.events import (
    ID_ERRORS,
    AnswerPairing,
    CommandWalk,
    Rows,
    StreamWalk,
    close_kind,
    connection_row,
    first_bytes,
)
from spark_analysis.decode.identify import identify_struct, json_object, response_struct, stated
from spark_analysis.decode.kinds import (
    MAGIC_CUT_SHORT,
    TLS_OPAQUE,
    UNREADABLE_COMMAND,
    UNREADABLE_LAYER,
    Close,
    Direction,
    Kind,
    Status,
)
from spark_analysis.derive.in_flight import NS_PER_S, InFlight
from spark_analysis.derive.settlements import DELIVERED_SCHEMA, Settlements
from spark_analysis.read.reassembly import Connection, Stream

# Commands that get exactly one response or error frame in command order (C-13).
ANSWERED_COMMANDS = frozenset({"IDENTIFY", "AUTH", "SUB", "PUB", "MPUB", "DPUB", "CLS"})
VERBS = (
    b"IDENTIFY",
    b"AUTH",
    b"SUB",
    b"PUB",
    b"MPUB",
    b"DPUB",
    b"RDY",
    b"FIN",
    b"REQ",
    b"TOUCH",
    b"CLS",
    b"NOP",
)
_COMMAND_START = re.compile(rb"(?:^|(?<=\n))(?:" + b"|".join(VERBS) + rb")(?:[ \n]|\r\n)")
_FRAME_TYPE_FIELD = re.compile(rb"\x00\x00\x00[\x00\x01\x02]")
_HEX_ID = re.compile(rb"[0-9a-f]{16}\Z")
_KNOWN_RESPONSES = (b"OK", wire.HEARTBEAT, b"CLOSE_WAIT")


def body_hashes(bodies: list) -> list[int]:
    """crc32 and adler32 of each body in one signed 64-bit integer: what joins a publish with its deliveries."""
    count = len(bodies)
    crc = np.fromiter(map(zlib.crc32, bodies), np.uint64, count)
    adler = np.fromiter(map(zlib.adler32, bodies), np.uint64, count)
    return ((crc << np.uint64(32)) | adler).view(np.int64).tolist()


class _Upgrade:
    """What the server's IDENTIFY response switched on (ID-30)."""

    def __init__(self, carried: bool = False):
        self.codec: str | None = None  # snappy | deflate
        self.tls = False
        self.identify: dict = {}
        self.answered = False  # the server's answer to IDENTIFY has been decoded
        self.carried = carried  # the decoders are to be pickled between capture files (nsq-trace watch)

    def decompressor(self):
        if self.codec == "snappy":
            return wire.SnappyStreamDecoder()
        return _CarriedDeflate() if self.carried else wire.DeflateStreamDecoder()


class _CarriedDeflate(wire.DeflateStreamDecoder):
    """A deflate layer that can be pickled: zlib's inflater cannot, so this one keeps the compressed bytes fed so far
    and its copy feeds them again. What carrying a deflate connection from file to file costs: its compressed
    bytes, kept, and inflated again in each file's task."""

    def __init__(self):
        super().__init__()
        self._fed = bytearray()

    def feed(self, data: bytes) -> bytes:
        self._fed += data
        return super().feed(data)

    def __getstate__(self) -> bytes:
        return bytes(self._fed)

    def __setstate__(self, fed: bytes) -> None:
        self.__init__()
        try:
            self.feed(fed)
        except wire.ProtocolViolation:
            pass  # it failed then too: the walk lost the rest of its direction and feeds this layer no more


class ConnectionDecoder:
    """One connection's events, one window of its streams after another (read/reassembly.py): ``window()`` after each
    window the reassembly hands out (the last one too), then ``finish()``. Each returns the events that became final
    and the deliveries they settled (derive/settlements.py): a window's rows are held until the next
    window is paired, so that an answer or an ID error there still reaches them, and the checks, settlements and
    the connection's facts carry their state across. Memory is bounded by two windows' rows, the messages in flight
    and 8 bytes per message delivered."""

    def __init__(self, conn: Connection, nsq_ports: frozenset[int], carried: bool = False):
        self.conn = conn
        self.nsq_ports = nsq_ports
        self.protocol: str | None = None  # nsq | lookupd | other: decided by the first window
        self.walks: list[StreamWalk] = []
        self.pairing: AnswerPairing | None = None
        self.upgrade = _Upgrade(carried)
        self.in_flight: InFlight | None = None
        self.settlements: Settlements | None = None
        self.held: Rows | None = None
        self.activity: Counter = Counter()
        self.magic = b""

    def window(self) -> tuple[pa.Table, pa.Table] | None:
        if self.protocol is None:
            self._begin()
        rows = Rows(self.conn)
        for walk in self.walks:  # the server's first: its IDENTIFY response says what the client's bytes became
            walk.walk(rows)
        released = None
        if self.pairing is not None:
            self.pairing.pair(rows)
        if self.held is not None:
            released = self._release(self.held, last=False)
        self.held = rows
        return released

    def finish(self) -> tuple[pa.Table, pa.Table]:
        rows = self.held
        for walk in self.walks:
            walk.finish(rows)
        return self._release(rows, last=True, close=close_kind(self.conn))

    def _begin(self):
        conn = self.conn
        self.magic = first_bytes(conn.c2s, 4)
        if v1.is_lookupd(conn):
            self.protocol = "lookupd"
            self.walks = v1.walks(conn)
            self.pairing = AnswerPairing(None)  # every V1 command gets one reply, in order (L-TCP-02)
            return
        # NSQ: the V2 magic (C-01), a known port, or a server that answers in NSQ frames (E_BAD_PROTOCOL
        # after a bad magic, C-02; any frames when the capture started mid-connection).
        if self.magic == wire.MAGIC_V2 or conn.server[1] in self.nsq_ports or _looks_like_nsq(conn.s2c):
            self.protocol = "nsq"
            self.walks = [_ServerSide(conn.s2c, self.upgrade), _ClientSide(conn.c2s, self.upgrade)]
            self.pairing = AnswerPairing(ANSWERED_COMMANDS)
        else:
            self.protocol = "other"

    def _release(self, rows: Rows, last: bool, close: Close | None = None) -> tuple[pa.Table, pa.Table]:
        """``rows`` are final: their outcomes, the messages in flight per second, the subscription's labels, and with
        the ``last`` window the connection's own row."""
        if self.pairing is not None:
            self.pairing.release(rows)
        if self.protocol == "nsq":
            if self.in_flight is None:
                self.in_flight = InFlight(stated(response_struct(self.upgrade.identify)))
                self.settlements = Settlements(self.in_flight.msg_timeout_ns)
            counted = rows.is_in("kind", Kind.COMMAND, Kind.FRAME)
            for second, count in sorted(self.in_flight.run(rows.columns, rows.time_order(), counted, last).items()):
                rows.add(second * NS_PER_S, Direction.CONNECTION, Kind.IN_FLIGHT, "in_flight", in_flight=count)
        self.activity.update(zip(rows.columns["kind"], rows.columns["name"], strict=True))
        if last:
            self._connection_row(rows, close)
        events = rows.table()
        if self.protocol == "nsq" and self.walks[1].subscription[1] is not None:
            events = _labelled(events, _subscription_rows(rows), *self.walks[1].subscription)
        if self.settlements is None:
            return events, DELIVERED_SCHEMA.empty_table()
        return events, self.settlements.settle(events, last)

    def _connection_row(self, rows: Rows, close: Close):
        activity = self.activity
        if self.protocol == "lookupd":
            commands = self.walks[1]
            connection_row(rows, "lookupd", close, self.magic, codec="plain", producer=commands.producer,
                           identify_request=commands.identify)
            return
        is_nsq = self.protocol == "nsq"
        client = self.walks[1] if is_nsq else None
        topic, channel = client.subscription if is_nsq else (None, None)
        connection_row(
            rows,
            "nsq" if is_nsq else "other",
            close,
            self.magic,
            codec="tls" if self.upgrade.tls else self.upgrade.codec or "plain",
            identify_request=client.identify_struct if is_nsq else None,
            identify_response=response_struct(self.upgrade.identify) if self.upgrade.identify else None,
            topic=topic,
            channel=channel,
            cls=activity[Kind.COMMAND, "CLS"],
            publish_commands=sum(activity[Kind.COMMAND, verb] for verb in ("PUB", "MPUB", "DPUB")),
            deliveries=activity[Kind.FRAME, "message"],
        )


def decode_connection(conn: Connection, nsq_ports: frozenset[int]) -> pa.Table:
    """The events of a connection reassembled whole (one window)."""
    decoder = ConnectionDecoder(conn, nsq_ports)
    decoder.window()
    return decoder.finish()[0]


def _looks_like_nsq(stream: Stream) -> bool:
    head = b"".join(data for _, data, _ in stream.chunks[:8])
    if stream.syn_seen:
        return _frame_start(head, 0) == 0
    start = _frame_start(head, 0)
    return start >= 0 and _frame_start(head, start + 4 + struct.unpack_from(">I", head, start)[0]) >= 0


def _frame_start(buffer, start: int) -> int:
    """First offset >= start holding a whole plausible frame followed by a plausible header (or the end)."""
    for match in _FRAME_TYPE_FIELD.finditer(buffer, start + 4 if start + 4 <= len(buffer) else len(buffer)):
        position = match.start() - 4
        if position < start:
            continue
        size, frame_type = struct.unpack_from(">Ii", buffer, position)
        end = position + 4 + size
        if size < 4 or end > len(buffer) or size > wire.DEFAULT_MAX_FRAME_SIZE:
            continue
        data = bytes(buffer[position + 8 : end])
        if frame_type == wire.FRAME_MESSAGE:
            if size < 4 + wire.MESSAGE_HEADER_SIZE or not _HEX_ID.match(data[10:26]) or data[8:10] == b"\0\0":
                continue
        elif frame_type == wire.FRAME_RESPONSE:
            if data not in _KNOWN_RESPONSES and not data.startswith(b"{"):
                continue
        elif not data.startswith(b"E_"):
            continue
        if end + 8 <= len(buffer):
            next_size, next_type = struct.unpack_from(">Ii", buffer, end)
            if next_size < 4 or next_type not in wire.FRAME_TYPE_NAMES:
                continue
        return position
    return -1


class _V2Walk(StreamWalk):
    """A V2 direction: its decoder pauses at the IDENTIFY upgrade, which ``_switch`` carries out."""

    def __init__(self, stream: Stream, upgrade: _Upgrade):
        super().__init__(stream)
        self.upgrade = upgrade
        self.handshake: TlsReader | None = None  # TLS switched on: its plaintext records are read

    def _switch(self, rest: bytes):
        """The decoder stopped at the IDENTIFY upgrade's switch point, and ``rest`` came after it (ID-30). The
        server's IDENTIFY response, decoded first, says what the connection switched to, if anything."""
        if self.upgrade.tls:
            self.handshake = TlsReader()
            self._handshake_bytes(rest)
            return
        if self.upgrade.codec:
            self.decompressor = self.upgrade.decompressor()
            try:
                rest = self.decompressor.feed(rest)
            except wire.ProtocolViolation as exc:
                self._lose(self.layer_failed, str(exc))
                return
        self._feed_resynchronising(rest)


    def _handshake_bytes(self, data: bytes):
        """The TLS handshake's plaintext records, a row each (ID-31, ID-32, T-17); from its first encrypted record
        (or an alert, or bytes that are no TLS) on, the rest of the connection is opaque."""
        for record in self.handshake.feed(data):
            self.rows.add(self.ts_ns, self.direction, Kind.TLS, record.name, tls_record=record.as_text())
        if self.handshake.done:
            self._lose(TLS_OPAQUE, "TLS negotiated: the rest of the connection is encrypted")

    def _gap(self, gap):
        if self.handshake is not None and not self.lost:  # the records cannot be told apart after it
            self._lose(TLS_OPAQUE, "TLS negotiated: the rest of the connection is encrypted")
        super()._gap(gap)

    def finish(self, rows):
        if self.handshake is not None and not self.lost and self.handshake.pending:  # it ended inside a record
            self.rows = rows
            self._lose(TLS_OPAQUE, "TLS negotiated: the rest of the connection is encrypted")
        super().finish(rows)


class _ServerSide(_V2Walk):
    direction = Direction.SERVER

    def __init__(self, stream, upgrade):
        super().__init__(stream, upgrade)
        # The decoder stops after an IDENTIFY response that agrees to TLS or compression (ID-30), so that
        # the bytes after it go through the new layer.
        self.decoder = wire.FrameDecoder(pause_at_upgrade=True)
        self.identify_pending = stream.syn_seen  # the first JSON response before any message answers IDENTIFY
        self.expect_upgrade_ok = False
        self.before_tls = False  # TLS switched on: the next bytes are the handshake's, or a frame outside it
        self.outside_tls = False
        self.last_heartbeat_ts_ns = None

    def reset(self):
        self.decoder = wire.FrameDecoder()  # resumed mid-stream: its upgrade point, if any, is long past
        self.identify_pending = False

    def find_start(self, buffer, start: int) -> int:
        return _frame_start(buffer, start)

    def feed(self, data: bytes):
        if self.before_tls:
            self._after_tls_answer(data)
            return
        if self.handshake is not None:
            self._handshake_bytes(data)
            return
        try:
            spans = self.decoder.feed_spans(data)
        except wire.ProtocolViolation as exc:
            self._frames(exc.decoded)
            self.violation("frame", exc)
            return
        self._frames(spans)
        if self.decoder.paused:
            self._switch(self.decoder.take_trailing_data())

    def _frames(self, spans: wire.FrameSpans):
        """Message frames come by the thousand: a run of them is one batch of rows (``_messages``); the other frames
        one row each, in place among them."""
        types = spans.types
        others = [index for index, frame_type in enumerate(types) if frame_type != wire.FRAME_MESSAGE]
        add = self.rows.add
        ts_ns, direction = self.ts_ns, self.direction
        data = spans.data
        run_start = 0
        for index in others:
            self._messages(spans, run_start, index)
            run_start = index + 1
            frame = wire.Frame(spans.types[index], data[spans.starts[index]:spans.ends[index]])
            if frame.is_heartbeat:
                since_last = None if self.last_heartbeat_ts_ns is None else ts_ns - self.last_heartbeat_ts_ns
                self.last_heartbeat_ts_ns = ts_ns
                add(ts_ns, direction, Kind.FRAME, "heartbeat", heartbeat_interval_ns=since_last)  # C-26
            elif frame.frame_type == wire.FRAME_RESPONSE:
                text = frame.data.decode("utf-8", "replace")
                status = None
                if self.outside_tls:
                    status = Status.OUTSIDE_TLS
                elif self.expect_upgrade_ok:
                    status, self.expect_upgrade_ok = Status.UPGRADE, False  # ID-30: the OK through the new layer
                elif self.identify_pending and frame.data.startswith(b"{"):
                    self._identify_response(frame.data)
                add(ts_ns, direction, Kind.FRAME, "response", text=text, status=status)
            else:
                code = frame.error_code
                self.upgrade.answered = self.upgrade.answered or self.identify_pending
                msg_id = None
                if code in ID_ERRORS:  # "<VERB> <id> failed <reason>" (P-FIN-04, P-REQ-06, P-TOUCH-03)
                    words = frame.error_text.split(" ")
                    msg_id = words[1] if len(words) > 1 else None
                add(ts_ns, direction, Kind.FRAME, "error", code=code, msg_id=msg_id, text=frame.error_text)
        self._messages(spans, run_start, len(types))

    def _messages(self, spans: wire.FrameSpans, first: int, stop: int):
        """Message frames ``first`` to ``stop`` of ``spans``: their fixed-offset fields (C-09: timestamp, attempts,
        ID) read for all at once."""
        if first >= stop:
            return
        self.identify_pending = False  # a subscriber can no longer IDENTIFY (P-ID-01)
        data = spans.data
        starts, ends = spans.starts[first:stop], spans.ends[first:stop]
        header_size = wire.MESSAGE_HEADER_SIZE
        headers = np.frombuffer(b"".join([data[start:start + header_size] for start in starts]), _MESSAGE_HEADER)
        body_starts = [start + header_size for start in starts]
        count = stop - first
        self.rows.add_many(
            self.direction,
            Kind.FRAME,
            "message",
            ts_ns=[self.ts_ns] * count,
            msg_id=[data[start + 10:start + 26].decode("latin-1") for start in starts],  # as sent, NULs too
            attempts=headers["attempts"].tolist(),
            msg_ts_ns=headers["ts"].tolist(),
            body_len=[end - start for start, end in zip(body_starts, ends, strict=True)],
            body_hash=body_hashes(list(map(memoryview(data).__getitem__, map(slice, body_starts, ends)))),
        )

    def _identify_response(self, data: bytes):
        self.identify_pending = False
        self.upgrade.answered = True
        response = json_object(data)
        layers = wire.upgrades(response)
        self.upgrade.identify = response
        self.upgrade.tls = "tls_v1" in layers
        self.upgrade.codec = next((layer for layer in layers if layer != "tls_v1"), None)

    def _switch(self, rest: bytes):
        self.expect_upgrade_ok = bool(self.upgrade.codec) and not self.upgrade.tls  # ID-30: an OK in the new layer
        if self.upgrade.tls:
            self.before_tls = True
            if rest:
                self._after_tls_answer(rest)
            return
        super()._switch(rest)

    def _after_tls_answer(self, data: bytes):
        """The server's first bytes after an answer that switched TLS on: its handshake. A whole frame there instead
        went out in plaintext where the TLS layer belonged (ID-30: its row says so, ``OUTSIDE_TLS``; an error frame is
        nsqd's after a failed handshake, ID-31), and what follows it is taken as the handshake."""
        self.before_tls = False
        size = int.from_bytes(data[:4], "big") if len(data) >= 8 else 0
        if _FRAME_TYPE_FIELD.match(data, 4) and 4 <= size and 4 + size <= len(data):
            self.outside_tls = True
            try:
                self._frames(wire.FrameDecoder().feed_spans(data[:4 + size]))
                data = data[4 + size:]
            except wire.ProtocolViolation:
                pass  # no frame after all: the handshake's bytes
            self.outside_tls = False
        super()._switch(data)


_I32 = struct.Struct(">i")
_MESSAGE_HEADER = np.dtype([("ts", ">i8"), ("attempts", ">u2"), ("id", "V16")])


class _ClientSide(_V2Walk, CommandWalk):
    command_start = _COMMAND_START
    layer_failed = UNREADABLE_LAYER  # nsqd's reader fails there too: its loop ends (ID-33, ID-34)

    def __init__(self, stream, upgrade):
        super().__init__(stream, upgrade)
        # The decoder stops after an IDENTIFY that asks for TLS or compression: the server's answer, decoded
        # first, says whether the bytes after it go through a new layer (ID-30).
        self.decoder = wire.CommandDecoder(pause_at_upgrade=True)
        self.subscription: tuple[str | None, str | None] = (None, None)
        self.identify: dict = {}  # the first IDENTIFY's fields, those of their type (identify.stated), for the checks
        self.identify_struct: dict | None = None  # and as the connection row's identify_request
        # the bytes after the IDENTIFY while the server's answer is in a window still to come
        self.unanswered: bytearray | None = None
        self.resumed = not stream.syn_seen  # decoded from a resync point, not the stream's start

    def reset(self):
        self.resumed = True
        super().reset()

    def violation(self, reason: str, exc: wire.ProtocolViolation):
        """Bytes nsqd cannot read either, where the stream is seen whole up to them: nsqd reads no further, nor does
        the walk (C-19); elsewhere the failure may be the resync's, and the walk resynchronises."""
        if self.resumed:
            super().violation(reason, exc)
        else:
            self._lose(UNREADABLE_COMMAND, exc.reason)

    def walk(self, rows):
        if self.unanswered is not None and self.upgrade.answered:
            self.rows = rows
            self._switch(bytes(self.unanswered))
        super().walk(rows)

    def finish(self, rows):
        if self.unanswered is not None:  # never answered: the bytes stay as they were (no layer, ID-30)
            self.upgrade.answered = True
            self._switch(bytes(self.unanswered))
        cut = self.decoder.partial_magic
        if cut is not None and self.stream.fin_ts_ns is not None and not self.lost and self.resync_buffer is None:
            # C-03: the client's FIN within the magic, seen from its SYN without a gap
            rows.add(self.stream.fin_ts_ns, self.direction, Kind.ERROR, MAGIC_CUT_SHORT, explanation=repr(cut),
                     stream_offset=0)
            return
        super().finish(rows)

    def feed(self, data: bytes):
        if self.unanswered is not None:
            self.unanswered += data
            return
        if self.handshake is not None:
            self._handshake_bytes(data)
            return
        super().feed(data)

    def _switch(self, rest: bytes):
        if not self.upgrade.answered:
            self.unanswered = bytearray(rest)
            return
        self.unanswered = None
        super()._switch(rest)

    def _publish(self, name, topic, bodies, defer=None):
        """One `publish` row per message, right after the command's row: their status is its status."""
        self.rows.add_many(
            self.direction,
            Kind.PUBLISH,
            name,
            published=True,
            ts_ns=[self.ts_ns] * len(bodies),
            topic=[topic] * len(bodies),
            body_len=[len(body) for body in bodies],
            body_hash=body_hashes(bodies),
            delay_ms=[defer] * len(bodies),
        )

    def _commands(self, spans: wire.CommandSpans):
        """FINs come by the thousand: a run of them is one batch of rows, their IDs read where the lines are
        ``FIN <16 bytes>`` (no space in the ID, no "\\r" before the newline: C-14, C-15); the other commands one row
        each, in place among them."""
        data = spans.data
        run_start = 0
        for index, (start, newline) in enumerate(zip(spans.starts, spans.newlines, strict=True)):
            if newline - start == 20 and data.startswith(b"FIN ", start) and data.find(b" ", start + 4, newline) < 0 \
                    and data[newline - 1] != 13:
                continue
            self._fins(spans, run_start, index)
            run_start = index + 1
            command = spans.command(index)
            # P-MPUB-04: the size word before the body that the MPUB's count and sizes framed
            size_word = _I32.unpack_from(data, newline + 1)[0] if command.name == b"MPUB" and command.body is not None \
                else None
            self._command(command, size_word)
        self._fins(spans, run_start, len(spans.starts))

    def _fins(self, spans: wire.CommandSpans, first: int, stop: int):
        if first < stop:
            data = spans.data
            self.rows.add_many(self.direction, Kind.COMMAND, "FIN", ts_ns=[self.ts_ns] * (stop - first),
                               status=[Status.OK] * (stop - first),
                               msg_id=[data[start + 4:start + 20].decode("latin-1")
                                       for start in spans.starts[first:stop]])

    def _command(self, command: wire.Command, size_word: int | None):
        """One command's row; every one says its line's shape: how many parameters (C-17), whether CRLF ended it
        (C-14)."""
        add = self.rows.add
        ts_ns, direction = self.ts_ns, self.direction
        name = command.name.decode("latin-1")
        params = command.params
        count, crlf = len(params), command.crlf
        first = params[0].decode("latin-1") if params else None
        # a FIN, REQ or TOUCH succeeds unless an error frame names its ID (events.AnswerPairing)
        if name in ("FIN", "TOUCH"):
            add(ts_ns, direction, Kind.COMMAND, name, msg_id=first, status=Status.OK, params=count, crlf=crlf)
        elif name == "REQ":
            add(ts_ns, direction, Kind.COMMAND, name, msg_id=first, delay_ms=_integer(params[1:2]), status=Status.OK,
                params=count, crlf=crlf)
        elif name == "RDY":
            # P-RDY-05: no parameter means 1, an empty one means 0.
            add(ts_ns, direction, Kind.COMMAND, name, rdy=1 if not params else _integer(params[:1], empty=0),
                params=count, crlf=crlf)
        elif name == "SUB":
            second = params[1].decode("latin-1") if len(params) > 1 else None
            if self.subscription[1] is None:
                self.subscription = (first, second)
            add(ts_ns, direction, Kind.COMMAND, name, topic=first, channel=second, params=count, crlf=crlf)
        elif name in ("PUB", "DPUB"):
            body = command.body or b""
            defer = _integer(params[1:2]) if name == "DPUB" else None
            add(ts_ns, direction, Kind.COMMAND, name, topic=first, body_len=len(body), delay_ms=defer, params=count,
                crlf=crlf)
            self._publish(name, first, [body], defer)
        elif name == "MPUB":
            try:
                messages = command.messages
            except wire.ProtocolViolation as exc:
                messages = []
                add(ts_ns, direction, Kind.ERROR, "mpub_body_invalid", topic=first, explanation=exc.reason)
            add(ts_ns, direction, Kind.COMMAND, name, topic=first, message_count=len(messages),
                body_len=len(command.body or b""), params=count, crlf=crlf, size_word=size_word)
            self._publish(name, first, messages)
        elif name == "IDENTIFY":
            identify = identify_struct(command.body)
            if not self.identify:
                self.identify, self.identify_struct = stated(identify), identify
            add(ts_ns, direction, Kind.COMMAND, name, identify=identify, params=count, crlf=crlf)
        else:  # AUTH's body: its size (P-AUTH-03)
            add(ts_ns, direction, Kind.COMMAND, name, arguments=" ".join(p.decode("latin-1") for p in params) or None,
                body_len=None if command.body is None else len(command.body), params=count, crlf=crlf)


def _integer(params, empty=None):
    if not params:
        return None
    text = params[0]
    if not text:
        return empty
    return int(text) if text.isdigit() and len(text) < 19 else None


def _subscription_rows(rows: Rows) -> np.ndarray:
    """What happens on a subscribed connection is its subscription's: its frames, the commands that act on them."""
    return rows.is_in("kind", Kind.FRAME, Kind.GAP, Kind.IN_FLIGHT) | (
        rows.is_in("kind", Kind.COMMAND) & ~rows.is_in("name", "PUB", "MPUB", "DPUB", "SUB"))


def _labelled(events: pa.Table, rows: np.ndarray, topic: str, channel: str) -> pa.Table:
    """``events`` with ``rows`` (a mask, ``_subscription_rows``) labelled with the subscription."""
    mask = pa.array(rows, pa.bool_())
    for column, label in (("topic", topic), ("channel", channel)):
        position = events.schema.get_field_index(column)
        events = events.set_column(position, column, pc.if_else(mask, pa.scalar(label, pa.string()), events[column]))
    return events
