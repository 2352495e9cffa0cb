"""A capture's decoded connections through the catalogue's monitors (nsq_protocol.monitors): one judge per nsqd,
fed its V2 connections' commands and frames in capture time, the connections opened and closed where the capture
saw them start and end, and the HTTP requests that change delivery where the caller names the brokers' HTTP ports.

Each decoding task cuts a connection's rows for the monitors (``observed_rows``, with their order within it:
``seq``); the judging (judge/job.py in Spark, ``judge_capture`` here without it) sorts one nsqd's rows by time and
streams them through a ``ServerJudging``. Captures time frames as they crossed the wire, so every rule judges
(``timing``). Where a connection was caught mid-way, lost bytes or is in TLS, or the HTTP API is not read, the judge
cannot see the traffic whole, and the rules that need every publish, every consumer of a channel or every HTTP
request that changes delivery say "not judged"."""

from __future__ import annotations

import bisect
import heapq
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nsq_protocol import monitors, wire
from nsq_protocol.http import HttpDecoder, HttpExchange, Request, Response
from nsq_protocol.monitors import BROKER, CLIENT, Observed
from nsq_protocol.monitors.events import (
    COMMAND,
    ERROR,
    FINS,
    HEARTBEAT,
    JSON,
    MAGIC,
    MESSAGE,
    MESSAGES,
    OUTSIDE_TLS,
    RESPONSE,
    SHORT_MAGIC,
    STREAM,
    UNREADABLE,
    Run,
)
from nsq_protocol.monitors.nsqd_names import CREATED, LEFT, NameChange, NamesChanged
from nsq_protocol.tls_records import Record
from nsq_protocol.wire import ProtocolViolation
from spark_analysis.decode.kinds import (
    BAD_MAGIC,
    CLIENT_UNREADABLE,
    MAGIC_CUT_SHORT,
    TLS_OPAQUE,
    UNREADABLE_COMMAND,
    Close,
    Direction,
    Kind,
    Status,
)
from spark_analysis.decode.v2 import decode_connection
from spark_analysis.judge.ordering import JUDGING_ORDER
from spark_analysis.memory import without_cycle_collection
from spark_analysis.read.pcapfile import ByteRange, read_range
from spark_analysis.read.reassembly import reassemble

NS = 1_000_000_000
_FRAMES = {"message": MESSAGE, "heartbeat": HEARTBEAT, "response": RESPONSE, "error": ERROR}
_CLOSED_BY = {Close.SERVER_FIN: BROKER, Close.CLIENT_FIN: CLIENT, Close.RST: None}
_NUMBER = {"RDY": "rdy", "REQ": "delay_ms", "DPUB": "delay_ms", "MPUB": "message_count", "AUTH": "body_len"}
# the events' columns observed_rows reads (with the body of IDENTIFY's struct)
_READ = ("server", "conn_id", "ts_ns", "direction", "kind", "name", "topic", "channel", "msg_id", "attempts",
         "msg_ts_ns", "body_hash", *dict.fromkeys(_NUMBER.values()), "params", "crlf", "size_word", "code", "text",
         "explanation", "tls_record", "status")
# the client's unreadable bytes; else its layer's
_WHERE = {BAD_MAGIC: MAGIC, UNREADABLE_COMMAND: STREAM, MAGIC_CUT_SHORT: SHORT_MAGIC}
_SEGMENT = ("ts_ns", "src", "dst", "sport", "dport", "seq", "flags", "payload", "ack")

VIOLATIONS = "violations"
VIOLATIONS_SCHEMA = pa.schema([
    ("server", pa.string()),  # the nsqd
    ("conn_id", pa.string()),
    ("ts_ns", pa.int64()),
    ("item", pa.string()),  # the catalogue's behaviour ID: nsq-conformance explain ITEM
    ("side", pa.string()),  # broker | client: who broke it
    ("expected", pa.string()),
    ("observed", pa.string()),
    ("evidence", pa.list_(pa.string())),  # the events that show it, in order
])
OBSERVED = "observed"  # the exchange's table of them
NAMES = "names"  # the exchange's table of the topics and channels each nsqd's traffic showed change, for the
# nsqlookupds' judging (R-03 to R-07): written by the nsqds' judging job, read by the lookupds' one after it
NAMES_SCHEMA = pa.schema([
    ("server", pa.string()),  # the nsqd ("ip port" of its TCP side)
    ("since_ns", pa.int64()),  # nsqd_names.NameChange's fields
    ("ts_ns", pa.int64()),
    ("change", pa.string()),
    ("topic", pa.string()),
    ("channel", pa.string()),
    ("last", pa.bool_()),
])
# what the lookupds' judges are not told of an nsqd whose HTTP API the capture does not hold: its deletions
NAMES_UNKNOWN = "nsqd's HTTP API is not in the traffic (--http-port): the topics and channels it deletes are unknown"
HTTP = "http"  # the exchange's table of the requests to the brokers' HTTP APIs and their answers
HTTP_SCHEMA = pa.schema([
    ("host", pa.string()),
    ("ts_ns", pa.int64()),
    ("path", pa.string()),
    ("topic", pa.string()),
    ("channel", pa.string()),
    ("status", pa.int32()),
    ("bodies", pa.list_(pa.int64())),  # their body hashes; null: not known (/mpub of newline-separated bodies)
    ("defer_ms", pa.int64()),
    ("unreadable", pa.bool_()),  # the capture lost some of a connection to this host's HTTP API: its requests are
    # not all known
    ("changes_delivery", pa.bool_()),  # the request is one the judge's ledger follows (judge.http_action)
    # the whole exchange, for the monitors of the HTTP answers: bodies kept up to KEPT_*, with their whole sizes
    ("answered_ts_ns", pa.int64()),
    ("method", pa.string()),
    ("target", pa.string()),
    ("request_headers", pa.map_(pa.string(), pa.string())),
    ("request_body", pa.binary()),
    ("request_size", pa.int64()),
    ("response_headers", pa.map_(pa.string(), pa.string())),
    ("response_body", pa.binary()),
    ("response_size", pa.int64()),
])
KEPT_REQUEST = 64 * 1024  # of an /mpub's or a PUT /config's body: what the monitors read of a request's (a /pub's
# is its size alone)
KEPT_RESPONSE = 256 * 1024  # of an answer's body (a /stats document)
_READ_BODIES = ("/mpub", "/config/")
# What the monitors read of a V2 connection's rows: its commands (with the bodies each publish carried: its publish
# rows), the client's bytes nsqd cannot read (CLIENT_UNREADABLE's error rows), the broker's frames.
OBSERVED_SCHEMA = pa.schema([
    ("server", pa.string()),
    ("conn_id", pa.string()),
    ("ts_ns", pa.int64()),
    ("seq", pa.int64()),  # the row's place in its connection's time order (decode/events.py Rows.time_order)
    ("kind", pa.string()),
    ("name", pa.string()),
    ("topic", pa.string()),
    ("channel", pa.string()),
    ("msg_id", pa.string()),
    ("attempts", pa.int32()),
    ("msg_ts_ns", pa.int64()),
    ("body_hash", pa.int64()),
    ("number", pa.int64()),  # RDY's count, REQ's and DPUB's delay, MPUB's message count, AUTH's body size
    ("params", pa.int32()),  # a command's parameters (C-17) and CRLF (C-14): null where the decoder did not say
    ("crlf", pa.bool_()),
    ("size", pa.int64()),  # MPUB: its size word where it is not the size of the body its count and sizes frame
    ("code", pa.string()),
    ("text", pa.string()),
    ("status", pa.string()),  # a frame's: sent in plaintext where TLS was negotiated (decode/kinds.py Status); a TLS
    # handshake record's: who sent it (Direction)
    ("identify", pa.string()),  # an IDENTIFY's JSON as sent
])


def observed_rows(events: pa.Table, first_seq: int) -> pa.Table:
    """A released window of a V2 connection's events as the monitors' rows: its commands, the client's bytes nsqd
    cannot read, the broker's frames, and where TLS starts (the traffic visible no more); ``first_seq``: how many of
    its rows the windows before held."""
    from_server = pc.equal(events["direction"], Direction.SERVER).to_numpy(zero_copy_only=False)
    ranks = np.empty(events.num_rows, np.int64)
    # at the same instant a client's row before the server's (an answer follows its command), then in decode order
    ranks[np.lexsort((from_server, events["ts_ns"].to_numpy()))] = np.arange(events.num_rows)
    kind, from_the_server = events["kind"], pc.equal(events["direction"], Direction.SERVER)
    is_error = pc.equal(kind, Kind.ERROR)
    is_tls = pc.equal(kind, Kind.TLS)
    wanted = pc.or_kleene(pc.or_kleene(
        pc.or_kleene(pc.or_kleene(pc.equal(kind, Kind.COMMAND), pc.equal(kind, Kind.PUBLISH)), pc.and_kleene(
            is_error, pc.is_in(events["name"], pa.array(CLIENT_UNREADABLE)))),
        pc.and_kleene(from_the_server, pc.or_kleene(pc.equal(kind, Kind.FRAME), pc.and_kleene(
            is_error, pc.equal(events["name"], TLS_OPAQUE))))), is_tls)
    # the columns read, filtered: the events' connection and IDENTIFY structs filtered whole were 5/6 of the cost
    rows = pa.table({**{column: events[column] for column in _READ}, "identify": pc.struct_field(
        events["identify"], "body")}).filter(wanted)
    name = rows["name"]
    number = pc.case_when(
        pa.StructArray.from_arrays([pc.fill_null(pc.equal(name, verb), False).combine_chunks()
                                    for verb in _NUMBER],
                                   list(_NUMBER)),
        *(pc.cast(rows[column], pa.int64()) for column in _NUMBER.values()))
    # the decoder's batch of FINs leaves their lines' shape null: each is 'FIN <16 bytes>\n' (decode/v2.py _commands)
    batched = pc.and_kleene(pc.equal(rows["kind"], Kind.COMMAND),
                            pc.and_kleene(pc.equal(name, "FIN"), pc.is_null(rows["params"])))
    params, crlf = pc.if_else(batched, 1, rows["params"]), pc.if_else(batched, False, rows["crlf"])
    size = rows["size_word"]
    size = pc.if_else(pc.fill_null(pc.not_equal(size, rows["body_len"]), False), size, pa.nulls(len(size), pa.int64()))
    return pa.table({
        "server": rows["server"], "conn_id": rows["conn_id"], "ts_ns": rows["ts_ns"],
        "seq": pa.array(ranks[pc.filter(pa.array(np.arange(events.num_rows)), wanted).to_numpy()] + first_seq),
        "kind": rows["kind"], "name": name, "topic": rows["topic"], "channel": rows["channel"],
        "msg_id": rows["msg_id"], "attempts": rows["attempts"], "msg_ts_ns": rows["msg_ts_ns"],
        "body_hash": rows["body_hash"], "number": number, "params": params, "crlf": crlf,
        "size": size, "code": rows["code"],
        "text": pc.coalesce(rows["text"], rows["explanation"], rows["tls_record"]),  # an error row's explanation
        "status": pc.if_else(pc.filter(is_tls, wanted), rows["direction"], rows["status"]),
        "identify": rows["identify"],
    }, schema=OBSERVED_SCHEMA)


@dataclass(frozen=True)
class Opening:
    """What the monitors must know of a connection before its first row: when and how it started, whether the
    capture holds all of it, and how it ended."""

    conn_id: str
    ts: float
    started: bool  # its V2 start (the magic) is in the capture: its defaults are known
    whole: bool  # nothing it did can be missing from the capture
    ended_at: float | None  # None: still open where the capture ends
    closed_by: str | None
    identify_answer: dict | None  # nsqd's JSON answer to IDENTIFY, as the decoder read it whole
    client: str | None = None  # host:port of the client's end, as nsqd names it (its /stats remote_address)
    server: str | None = None  # host:port the client dialed
    client_fin: float | None = None  # when the client's FIN came
    # a whole capture (analyze) that shows nothing of it after then, nor its end: its tail may be lost (watch: None,
    # later files may show more)
    seen_until: float | None = None


def openings(connections: pa.Table, undecoded: set[str], whole_capture: bool = True) -> dict[str, list[Opening]]:
    """Each nsqd's connections (by its ``server``), from the connections table (derive/tallies.py): those that spoke
    NSQ; ``undecoded``: the connections with bytes the decoder could not read; ``whole_capture``: the table is the
    capture's last word (analyze; not watch's batch)."""
    by_server: dict[str, list[Opening]] = {}
    for row in connections.filter(pc.fill_null(connections["is_nsq"], False)).to_pylist():
        bad = row["conn_id"] in undecoded
        seen = bool(row["syn_seen"]) and not row["gaps"]
        # after bytes it cannot decode, nsqd ends the connection too (C-19, C-21): only its end can be missing;
        # under TLS all of it but the start is. The client's own unreadable bytes reach the monitors
        # (CLIENT_UNREADABLE), whatever its magic was.
        whole = seen and row["codec"] != "tls" and (not bad or row["close"] != Close.OPEN)
        # a client whose FIN came within the magic (the decoder's SHORT_MAGIC row) showed its start too (C-03)
        magic = len(row["magic"] or "")
        started = seen and not bad and (magic == len(wire.MAGIC_V2) or
                                        0 < magic and row["client_fin_ts_ns"] is not None)
        answer = {key: value for key, value in (row["identify_response"] or {}).items() if value is not None}
        ended = row["close"] != Close.OPEN
        by_server.setdefault(row["server"], []).append(Opening(
            row["conn_id"], row["first_ts_ns"] / NS, started, whole,
            row["last_ts_ns"] / NS if ended else None, _CLOSED_BY.get(row["close"]), answer or None,
            _address(row["client"]), _address(row["server"]),
            row["client_fin_ts_ns"] / NS if row["client_fin_ts_ns"] is not None else None,
            row["last_ts_ns"] / NS if whole_capture and not ended else None))
    return by_server


def _every_change_read(judge: monitors.Judge, topic: str) -> bool:
    """Every change of a topic is in the traffic: nsqd's HTTP API is (deletions come only that way); a consumer the
    capture does not read is allowed for in ``_Told``."""
    return judge.http_seen


class _Told:
    """What one nsqd's lookupds are told of the changes its traffic shows (``changes``, until ``new_changes`` takes
    them). ``unread``: the connections the capture does not hold whole."""

    def __init__(self, unread: dict[str, Opening]):
        self.changes: list[NameChange] = []
        self._unread = unread
        # (topic, channel) told created, none of the topic's changes since: telling it again changes nothing for the
        # lookupds' judge, and a capture publishes millions
        self._created: set[tuple[str, str | None]] = set()

    def add(self, change: NameChange) -> None:
        if change.change == CREATED:
            key = (change.topic, change.channel)
            if key in self._created:
                return
            self._created.add(key)
        else:
            self._created = {key for key in self._created if key[0] != change.topic}
            # an ephemeral channel goes with its last consumer; a connection the capture does not read open
            # then may be one
            if change.change == LEFT and change.last and any(
                    opening.ts <= change.ts and (opening.ended_at is None or opening.ended_at > change.ts)
                    for opening in self._unread.values()):
                change = change._replace(last=False)
        self.changes.append(change)


class ServerJudging:
    """One nsqd's judge, fed its connections' observed rows sorted by (ts_ns, conn_id, seq) in as many parts as
    come (``feed``), then ``finish``. Connections open and close at the times their ``Opening`` gives, the HTTP
    ``actions`` (http_actions': each exchange with what it does to delivery; None: the broker's HTTP requests are
    not known) come in time order among the rows. Its ``NamesChanged`` reader gathers the topics and channels
    nsqd created and deleted, for the judges of the nsqlookupds it registers with (``new_changes``)."""

    def __init__(self, connections: Iterable[Opening], actions: list[tuple] | None, runs: bool = True,
                 share: tuple[int, int] = (0, 1)):
        self._unread: dict[str, Opening] = {}  # the connections the capture does not hold whole (mid-way, TLS, gaps)
        self._told = _Told(self._unread)
        self.names = NamesChanged(self._told.add, _every_change_read, NAMES_UNKNOWN)
        self.judge = monitors.new_judge(timing=True, http_seen=actions is not None, runs=runs, share=share,
                                        readers=(self.names,) if share[0] == 0 else ())
        self.openings: dict[str, Opening] = {}
        self._answers: dict[str, dict | None] = {}
        # (ts, order, n, what): order 0 opens, 1 an HTTP request, 2 closes: at one instant a connection opens before
        # its rows and closes after them; n, unique, keeps the heap from comparing what
        self._scheduled: list[tuple] = []
        self._entries = 0
        self.add(connections)
        self.add_actions(actions or [])
        self._pending: tuple[str, dict, list] | None = None  # a publish command, until its publish rows are taken
        self._run_rows: RunRows | None = None  # a connection's message frames or FINs, until a row ends their run
        self._encrypted: set[str] = set()  # connections gone into TLS: ended for the judge there
        self._reported: dict[int, int] = {}  # monitor -> how many of its violations new_violations gave
        self.last_ts = 0.0

    def add(self, connections: Iterable[Opening]) -> None:
        """Connections to open (and close where they ended); one already known only closes, once it has ended."""
        for opening in connections:
            known = self.openings.get(opening.conn_id)
            if known is not None and (known.ended_at is not None or opening.ended_at is None):
                continue
            self.openings[opening.conn_id] = opening
            if not opening.whole:
                self._unread[opening.conn_id] = opening
            if known is None:
                self._answers[opening.conn_id] = opening.identify_answer
                self._schedule(opening.ts, 0, opening)
            if opening.ended_at is not None:  # it ended since (watch: a later batch tells)
                self._schedule(opening.ended_at, 2, opening)

    def add_actions(self, actions: list[tuple[HttpExchange, monitors.HttpAction | None]] | None) -> None:
        """More of the broker's HTTP exchanges, each with what it does to delivery (watch: a batch's; http_actions);
        None: from here on some are not known."""
        if actions is None:
            self.judge.http_seen = False
            return
        for exchange, action in actions:
            self._schedule(exchange.ts, 1, (exchange, action))

    def _schedule(self, ts: float, order: int, what) -> None:
        self._entries += 1
        heapq.heappush(self._scheduled, (ts, order, self._entries, what))

    def new_changes(self, server: str) -> pa.Table:
        """The changes of the topics and channels the traffic showed since the last call, as ``NAMES`` rows of the
        nsqd ``server``."""
        new, self._told.changes = self._told.changes, []
        return pa.Table.from_pylist([
            {"server": server, "since_ns": round(change.since * NS), "ts_ns": round(change.ts * NS),
             "change": change.change, "topic": change.topic, "channel": change.channel, "last": change.last}
            for change in new], schema=NAMES_SCHEMA)

    def new_violations(self) -> list[monitors.Violation]:
        """The violations found since the last call."""
        found = []
        for index, monitor in enumerate(self.judge.monitors):
            found += monitor.violations[self._reported.get(index, 0):]
            self._reported[index] = len(monitor.violations)
        return sorted(found, key=lambda violation: violation.ts)

    def feed(self, rows: pa.Table | pa.RecordBatch) -> None:
        """The nsqd's next rows, in order: the bulk (a connection's message frames or FINs, a publish's bodies) taken
        column by column, every other row one by one."""
        for start, end, key in _stretches(rows):
            if key in (MESSAGES, FINS):
                self._take_bulk(key, _Bulk(rows.slice(start, end - start), key))
            elif key == Kind.PUBLISH and self._pending is not None \
                    and self._pending[0] == rows["conn_id"][start].as_py():
                self._pending[2].extend(rows["body_hash"].slice(start, end - start).to_pylist())
            else:  # any other row, and bodies of no publish command the judge holds, as _take has them
                for row in rows.slice(start, end - start).to_pylist():
                    self._take(row)

    def _take_bulk(self, key: str, bulk: _Bulk) -> None:
        """A stretch of one connection's message frames or FINs, as ``_take`` would take them row by row: each
        extends the run before it, unless it may not (an ID again, another line's shape) or something scheduled
        comes first; a run ends there, and the row starts the next one."""
        judge, scheduled = self.judge, self._scheduled
        self._flush_publish()
        ts, i = bulk.ts, 0
        while i < len(ts):
            # rows before ``limit`` come before anything scheduled
            limit = bulk.before(scheduled[0][0], scheduled[0][1]) if scheduled else len(ts)
            run = self._run_rows
            if run is not None and run.key == key and run.conn_id == bulk.conn_id and i < limit:
                taken = run.extend(bulk, i, limit)
                if taken:
                    i += taken
                    self.last_ts = ts[i - 1]
                if i == len(ts):
                    break
            if run is not None:
                self._run_rows = None
                judge.observe_run(run.conn_id, run.run())
            while scheduled and (scheduled[0][0], scheduled[0][1]) < (ts[i], 1):
                self._run(heapq.heappop(scheduled))
            self.last_ts = ts[i]
            if bulk.conn_id in judge.connections and self.openings[bulk.conn_id].started:
                self._run_rows = RunRows(bulk, i)
            i += 1

    def _flush_publish(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            self.judge.observe(pending[0], _command(pending[1], pending[2]))

    def _take(self, row: dict) -> None:
        """One row that is not part of a stretch of the bulk."""
        judge, scheduled = self.judge, self._scheduled
        ts = row["ts_ns"] / NS
        kind, conn_id = row["kind"], row["conn_id"]
        pending = self._pending
        if pending is not None:
            if kind == Kind.PUBLISH and pending[0] == conn_id:
                pending[2].append(row["body_hash"])
                return
            self._flush_publish()
        if self._run_rows is not None:
            run, self._run_rows = self._run_rows, None
            judge.observe_run(run.conn_id, run.run())
        while scheduled and (scheduled[0][0], scheduled[0][1]) < (ts, 1):
            self._run(heapq.heappop(scheduled))
        self.last_ts = ts
        if conn_id not in judge.connections or not self.openings[conn_id].started:
            return
        if kind == Kind.COMMAND:
            if row["name"] in ("PUB", "MPUB", "DPUB"):
                self._pending = (conn_id, row, [])
            else:
                judge.observe(conn_id, _command(row, []))
        elif kind == Kind.TLS:
            judge.tls_record(conn_id, ts, CLIENT if row["status"] == Direction.CLIENT else BROKER,
                             Record.from_text(row["name"], row["text"] or ""))
        elif kind == Kind.ERROR and row["name"] == TLS_OPAQUE:  # the rest is not seen, as if it had ended
            if judge.connections[conn_id].open:
                judge.close(conn_id, ts, None)
            self._encrypted.add(conn_id)
        elif kind == Kind.ERROR:
            answer = judge.connections[conn_id].identify_answer or {}
            where = _WHERE.get(row["name"]) or next(
                (layer for layer in ("snappy", "deflate") if answer.get(layer) is True), STREAM)
            judge.observe(conn_id, Observed(ts, UNREADABLE, where, row["text"] or ""))
        elif kind == Kind.FRAME:
            event = _frame(row)
            answer = self._answers.get(conn_id)
            if event.name == JSON and answer is not None:  # the first JSON answer: its fields read whole
                event, self._answers[conn_id] = event._replace(fields=answer), None
            judge.observe(conn_id, event)

    def advance(self, ts: float) -> None:
        """No row before ``ts`` is still to come (watch: a batch's rows are fed): what is scheduled before it runs,
        so that a connection's close, and what nsqd did then (``new_changes``), is not held for a later row."""
        self._flush_publish()
        if self._run_rows is not None:
            self.judge.observe_run(self._run_rows.conn_id, self._run_rows.run())
            self._run_rows = None
        while self._scheduled and self._scheduled[0][0] < ts:
            self._run(heapq.heappop(self._scheduled))

    def finish(self) -> monitors.Judge:
        self.advance(float("inf"))
        self.judge.finish(self.last_ts)
        return self.judge

    def _run(self, entry: tuple) -> None:
        ts, order, _, what = entry
        self.last_ts = max(self.last_ts, ts)
        if order == 0:
            self.judge.open(what.conn_id, ts, what.started, what.whole, server=what.server, client=what.client,
                            seen_until=what.seen_until)
        elif order == 1:
            exchange, action = what
            self.judge.http_exchange(exchange)
            if action is not None:
                self.judge.http(action)
        elif what.conn_id not in self._encrypted:
            self.judge.close(what.conn_id, ts, what.closed_by, what.client_fin)


def _stretches(rows: pa.Table | pa.RecordBatch) -> Iterator[tuple[int, int, str | None]]:
    """``rows`` cut where the bulk starts or ends: (start, end, key), key MESSAGES or FINS for one connection's
    message frames or FINs (a FIN of no size word), Kind.PUBLISH for one connection's
    publish rows, None for any other rows."""
    if rows.num_rows == 0:
        return
    kind, name, known = rows["kind"], rows["name"], pc.is_valid(rows["msg_id"])
    messages = pc.and_(pc.and_(pc.equal(kind, Kind.FRAME), pc.equal(name, "message")), known)
    fins = pc.and_(pc.and_(pc.and_(pc.equal(kind, Kind.COMMAND), pc.equal(name, FINS)), known),
                   pc.is_null(rows["size"]))
    code = (pc.fill_null(messages, False).to_numpy(zero_copy_only=False).astype(np.int8)
            + 2 * pc.fill_null(fins, False).to_numpy(zero_copy_only=False)
            + 3 * pc.equal(kind, Kind.PUBLISH).to_numpy(zero_copy_only=False))
    conn = pc.dictionary_encode(rows["conn_id"])
    conn = (conn.combine_chunks() if isinstance(conn, pa.ChunkedArray) else conn).indices.to_numpy()
    cut = (code[1:] != code[:-1]) | ((code[1:] != 0) & (conn[1:] != conn[:-1]))
    starts = [0, *(np.flatnonzero(cut) + 1).tolist(), rows.num_rows]
    keys = (None, MESSAGES, FINS, Kind.PUBLISH)
    for start, end in zip(starts, starts[1:], strict=False):
        yield start, end, keys[code[start]]


class _Bulk:
    """A stretch of one connection's message frames or FINs, as columns."""

    def __init__(self, rows: pa.Table | pa.RecordBatch, key: str):
        self.key, self.conn_id = key, rows["conn_id"][0].as_py()
        self.ts = [ts_ns / NS for ts_ns in rows["ts_ns"].to_pylist()]
        self.ids = rows["msg_id"].to_pylist()
        if key == FINS:
            self.shapes = list(zip(rows["params"].to_pylist(), rows["crlf"].to_pylist(), rows["topic"].to_pylist(),
                                   strict=True))
        else:
            self.attempts, self.bodies = rows["attempts"].to_pylist(), rows["body_hash"].to_pylist()
            self.msg_ts_ns = rows["msg_ts_ns"].to_pylist()

    def before(self, ts: float, order: int) -> int:
        """How many rows come before what is scheduled at (``ts``, ``order``): at one instant, after an opening
        and before an HTTP request or a close (ServerJudging._scheduled)."""
        return bisect.bisect_left(self.ts, ts) if order == 0 else bisect.bisect_right(self.ts, ts)


class RunRows:
    """The rows of a run (events.Run) as they come: message frames, or FINs of one line shape and topic, of one
    connection, no message ID twice."""

    def __init__(self, bulk: _Bulk, first: int):
        self.conn_id, self.key = bulk.conn_id, bulk.key
        self.ts, self.msg_ids = [bulk.ts[first]], [bulk.ids[first]]
        self.ids = {bulk.ids[first]}
        if self.key == FINS:
            self.shape = bulk.shapes[first]
        else:
            self.attempts, self.bodies = [bulk.attempts[first]], [bulk.bodies[first]]
            self.msg_ts_ns = [bulk.msg_ts_ns[first]]

    def extends(self, bulk: _Bulk, i: int) -> bool:
        """Row ``i`` of ``bulk`` (of the run's connection and key) may join the run."""
        return bulk.ids[i] not in self.ids and (self.key != FINS or bulk.shapes[i] == self.shape)

    def extend(self, bulk: _Bulk, start: int, limit: int) -> int:
        """Takes ``bulk``'s rows from ``start`` on, before ``limit``, while each may join; how many it took."""
        ids = bulk.ids[start:limit]
        fits = self.ids.isdisjoint(ids) and len(set(ids)) == len(ids) and (
            self.key != FINS or bulk.shapes[start:limit].count(self.shape) == len(ids))
        end = limit if fits else next((i for i in range(start, limit) if not self._join(bulk, i)), limit)
        if fits:
            self.ids.update(ids)
        self.ts += bulk.ts[start:end]
        self.msg_ids += bulk.ids[start:end]
        if self.key == MESSAGES:
            self.attempts += bulk.attempts[start:end]
            self.bodies += bulk.bodies[start:end]
            self.msg_ts_ns += bulk.msg_ts_ns[start:end]
        return end - start

    def _join(self, bulk: _Bulk, i: int) -> bool:
        if not self.extends(bulk, i):
            return False
        self.ids.add(bulk.ids[i])
        return True

    def run(self) -> Run:
        if self.key == FINS:
            return Run(FINS, self.ts, self.msg_ids, [], [], [], *self.shape)
        return Run(MESSAGES, self.ts, self.msg_ids, self.attempts, self.bodies, self.msg_ts_ns)


def _address(end: str | None) -> str | None:
    """An end of a connection ("ip port", the events' column) as Go's net.Addr names it: [v6]:port."""
    if not end or " " not in end:
        return None
    host, port = end.rsplit(" ", 1)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _command(row: dict, bodies: list) -> Observed:
    verb = row["name"]
    fields = _identify_body(row["identify"]) if verb == "IDENTIFY" else None
    return Observed(row["ts_ns"] / NS, COMMAND, verb, msg_id=row["msg_id"],
                    number=row["number"] if verb in _NUMBER else None, topic=row["topic"],
                    channel=row["channel"] if verb == "SUB" else None, bodies=tuple(bodies), fields=fields,
                    params=row["params"], crlf=row["crlf"], size=row["size"])


def _identify_body(body: str | None) -> dict | None:
    """The IDENTIFY's JSON as sent (its keys in any case, ID-14)."""
    try:
        fields = json.loads(body or "")
    except ValueError:
        return None
    return fields if isinstance(fields, dict) else None


def _frame(row: dict) -> Observed:
    ts, kind = row["ts_ns"] / NS, _FRAMES[row["name"]]
    if kind == MESSAGE:
        return Observed(ts, MESSAGE, msg_id=row["msg_id"], attempts=row["attempts"], msg_ts_ns=row["msg_ts_ns"],
                        bodies=(row["body_hash"],))
    if kind == ERROR:  # the decoder read the ID an E_FIN_FAILED, ... names (msg_id), as from_frame does
        return Observed(ts, ERROR, row["code"] or "", row["text"] or "", msg_id=row["msg_id"])
    text = row["text"] or ""
    if row["status"] == Status.OUTSIDE_TLS:
        return Observed(ts, kind, text, OUTSIDE_TLS)
    if kind == RESPONSE and text.startswith("{"):
        try:
            fields = json.loads(text)
        except ValueError:
            fields = None
        return Observed(ts, RESPONSE, JSON, fields=fields if isinstance(fields, dict) else None)
    return Observed(ts, kind, text if kind == RESPONSE else "")


# ---- a small capture, in this process ---------------------------------------------------------------------------
def judge_capture(path: str, nsq_ports: frozenset[int], http_ports: frozenset[int] = frozenset(),
                  changes: list[pa.Table] | None = None, runs: bool = True, share: tuple[int, int] = (0, 1)
                  ) -> dict[str, monitors.Judge]:
    """A small capture judged without Spark: its segments by flow, each connection reassembled whole; the V2 ones
    decoded, the HTTP ones (to ``http_ports``, the brokers' HTTP APIs) read for the requests that change delivery;
    then each nsqd's rows through a ``ServerJudging``; ``changes`` gets each nsqd's ``NAMES`` rows; ``runs``: as
    Judge's; ``share``: as new_judge's."""
    from spark_analysis.derive import tallies

    flows: dict[str, list] = {}
    for batch in read_range(ByteRange(str(path), 0, 1 << 62)):
        for row in batch.to_pylist():
            if row["error"] is None:
                flows.setdefault(row["flow"], []).append(tuple(row[name] for name in _SEGMENT))
    events, http_rows = [], []
    for flow, segments in flows.items():
        for conn in reassemble(flow, sorted(segments, key=lambda row: row[0]), nsq_ports | http_ports):
            if conn.server[1] in http_ports:
                reading = HttpReading(conn.server[0])
                http_rows += reading.feed(conn) + reading.end()
            else:
                events.append(decode_connection(conn, nsq_ports))
    if not events:
        return {}
    events = pa.concat_tables(events)
    kind = tallies.SUMMARY_TALLIES["connections"]
    connections = tallies.Tallies({"connections": kind}, {
        "connections": kind.prepare(events.filter(pc.equal(events["kind"], Kind.CONNECTION)))}).connections()
    undecoded = tallies.undecoded(events)
    observed = observed_rows(events, 0)
    http = http_actions(pa.Table.from_pylist(http_rows, schema=HTTP_SCHEMA)) if http_ports else None
    return judge_servers(openings(connections, undecoded), http, lambda server: observed.filter(
        pc.equal(observed["server"], server)).sort_by(JUDGING_ORDER), changes, runs, share)


def judge_servers(by_server: dict[str, list[Opening]], http: dict[str, list | None] | None, rows_of,
                  changes: list[pa.Table] | None = None, runs: bool = True, share: tuple[int, int] = (0, 1)
                  ) -> dict[str, monitors.Judge]:
    """Each nsqd's judge: ``rows_of(server)`` its observed rows in order; ``http``: the HTTP requests that change
    delivery by the broker's host (None: not read; a host without any had none); ``changes`` gets each nsqd's
    ``NAMES`` rows."""
    hosts = [server.split(" ")[0] for server in by_server]
    judges = {}
    with without_cycle_collection():
        for server, connections in by_server.items():
            judging = ServerJudging(connections, http_actions_of(server, hosts, http), runs, share)
            judging.feed(rows_of(server))
            judges[server] = judging.finish()
            if changes is not None:
                changes.append(judging.new_changes(server))
    return judges


def http_actions_of(server: str, hosts: list[str], http: dict[str, list | None] | None) -> list | None:
    """A host's HTTP requests are this server's (an nsqd's, or an nsqlookupd's) only where it is the one of
    ``hosts`` (the nsqds', or the nsqlookupds') on that host."""
    host = server.split(" ")[0]
    return http.get(host, []) if http is not None and hosts.count(host) == 1 else None


class HttpReading:
    """One connection to a broker's HTTP API, window after window (``feed``, then ``end``): each request with its
    answer, once read, as an ``HTTP_SCHEMA`` row (``changes_delivery``: judge.http_action's); a capture that lost
    any of the connection (its start, a gap, an answer) makes one ``unreadable`` row, and no more. Its rows go to
    the exchange's ``TABLE``."""

    TABLE = HTTP

    def __init__(self, host: str):
        self.host = host
        self.requests, self.responses = HttpDecoder(requests=True), HttpDecoder(requests=False)
        self.asked: list[tuple[float, Request]] = []  # (ts, request) awaiting their answers
        self.unreadable = False

    def feed(self, conn) -> list[dict]:
        if self.unreadable:
            return []
        if conn.c2s.gap_count or conn.s2c.gap_count or not conn.c2s.syn_seen:
            return self._lost()
        answers = []
        try:
            for _, data, ts_ns in conn.c2s.chunks:
                requests = self.requests.feed(data)
                self.asked += [(ts_ns / NS, request) for request in requests]
                self.responses.asked.extend(request.method for request in requests)
            for _, data, ts_ns in conn.s2c.chunks:
                answers += [(ts_ns / NS, response) for response in self.responses.feed(data)]
        except ProtocolViolation:
            return self._lost()
        answered, self.asked = self.asked[:len(answers)], self.asked[len(answers):]
        return [self._row(ts, request, at, answer)
                for (ts, request), (at, answer) in zip(answered, answers, strict=False)]

    def end(self) -> list[dict]:
        """The connection ended: a request still unanswered that ``changes`` the broker leaves its outcome unknown."""
        if not self.unreadable and any(self.changes(request) for _, request in self.asked):
            return self._lost()
        return []

    def changes(self, request: Request) -> bool:
        """The request changes what the judge follows of the broker (nsqd: delivery)."""
        return monitors.http_action(0.0, request, 0) is not None

    def action(self, ts: float, request: Request, status: int) -> monitors.HttpAction | None:
        """What the request does to delivery (``changes_delivery``), for ServerJudging's ledger."""
        return monitors.http_action(ts, request, status)

    def _lost(self) -> list[dict]:
        self.unreadable = True
        return [{"host": self.host, "ts_ns": 0, "unreadable": True}]

    def _row(self, ts: float, request: Request, answered: float, response: Response) -> dict:
        action = self.action(ts, request, response.status)
        kept = KEPT_REQUEST if request.path.startswith(_READ_BODIES) else 0
        row = {"host": self.host, "ts_ns": round(ts * NS), "status": response.status, "unreadable": False,
               "changes_delivery": action is not None,
               "answered_ts_ns": round(answered * NS), "method": request.method, "target": request.target,
               "request_headers": list(request.headers.items()), "request_body": request.body[:kept],
               "request_size": len(request.body), "response_headers": list(response.headers.items()),
               "response_body": response.body[:KEPT_RESPONSE], "response_size": len(response.body)}
        if action is not None:
            row.update(path=action.path, topic=action.topic, channel=action.channel,
                       bodies=list(action.bodies) if action.bodies is not None else None, defer_ms=action.defer_ms)
        return row


def http_actions(rows: pa.Table) -> dict[str, list[tuple[HttpExchange, monitors.HttpAction | None]] | None]:
    """The HTTP rows (``HTTP_SCHEMA``) as each host's exchanges in time order, each with the action it is for the
    judge's ledger (None: it changes no delivery); None for a host with an unreadable connection."""
    by_host: dict[str, list | None] = {}
    for row in rows.sort_by("ts_ns").to_pylist():
        host = row["host"]
        if row["unreadable"]:
            by_host[host] = None
        elif by_host.setdefault(host, []) is not None:
            by_host[host].append((_exchange(row), monitors.HttpAction(
                row["ts_ns"] / NS, row["path"], row["topic"], row["channel"], row["status"],
                tuple(row["bodies"]) if row["bodies"] is not None else None, row["defer_ms"])
                if row["changes_delivery"] else None))
    return by_host


def _exchange(row: dict) -> HttpExchange:
    def size(body: bytes, whole: int) -> int | None:
        return None if len(body) == whole else whole

    request_body, response_body = row["request_body"] or b"", row["response_body"] or b""
    return HttpExchange(
        row["ts_ns"] / NS,
        Request(row["method"], row["target"], request_body, dict(row["request_headers"] or ()),
                size(request_body, row["request_size"])),
        Response(row["status"], response_body,
                 dict(row["response_headers"] or ()), size(response_body, row["response_size"])),
        row["answered_ts_ns"] / NS)
