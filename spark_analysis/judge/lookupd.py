"""A capture's nsqlookupd traffic through nsqlookupd's monitors (LOOKUPD_MONITORS).

Each V1 connection (a decoding task's, window after window: ``V1Rows``) becomes rows of the exchange's ``lookupd``
table: its opening, its bytes each way, its end, in the connection's order (``seq``); each connection to an
nsqlookupd's HTTP API (its ports named: ``--lookupd-http-port``) rows of ``lookupd_http`` (``LookupdHttpReading``:
the HTTP table's rows, nsqd's own apart). One ``LookupdJudging`` per nsqlookupd takes them in capture time, with the
HTTP exchanges of its host's API where the capture holds them. The Spark job (judge/job.py) shuffles the rows by
nsqlookupd and sorts them; ``judge_lookupd_capture`` does the same in this process for a small capture."""

from __future__ import annotations

import heapq
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc

from nsq_protocol import monitors
from nsq_protocol.http import HttpExchange, Request
from nsq_protocol.monitors import BROKER, CLIENT
from nsq_protocol.monitors.nsqd_names import NameChange
from spark_analysis.judge.monitoring import (
    HTTP_SCHEMA,
    NAMES_SCHEMA,
    HttpReading,
    http_actions,
    http_actions_of,
    judge_capture,
)
from spark_analysis.judge.ordering import JUDGING_ORDER
from spark_analysis.read.pcapfile import ByteRange, read_range
from spark_analysis.read.reassembly import Connection, Gap, reassemble

NS = 1_000_000_000
LOOKUPD = "lookupd"  # the exchange's table of nsqlookupd's V1 connections, for the judging job
LOOKUPD_HTTP = "lookupd_http"  # the exchange's table of nsqlookupd's HTTP exchanges (HTTP_SCHEMA)
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
_SEGMENT = ("ts_ns", "src", "dst", "sport", "dport", "seq", "flags", "payload", "ack")


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


class LookupdHttpReading(HttpReading):
    """One connection to an nsqlookupd's HTTP API: its exchanges as HTTP rows, for the exchange's ``lookupd_http``.
    None changes delivery; one lookupd may not have answered changes its registrations if it is a POST (every
    route that changes them is: nsqlookupd/http.go), which leaves them unknown."""

    TABLE = LOOKUPD_HTTP

    def changes(self, request: Request) -> bool:
        return request.method == "POST"

    def action(self, ts: float, request: Request, status: int) -> None:
        return None


def lookupd_exchanges(rows: pa.Table) -> dict[str, list[HttpExchange] | None]:
    """The ``lookupd_http`` rows as each host's exchanges; None for a host with an unreadable connection."""
    return {host: None if pairs is None else [exchange for exchange, _ in pairs]
            for host, pairs in http_actions(rows).items()}


class LookupdJudging:
    """One nsqlookupd's judge, fed its connections' rows sorted by (ts_ns, conn_id, seq), in as many parts as
    come; ``http``: its API's exchanges (None: the capture does not hold them), each taken at its answer's time
    among the rows; ``add_exchanges``: more of them (watch: a batch's); ``add_changes``: what the registering
    nsqds' traffic showed of their topics and channels (``NAMES`` rows), each taken at its time among the rows.
    ``known``: what LookupdJudge is told (``nsqd_clients``: its V1 clients are nsqds)."""

    def __init__(self, http: list[HttpExchange] | None, **known):
        self.judge = monitors.new_lookupd_judge(http_seen=http is not None, timing=True, **known)
        # a heap by time of the exchanges (at their answers) and the nsqds' changes (nsqd, NameChange); the count,
        # unique, keeps it from comparing them
        self._heard: list[tuple[float, int, HttpExchange | tuple[str, NameChange]]] = []
        self._added = 0
        self._reported = 0
        self.last_ts = 0.0
        self.add_exchanges(http or [])

    def add_exchanges(self, exchanges: list[HttpExchange] | None) -> None:
        """None: from here on some are not known."""
        if exchanges is None:
            self.judge.http_seen = False
            return
        for exchange in exchanges:
            self._hear(exchange.answered, exchange)

    def add_changes(self, rows: Iterable[dict]) -> None:
        """``NAMES`` rows: an nsqd's topic or channel changed."""
        for row in rows:
            host, port = row["server"].rsplit(" ", 1)
            self._hear(row["ts_ns"] / NS, (f"{host}:{port}", NameChange(
                row["since_ns"] / NS, row["ts_ns"] / NS, row["change"], row["topic"], row["channel"], row["last"])))

    def _hear(self, ts: float, what: HttpExchange | tuple[str, NameChange]) -> None:
        self._added += 1
        heapq.heappush(self._heard, (ts, self._added, what))

    def _take(self) -> None:
        ts, _, what = heapq.heappop(self._heard)
        self.last_ts = max(self.last_ts, ts)
        if isinstance(what, HttpExchange):
            self.judge.http(what)
        else:
            self.judge.nsqd_changed(*what)

    def feed(self, rows: pa.Table | pa.RecordBatch) -> None:
        """The nsqlookupd's next rows, in order."""
        judge, heard = self.judge, self._heard
        for row in rows.to_pylist():
            ts = row["ts_ns"] / NS
            while heard and heard[0][0] < ts:
                self._take()
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
        while self._heard:
            self._take()
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
                          whole: bool = False, nsqd_clients: bool = False, nsq_ports: frozenset[int] = frozenset(),
                          nsqd_http_ports: frozenset[int] = frozenset()) -> dict[str, monitors.LookupdJudge]:
    """Each nsqlookupd's judge (by "host port" of its TCP side), in this process; ``http_ports``: their HTTP APIs'.
    ``whole``: the capture starts with the lookupds (every registration is in it); ``nsqd_clients``: their V1
    clients are nsqds (registration.toml's rules judge them), whose own traffic, at ``nsq_ports`` (and their HTTP
    APIs at ``nsqd_http_ports``), says what they must announce (judge_capture's ``NAMES`` rows)."""
    changes: list[pa.Table] = [NAMES_SCHEMA.empty_table()]
    if nsq_ports:
        judge_capture(path, nsq_ports, nsqd_http_ports, changes)
    told = pa.concat_tables(changes).to_pylist()
    flows: dict[str, list] = {}
    for batch in read_range(ByteRange(str(path), 0, 1 << 62)):
        for row in batch.to_pylist():
            if row["error"] is None:
                flows.setdefault(row["flow"], []).append(tuple(row[name] for name in _SEGMENT))
    rows: dict[str, list[pa.Table]] = {}
    http_rows: list[dict] = []
    for flow, segments in flows.items():
        for conn in reassemble(flow, sorted(segments, key=lambda row: row[0]), tcp_ports | http_ports):
            if conn.server[1] in tcp_ports:
                window = V1Rows().window(conn)
                if window.num_rows:
                    rows.setdefault(window["server"][0].as_py(), []).append(window)
            else:
                reading = LookupdHttpReading(conn.server[0])
                http_rows += reading.feed(conn) + reading.end()
    http = lookupd_exchanges(pa.Table.from_pylist(http_rows, schema=HTTP_SCHEMA)) if http_ports else None
    hosts = [server.split(" ")[0] for server in rows]
    judges = {}
    for server, server_rows in rows.items():
        judging = LookupdJudging(http_actions_of(server, hosts, http), whole=whole, nsqd_clients=nsqd_clients)
        judging.add_changes(told)
        judging.feed(pa.concat_tables(server_rows).sort_by(JUDGING_ORDER))
        judges[server] = judging.finish()
    return judges
