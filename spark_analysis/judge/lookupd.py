"""A capture's nsqlookupd traffic through nsqlookupd's monitors (LOOKUPD_MONITORS).

Each V1 connection (a decoding task's, window after window: ``V1Rows``) becomes rows of the exchange's ``lookupd``
table: its opening, its bytes each way, its end, in the connection's order (``seq``). One ``LookupdJudging`` per
nsqlookupd takes them in capture time, with the HTTP exchanges of its API where the capture holds them. The Spark
job (judge/job.py) shuffles the rows by nsqlookupd and sorts them; ``judge_lookupd_capture`` does the same in this
process for a small capture."""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc

from nsq_protocol import monitors
from nsq_protocol.http import HttpDecoder
from nsq_protocol.monitors import BROKER, CLIENT
from nsq_protocol.wire import ProtocolViolation
from spark_analysis.read.pcapfile import ByteRange, read_range
from spark_analysis.read.reassembly import Connection, Gap, reassemble

NS = 1_000_000_000
LOOKUPD = "lookupd"  # the exchange's table of nsqlookupd's V1 connections, for the judging job
LOOKUPD_SCHEMA = pa.schema([
    ("server", pa.string()), ("conn_id", pa.string()), ("ts_ns", pa.int64()),
    ("seq", pa.int64()),  # the row's place in its connection: the order the judge takes rows of one instant in
    ("what", pa.int8()),  # OPENED, FROM_CLIENT, FROM_SERVER, CLOSED
    ("data", pa.binary()),  # the bytes, in time order, as the capture placed them
    ("client", pa.string()),  # OPENED: "host:port" of the client's end (lookupd's producer ID, L-TCP-04)
    ("started", pa.bool_()),  # OPENED: the connection's start (the magic) is in the capture
    ("closed_by", pa.string()),  # CLOSED: client, broker, or null where the capture does not say (or lost bytes)
])
OPENED, FROM_CLIENT, FROM_SERVER, CLOSED = range(4)
_SEGMENT = ("ts_ns", "src", "dst", "sport", "dport", "seq", "flags", "payload")


class V1Rows:
    """One nsqlookupd connection as the judge's rows, a window at a time. After a hole in its bytes the judge can
    no longer tell commands from replies: the connection ends there for it."""

    def __init__(self) -> None:
        self.seq = 0
        self.lost = False

    def window(self, conn: Connection) -> pa.Table:
        rows: list[dict] = []
        server = f"{conn.server[0]} {conn.server[1]}"

        def add(ts_ns: int, what: int, **fields) -> None:
            rows.append({"server": server, "conn_id": conn.conn_id, "ts_ns": ts_ns, "seq": self.seq, "what": what,
                         **fields})
            self.seq += 1

        if self.seq == 0:
            first = conn.c2s.window_pieces[0] if conn.c2s.window_pieces else None
            started = conn.c2s.syn_seen and first is not None and not isinstance(first, Gap) and first[0] == 0
            add(conn.first_ts_ns, OPENED, client="%s:%d" % conn.client, started=started)
        if self.lost:
            return pa.Table.from_pylist(rows, schema=LOOKUPD_SCHEMA)
        # at one instant the client's bytes before the server's: an answer follows its command
        pieces = sorted([(piece.ts_ns if isinstance(piece, Gap) else piece[2], what, piece)
                         for what, stream in ((FROM_CLIENT, conn.c2s), (FROM_SERVER, conn.s2c))
                         for piece in stream.window_pieces], key=lambda entry: entry[:2])
        for ts_ns, what, piece in pieces:
            if isinstance(piece, Gap):
                self.lost = True
                add(ts_ns, CLOSED)
                break
            add(ts_ns, what, data=piece[1])
        if conn.complete and not self.lost:
            ends = [(stream.fin_ts_ns, by) for stream, by in ((conn.c2s, CLIENT), (conn.s2c, BROKER))
                    if stream.fin_ts_ns is not None]
            if ends or conn.rst_seen:
                at, by = min(ends) if ends else (conn.last_ts_ns, None)
                add(at, CLOSED, closed_by=by)
        return pa.Table.from_pylist(rows, schema=LOOKUPD_SCHEMA)


class LookupdJudging:
    """One nsqlookupd's judge, fed its connections' rows sorted by (ts_ns, conn_id, seq), in as many parts as
    come; ``http``: its API's exchanges (None: the capture does not hold them)."""

    def __init__(self, http: list[monitors.HttpExchange] | None, **known):
        self.judge = monitors.new_lookupd_judge(http_seen=http is not None, timing=True, **known)
        self._http = deque(sorted(http or (), key=lambda exchange: exchange.ts))
        self._reported = 0
        self.last_ts = 0.0

    def feed(self, rows: Iterable[dict]) -> None:
        judge = self.judge
        for row in rows:
            ts = row["ts_ns"] / NS
            while self._http and self._http[0].ts < ts:
                judge.http(self._http.popleft())
            self.last_ts = max(self.last_ts, ts)
            what, name = row["what"], row["conn_id"]
            if what == OPENED:
                judge.open(name, ts, row["started"], row["client"])
            elif what == FROM_CLIENT:
                judge.client_bytes(name, ts, row["data"])
            elif what == FROM_SERVER:
                judge.server_bytes(name, ts, row["data"])
            else:
                judge.close(name, ts, row["closed_by"])

    def finish(self) -> monitors.LookupdJudge:
        while self._http:
            exchange = self._http.popleft()
            self.last_ts = max(self.last_ts, exchange.ts)
            self.judge.http(exchange)
        self.judge.finish(self.last_ts)
        return self.judge

    def new_violations(self) -> list[monitors.Violation]:
        """The violations found since the last call."""
        found = self.judge.violations
        new, self._reported = found[self._reported:], len(found)
        return new


def lookupd_servers(connections: pa.Table, nsq_ports: frozenset[int]) -> frozenset[str]:
    """The nsqlookupds of a connections table (derive/tallies.py): the servers of its V1 connections but the nsqds'
    ports (V1Rows cuts no rows there)."""
    servers = connections.filter(pc.fill_null(connections["is_lookupd"], False))["server"].to_pylist()
    return frozenset(server for server in servers if int(server.rsplit(" ", 1)[1]) not in nsq_ports)


def judge_lookupd_capture(path: str, tcp_ports: frozenset[int], http_ports: frozenset[int] = frozenset(),
                          whole: bool = False, nsqd_clients: bool = False) -> dict[str, monitors.LookupdJudge]:
    """Each nsqlookupd's judge (by "host port" of its TCP side), in this process. ``whole``: the capture starts with
    the lookupds (every registration is in it); ``nsqd_clients``: their V1 clients are nsqds (registration.toml's
    rules judge them)."""
    flows: dict[str, list] = {}
    for batch in read_range(ByteRange(str(path), 0, 1 << 62)):
        for row in batch.to_pylist():
            if row["error"] is None:
                flows.setdefault(row["flow"], []).append(tuple(row[name] for name in _SEGMENT))
    rows: dict[str, list[dict]] = {}
    http: dict[str, list[monitors.HttpExchange]] = {}
    for flow, segments in flows.items():
        for conn in reassemble(flow, sorted(segments, key=lambda row: row[0]), tcp_ports | http_ports):
            if conn.server[1] in tcp_ports:
                for row in V1Rows().window(conn).to_pylist():
                    rows.setdefault(row["server"], []).append(row)
            else:
                http.setdefault(conn.server[0], []).extend(_exchanges(conn))
    judges = {}
    for server, server_rows in rows.items():
        judging = LookupdJudging(http.get(server.split(" ")[0], []) if http_ports else None, whole=whole,
                                 nsqd_clients=nsqd_clients)
        judging.feed(heapq.nsmallest(len(server_rows), server_rows,
                                     key=lambda row: (row["ts_ns"], row["conn_id"], row["seq"])))
        judges[server] = judging.finish()
    return judges


def _exchanges(conn: Connection) -> list[monitors.HttpExchange]:
    """The exchanges, each at its answer's time; a connection the capture lost any of gives none."""
    if conn.c2s.gap_count or conn.s2c.gap_count or not conn.c2s.syn_seen:
        return []
    requests, responses = HttpDecoder(requests=True), HttpDecoder(requests=False)
    try:
        asked = [request for _, data, _ in conn.c2s.chunks for request in requests.feed(data)]
        answers = [(ts_ns / NS, answer) for _, data, ts_ns in conn.s2c.chunks for answer in responses.feed(data)]
    except ProtocolViolation:
        return []
    return [monitors.HttpExchange(ts, request.method, request.target, answer.status, answer.body)
            for request, (ts, answer) in zip(asked, answers, strict=False)]
