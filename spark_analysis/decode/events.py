"""What the decoders of both protocols share: the event schema, the row builder of one connection, the walk over
a stream's chunks and gaps with resync, and the pairing of commands with their answers. ``decode/v2.py`` decodes nsqd's
V2 connections with it, ``decode/v1.py`` nsqlookupd's V1 ones."""

from __future__ import annotations

import re
from collections import deque

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nsq_protocol import wire
from spark_analysis.decode.identify import IDENTIFY_RESPONSE_TYPE, IDENTIFY_TYPE
from spark_analysis.decode.kinds import BAD_MAGIC, Close, Direction, Kind, Status
from spark_analysis.read.reassembly import Connection, Gap, Stream

# The connection row's facts (kind connection): what the capture shows of the connection, and the protocol's.
CONNECTION_TYPE = pa.struct(
    [
        ("close", pa.string()),  # Close
        ("packets", pa.int64()),
        ("codec", pa.string()),  # plain | snappy | deflate | tls
        ("syn_seen", pa.bool_()),
        ("last_ts_ns", pa.int64()),
        ("client_fin_ts_ns", pa.int64()),  # the client's first FIN, where the capture shows one
        ("c2s_bytes", pa.int64()),
        ("s2c_bytes", pa.int64()),
        ("gaps", pa.int32()),
        ("retransmitted_bytes", pa.int64()),
        ("conflicting_bytes", pa.int64()),
        ("magic", pa.string()),
        ("identify_request", IDENTIFY_TYPE),  # the client's first IDENTIFY (V2 and V1)
        ("identify_response", IDENTIFY_RESPONSE_TYPE),  # nsqd's JSON answer (V2)
        ("topic", pa.string()),  # the subscription (V2)
        ("channel", pa.string()),
        ("cls", pa.int32()),
        ("publish_commands", pa.int32()),
        ("deliveries", pa.int32()),
        ("producer", pa.string()),  # broadcast_address:tcp_port of a V1 IDENTIFY
    ]
)

EVENT_SCHEMA = pa.schema(
    [
        ("conn_id", pa.string()),
        ("client", pa.string()),
        ("server", pa.string()),
        ("client_port", pa.int32()),
        ("server_port", pa.int32()),
        ("ts_ns", pa.int64()),
        ("direction", pa.string()),  # Direction
        ("kind", pa.string()),  # Kind
        ("name", pa.string()),  # by kind: the verb, the frame's kind, the error, the requirement's ID
        ("topic", pa.string()),
        ("channel", pa.string()),
        ("msg_id", pa.string()),
        ("attempts", pa.int32()),
        ("msg_ts_ns", pa.int64()),  # message frames: the publish timestamp carried in the frame (C-09)
        ("body_len", pa.int64()),
        ("body_hash", pa.int64()),  # crc32 and adler32 of the body: joins publishes with deliveries
        ("rdy", pa.int64()),  # RDY: the count the client set (P-RDY-05)
        ("delay_ms", pa.int64()),  # REQ's timeout, DPUB's defer (and its publish row's)
        ("message_count", pa.int32()),  # MPUB: the messages of its body
        # commands: the parameters on the line as nsqd splits it (C-17), and whether CRLF ended it (C-14); null in
        # the batches of FINs, whose lines are all 'FIN <16 bytes>\n' (decode/v2.py _commands)
        ("params", pa.int32()),
        ("crlf", pa.bool_()),
        # MPUB: the body size its 4-byte word declares, which nsqd only range-checks: it reads the body by its count
        # and sizes, body_len's bytes (P-MPUB-04)
        ("size_word", pa.int64()),
        ("byte_count", pa.int64()),  # gaps and undecodable bytes: how many bytes of the stream
        ("heartbeat_interval_ns", pa.int64()),  # heartbeat frames: since the connection's previous one (C-26)
        ("in_flight", pa.int32()),  # in-flight rows: the most messages in flight in that second
        ("status", pa.string()),  # Status
        ("code", pa.string()),  # error frames: E_*; commands: the error code they got
        ("text", pa.string()),  # response and error frames: what they say
        ("arguments", pa.string()),  # the commands without columns of their own: their parameters as sent
        ("explanation", pa.string()),  # errors and violations: what went wrong, and where
        ("producer", pa.string()),  # V1 REGISTER and UNREGISTER: broadcast_address:tcp_port of the IDENTIFY
        # tls rows: a plaintext handshake record's versions, alert, certificates (nsq_protocol.tls_records Record)
        ("tls_record", pa.string()),
        ("identify", IDENTIFY_TYPE),  # IDENTIFY commands, V2 and V1
        ("stream_offset", pa.int64()),
        ("connection", CONNECTION_TYPE),
    ]
)

def kind_mask(events: pa.Table, kind: str, *names: str) -> pa.Array:
    """The rows of ``events`` of that kind (and, given names, of one of those names)."""
    mask = pc.equal(events["kind"], kind)
    return pc.and_kleene(mask, pc.is_in(events["name"], pa.array(names))) if names else mask


# Non-fatal errors answer FIN/REQ/TOUCH by message ID, outside the response order (C-23, P-FIN-04).
ID_ERRORS = {"E_FIN_FAILED": "FIN", "E_REQ_FAILED": "REQ", "E_TOUCH_FAILED": "TOUCH"}
RESYNC_WINDOW = 1 << 20  # bytes kept while searching for a resync point
TEXT_LIMIT = 300  # characters kept of a row's text, arguments and explanation: a peer may send megabytes


def _cut(text: str | None) -> str | None:
    return text[:TEXT_LIMIT] if text is not None and len(text) > TEXT_LIMIT else text


_ROW_FIELDS = EVENT_SCHEMA.names[5:]  # what add() takes; the first five are the connection's own


class Rows:
    """The event rows of one connection. While decoding, one tuple per row (one append), and the rows that come by
    the hundred thousand (deliveries, FINs, published messages) as column lists of a batch of them (``add_many``):
    per message, the cost that matters is a Python object. ``columns`` turns them into column lists once, for the
    passes that read and amend them (pairing, checks), and ``add`` appends to those from then on."""

    def __init__(self, conn: Connection):
        self.conn = conn
        self._tuples: list[tuple] = []
        self._columns: dict[str, list] | None = None
        self._batches: list[tuple[int, str, str, str, dict[str, list], bool]] = []  # add_many's, after n tuples
        self.published: list[tuple[int, int, int]] = []  # rows [start, stop) published by the command row
        self._order: np.ndarray | None = None
        self._labels: dict[str, pa.Array] = {}

    def add(
        self,
        ts_ns,
        direction,
        kind,
        name,
        *,
        topic=None,
        channel=None,
        msg_id=None,
        attempts=None,
        msg_ts_ns=None,
        body_len=None,
        body_hash=None,
        rdy=None,
        delay_ms=None,
        message_count=None,
        params=None,
        crlf=None,
        size_word=None,
        byte_count=None,
        heartbeat_interval_ns=None,
        in_flight=None,
        status=None,
        code=None,
        text=None,
        arguments=None,
        explanation=None,
        producer=None,
        tls_record=None,
        identify=None,
        stream_offset=None,
        connection=None,
    ) -> int:
        row = (ts_ns, direction, kind, name, topic, channel, msg_id, attempts, msg_ts_ns, body_len, body_hash, rdy,
               delay_ms, message_count, params, crlf, size_word, byte_count, heartbeat_interval_ns, in_flight, status,
               code, _cut(text), _cut(arguments), _cut(explanation), producer, _cut(tls_record), identify,
               stream_offset, connection)
        if self._columns is None:
            self._tuples.append(row)
            return len(self._tuples) - 1
        for column, value in zip(self._columns.values(), row, strict=True):
            column.append(value)
        return len(self._columns["ts_ns"]) - 1

    def add_many(self, direction: str, kind: str, name: str, published: bool = False, **columns: list):
        """Rows alike but for ``columns`` (``ts_ns`` among them), in their order, after the rows added so far.
        ``published``: messages that the row added just before (a PUB, MPUB or DPUB) published; their status is its
        status."""
        if self._batches and not published:
            position, *alike, batch, _ = self._batches[-1]
            # one FIN per packet is common (pynsq's): a run of batches with nothing between them is one batch
            if position == len(self._tuples) and alike == [direction, kind, name] and batch.keys() == columns.keys():
                for field, values in columns.items():
                    batch[field].extend(values)
                return
        self._batches.append((len(self._tuples), direction, kind, name, columns, published))
        if self._columns is not None:
            self._merge()

    def _merge(self):
        """Tuples and batches into columns, in the order they were added."""
        columns = self._columns if self._columns is not None else {name: [] for name in _ROW_FIELDS}
        transposed = list(zip(*self._tuples, strict=True)) or [()] * len(_ROW_FIELDS)
        taken = 0
        for position, direction, kind, name, batch, published in [*self._batches, (len(self._tuples), None, None,
                                                                                    None, None, False)]:
            for field, values in zip(_ROW_FIELDS, transposed, strict=True):
                columns[field].extend(values[taken:position])
            taken = position
            if batch is None:
                break
            start, count = len(columns["ts_ns"]), len(batch["ts_ns"])
            constant = {"direction": direction, "kind": kind, "name": name}
            for field, column in columns.items():
                values = batch.get(field)
                column.extend(values if values is not None else [constant.get(field)] * count)
            if published:
                self.published.append((start, start + count, start - 1))
        self._columns, self._tuples, self._batches = columns, [], []

    @property
    def columns(self) -> dict[str, list]:
        if self._columns is None:
            self._merge()
        return self._columns

    def is_in(self, column: str, *values: str) -> np.ndarray:
        """Which rows' ``column`` (kind, name or direction: set when a row is added, never changed) is one of
        ``values``: Arrow's kernels over the column, converted once per window and count of rows."""
        c = self.columns
        labels = self._labels.get(column)
        if labels is None or len(labels) != len(c["ts_ns"]):  # rows only grow: the same count, the same rows
            labels = self._labels[column] = pa.array(c[column], pa.string())
        found = pc.is_in(labels, value_set=pa.array(values, pa.string()))
        return pc.fill_null(found, False).to_numpy(zero_copy_only=False)

    def time_order(self) -> np.ndarray:
        """Row indices by capture time; at the same instant a client's row before the server's (an answer follows
        its command), then in decode order."""
        c = self.columns
        count = len(c["ts_ns"])
        if self._order is None or len(self._order) != count:  # rows only grow: the same count, the same rows
            ts = np.fromiter(c["ts_ns"], np.int64, count)
            from_server = ~self.is_in("direction", Direction.CLIENT)
            self._order = np.lexsort((from_server, ts))  # stable: ties keep decode order
        return self._order

    def table(self) -> pa.Table:
        columns = self.columns
        count = len(columns["ts_ns"])
        conn = self.conn
        constant = {
            "conn_id": conn.conn_id,
            "client": f"{conn.client[0]} {conn.client[1]}",
            "server": f"{conn.server[0]} {conn.server[1]}",
            "client_port": conn.client[1],
            "server_port": conn.server[1],
        }
        repeated = {name: pa.repeat(pa.scalar(value, EVENT_SCHEMA.field(name).type), count)
                    for name, value in constant.items()}
        arrays = {name: _array(values, EVENT_SCHEMA.field(name).type) for name, values in columns.items()
                  if name not in _STRUCT_COLUMNS}
        nulls = {name: pa.nulls(count, EVENT_SCHEMA.field(name).type) for name in _STRUCT_COLUMNS}
        table = pa.Table.from_pydict({**repeated, **arrays, **nulls}, schema=EVENT_SCHEMA)
        # A struct column costs its children's bytes on every row, null or not (the connection's: ~250 bytes), and
        # it holds a value on a few rows (an IDENTIFY, the connection's own row): those rows become chunks of their
        # own, the struct columns of the other chunks all null, which costs nothing.
        held = np.zeros(count, bool)
        for name in _STRUCT_COLUMNS:
            held |= np.array(columns[name], dtype=object).astype(bool)  # a struct value is a dict, never empty
        pieces, start = [], 0
        for index in np.flatnonzero(held).tolist():
            row = table.slice(index, 1)
            for name in _STRUCT_COLUMNS:
                position = EVENT_SCHEMA.get_field_index(name)
                row = row.set_column(position, name, pa.array([columns[name][index]], EVENT_SCHEMA.field(name).type))
            pieces += [table.slice(start, index - start), row]
            start = index + 1
        return pa.concat_tables([*pieces, table.slice(start)]) if pieces else table


_STRUCT_COLUMNS = ("identify", "connection")


def _array(values: list, arrow_type: pa.DataType) -> pa.Array:
    """A column of the rows: a column no row of the window has a value in costs nothing (most are empty on most
    rows: messages and FINs fill a few)."""
    if values and values[0] is None and values[-1] is None and values.count(None) == len(values):
        return pa.nulls(len(values), arrow_type)
    return pa.array(values, arrow_type)


def first_bytes(stream: Stream, count: int) -> bytes:
    if not stream.syn_seen or not stream.chunks or stream.chunks[0][0] != 0:
        return b""
    head = b""
    for offset, data, _ in stream.chunks:
        if offset != len(head):
            break
        head += data[: count - len(head)]
        if len(head) >= count:
            break
    return head


def close_kind(conn: Connection) -> Close:
    """Who ended the connection: rst, the first FIN's sender, or still open at the capture's end."""
    if conn.rst_seen:
        return Close.RST
    client_fin, server_fin = conn.c2s.fin_ts_ns, conn.s2c.fin_ts_ns
    if client_fin is None and server_fin is None:
        return Close.OPEN
    if server_fin is None or (client_fin is not None and client_fin <= server_fin):
        return Close.CLIENT_FIN
    return Close.SERVER_FIN


class StreamWalk:
    """One direction of a connection, walked chunk by chunk with its gaps, one window of the stream after another
    (``walk``, then ``finish``): resync after a gap or a protocol violation, or at the start of a capture that missed
    the connection's start; decompression once a subclass has switched it on. Subclasses: ``feed(data)``,
    ``reset()``, ``find_start(buffer, start)`` (the first boundary at or after ``start``)."""

    direction = ""
    layer_failed = "decompression_failed"  # the error row's name where this direction's compression layer fails

    def __init__(self, stream: Stream):
        self.rows: Rows | None = None  # the current window's
        self.stream = stream
        self.decompressor = None
        self.lost = False  # the rest of this direction cannot be decoded
        self.resync_buffer: bytearray | None = None if stream.syn_seen else bytearray()
        self.resync_offset = 0
        self.resync_from = 0  # the first offset of resync_buffer a boundary may be at
        self.unread = b""  # held by the decoder when it failed: searched for a resync point next
        self.ts_ns = 0
        self.offset = 0

    def walk(self, rows: Rows):
        """This window's pieces of the stream, their events into ``rows``."""
        self.rows = rows
        for piece in self.stream.window_pieces:
            if isinstance(piece, Gap):
                self._gap(piece)
                continue
            self.offset, data, self.ts_ns = piece
            if self.lost:
                continue
            if self.decompressor is not None:
                try:
                    data = self.decompressor.feed(data)
                except wire.ProtocolViolation as exc:
                    self._lose(self.layer_failed, str(exc))
                    continue
            self._feed_resynchronising(data)

    def _feed_resynchronising(self, data: bytes):
        """``feed``, and after each protocol violation the bytes from where it failed to a resync point skipped."""
        while True:
            if self.resync_buffer is not None:
                data = self._resynced(data)
                if data is None:
                    return
            self.feed(data)
            data, self.unread = self.unread, b""
            if not data:
                return

    def finish(self, rows: Rows):
        """The stream ended: bytes still searched for a resync point are undecodable, and so are those of a frame or
        command it ended inside (a capture cut short, a peer that died mid-write)."""
        self._held_undecodable(rows, "the stream ended")

    def _gap(self, gap: Gap):
        self.rows.add(gap.ts_ns, self.direction, Kind.GAP, "gap", byte_count=gap.length, stream_offset=gap.offset)
        if self.lost:
            return
        if self.decompressor is not None:
            self._lose("compressed_stream_gap", f"{gap.length} bytes missing inside a compressed stream")
            return
        self._held_undecodable(self.rows, "a gap came")
        self.reset()
        self.resync_buffer = bytearray()
        self.resync_offset = gap.offset + gap.length
        self.resync_from = 0

    def _lose(self, name: str, explanation: str):
        self.lost = True
        self.rows.add(self.ts_ns, self.direction, Kind.ERROR, name, explanation=explanation, stream_offset=self.offset)

    def _held_undecodable(self, rows: Rows, why: str):
        """The bytes held are undecodable: those still searched for a resync point, or those of the frame or command
        the stream was inside (a capture cut short, a peer that died mid-write, a lost segment)."""
        if self.resync_buffer:
            self._undecodable(rows, len(self.resync_buffer), f"no frame or command boundary found before {why}")
        elif not self.lost and self.resync_buffer is None and self.decoder.pending:
            rows.add(self.ts_ns, self.direction, Kind.ERROR, "undecodable_bytes", byte_count=self.decoder.pending,
                     stream_offset=self.decoder.offset, explanation=f"{why} inside a frame or command")

    def _undecodable(self, rows: Rows, count: int, explanation: str):
        rows.add(self.ts_ns, self.direction, Kind.ERROR, "undecodable_bytes", byte_count=count,
                 stream_offset=self.resync_offset, explanation=explanation)

    def _resynced(self, data: bytes) -> bytes | None:
        buffer = self.resync_buffer
        buffer += data
        start = self.find_start(buffer, self.resync_from)
        if start < 0:
            if len(buffer) > RESYNC_WINDOW:
                dropped = len(buffer) - RESYNC_WINDOW // 2
                self._undecodable(self.rows, dropped, "no frame or command boundary found")
                del buffer[:dropped]
                self.resync_offset += dropped
                self.resync_from = 0
            return None
        if start:
            self._undecodable(self.rows, start, "skipped while resynchronising")
        self.resync_buffer = None
        return bytes(buffer[start:])

    def violation(self, reason: str, exc: wire.ProtocolViolation):
        """The decoder failed at ``exc.offset``: what it holds from there is searched for a resync point, the bytes
        before that counted as undecodable."""
        self.rows.add(self.ts_ns, self.direction, Kind.ERROR, "protocol_violation",
                      explanation=f"{reason}: {exc.reason}", stream_offset=exc.offset)
        self.unread = self.decoder.take_trailing_data()
        self.reset()
        self.resync_buffer = bytearray()
        self.resync_offset = exc.offset
        self.resync_from = 1  # where it failed is no boundary: the search starts after it



class CommandWalk(StreamWalk):
    """A client's direction: ``decoder`` (a ``wire.CommandLineDecoder``: V2's or V1's) after the protocol's magic,
    its commands handed to ``_commands`` as spans; caught mid-stream, decoded as if the magic had been sent. A decoder
    that pauses at an upgrade hands the bytes after it to ``_switch``."""

    direction = Direction.CLIENT
    command_start: re.Pattern[bytes]  # where a command line may start: the resync point

    def reset(self):
        self.decoder = type(self.decoder)()
        self.decoder.feed(self.decoder.MAGIC)  # resumed mid-stream: the magic was sent long ago

    def find_start(self, buffer, start: int) -> int:
        match = self.command_start.search(buffer, start)
        return match.start() if match else -1

    def walk(self, rows: Rows):
        if self.resync_buffer is not None and self.rows is None:
            self.reset()
        super().walk(rows)

    def feed(self, data: bytes):
        try:
            commands = self.decoder.feed_spans(data)
        except wire.ProtocolViolation as exc:
            self._commands(exc.decoded)
            if self.decoder.magic is not None and self.decoder.magic != self.decoder.MAGIC:  # C-02, L-TCP-03
                self.rows.add(self.ts_ns, self.direction, Kind.ERROR, BAD_MAGIC, explanation=repr(self.decoder.magic),
                              stream_offset=0)
                self.lost = True
                return
            self.violation("command", exc)
            return
        self._commands(commands)
        if self.decoder.paused:
            self._switch(self.decoder.take_trailing_data())

    def _commands(self, commands: wire.CommandSpans):
        raise NotImplementedError

    def _switch(self, rest: bytes):
        raise NotImplementedError


class AnswerPairing:
    """Give each ``answered`` command its response or error, in order (V2: C-13; V1: L-TCP-02), and each FIN/REQ/TOUCH
    its outcome, one window of rows after another (``pair``), each window's rows final once the next one is paired
    (``release``). A FIN, REQ or TOUCH succeeded unless an error frame names its ID (P-FIN-04), in its window or the
    next: only the rows that answer or are answered are walked, the ID commands only when some error names an ID.
    A command still unanswered when its window is released stays unanswered: its answer would come more than a
    window of the connection's bytes later."""

    def __init__(self, answered: frozenset[str] | None):
        self.answered = answered  # the commands answered in order; None: every one
        self.waiting: deque[tuple[Rows, int]] = deque()
        self.previous: Rows | None = None

    def pair(self, rows: Rows):
        c = rows.columns
        commands, frames = rows.is_in("kind", Kind.COMMAND), rows.is_in("kind", Kind.FRAME)
        by_id_commands = commands & rows.is_in("name", "FIN", "REQ", "TOUCH")  # decoded as OK
        status, code = c["status"], c["code"]
        id_errors = np.zeros(len(commands), bool)
        for index in np.flatnonzero(frames & rows.is_in("name", "error")).tolist():
            id_errors[index] = code[index] in ID_ERRORS
        answered_commands = commands & (rows.is_in("name", *self.answered) if self.answered else True)
        server_gaps = rows.is_in("kind", Kind.GAP) & rows.is_in("direction", Direction.SERVER)
        walked = answered_commands | (frames & rows.is_in("name", "response", "error") & ~id_errors) | server_gaps
        name = c["name"]
        order = rows.time_order()
        waiting = self.waiting
        for index in order[walked[order]].tolist():
            if answered_commands[index]:
                waiting.append((rows, index))
            elif frames[index]:
                if status[index] != Status.UPGRADE and waiting:
                    answered_rows, command = waiting.popleft()
                    answered_rows.columns["status"][command] = Status.OK if name[index] == "response" else Status.ERROR
                    answered_rows.columns["code"][command] = c["code"][index]
            else:
                # Answers inside the gap are lost: what was waiting stays unanswered, not failed.
                for answered_rows, command in waiting:
                    answered_rows.columns["status"][command] = Status.UNANSWERED
                waiting.clear()
        if id_errors.any():
            self._fail_by_id(rows, order, by_id_commands, id_errors)
        self.previous = rows

    def _fail_by_id(self, rows: Rows, order: np.ndarray, by_id_commands: np.ndarray, id_errors: np.ndarray):
        """An ID error fails the latest FIN, REQ or TOUCH of its ID before it that no error failed yet."""
        by_id: dict[tuple[str, str], list[tuple[Rows, int]]] = {}
        if self.previous is not None:
            p = self.previous.columns
            for index in self.previous.time_order().tolist():
                if p["kind"][index] == Kind.COMMAND and p["name"][index] in ("FIN", "REQ", "TOUCH") \
                        and p["status"][index] == Status.OK:
                    by_id.setdefault((p["name"][index], p["msg_id"][index]), []).append((self.previous, index))
        c = rows.columns
        for index in order[(by_id_commands | id_errors)[order]].tolist():
            if by_id_commands[index]:
                by_id.setdefault((c["name"][index], c["msg_id"][index]), []).append((rows, index))
                continue
            pending = by_id.get((ID_ERRORS[c["code"][index]], c["msg_id"][index]))
            if pending:
                failed_rows, command = pending.pop()
                failed_rows.columns["status"][command] = Status.FAILED
                failed_rows.columns["code"][command] = c["code"][index]

    def release(self, rows: Rows):
        """``rows`` (the oldest window still held) are final: what still waits is unanswered, and a message is
        accepted when its command got OK."""
        waiting = self.waiting
        while waiting and waiting[0][0] is rows:
            _, command = waiting.popleft()
            rows.columns["status"][command] = Status.UNANSWERED
        status = rows.columns["status"]
        for start, stop, command in rows.published:
            status[start:stop] = [status[command]] * (stop - start)
        if self.previous is rows:
            self.previous = None


def connection_row(rows: Rows, name: str, close: Close, magic: bytes, **facts) -> None:
    """The connection's own row: ``name`` (nsq, lookupd, other), and in ``connection`` what the capture shows of it:
    how it ended, ``magic`` (its first 4 bytes, if the capture has its start), the protocol's ``facts`` among them
    (CONNECTION_TYPE)."""
    conn = rows.conn
    rows.add(
        conn.first_ts_ns,
        Direction.CONNECTION,
        Kind.CONNECTION,
        name,
        connection={
            "close": close,
            "packets": conn.packets,
            "syn_seen": conn.c2s.syn_seen,
            "last_ts_ns": conn.last_ts_ns,
            "client_fin_ts_ns": conn.c2s.fin_ts_ns,
            "c2s_bytes": conn.c2s.length,
            "s2c_bytes": conn.s2c.length,
            "gaps": conn.c2s.gap_count + conn.s2c.gap_count,
            "retransmitted_bytes": conn.c2s.retransmitted_bytes + conn.s2c.retransmitted_bytes,
            "conflicting_bytes": conn.c2s.conflicting_bytes + conn.s2c.conflicting_bytes,
            "magic": magic.decode("latin-1") if magic else None,
            **facts,
        },
    )
