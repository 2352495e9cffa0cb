"""A small capture's nsqlookupd traffic through nsqlookupd's monitors (LOOKUPD_MONITORS) without Spark: each
nsqlookupd host's V1 connections (to ``tcp_ports``) and HTTP exchanges (to ``http_ports``), reassembled whole and
fed in capture time. The Spark job does not judge nsqlookupd yet: it would cut these connections' bytes (or the
V1 decoder's rows) per lookupd host, as it does nsqd's, and stream them through one LookupdJudge per host."""

from __future__ import annotations

import heapq

from nsq_protocol import monitors
from nsq_protocol.http import HttpDecoder
from nsq_protocol.monitors import BROKER, CLIENT
from nsq_protocol.wire import ProtocolViolation
from spark_analysis.read.pcapfile import ByteRange, read_range
from spark_analysis.read.reassembly import reassemble

NS = 1_000_000_000
_SEGMENT = ("ts_ns", "src", "dst", "sport", "dport", "seq", "flags", "payload")
_CLIENT_FIRST, _SERVER_NEXT = 0, 1  # at one instant a command before its answer


def judge_lookupd_capture(path: str, tcp_ports: frozenset[int], http_ports: frozenset[int] = frozenset(),
                          whole: bool = False, nsqd_clients: bool = False) -> dict[str, monitors.LookupdJudge]:
    """Each nsqlookupd host's judge. ``whole``: the capture starts with the lookupds (every registration is in
    it); ``nsqd_clients``: their V1 clients are nsqds (registration.toml's rules judge them)."""
    flows: dict[str, list] = {}
    for batch in read_range(ByteRange(str(path), 0, 1 << 62)):
        for row in batch.to_pylist():
            if row["error"] is None:
                flows.setdefault(row["flow"], []).append(tuple(row[name] for name in _SEGMENT))
    feeds: dict[str, list] = {}  # host -> (ts, order, connection name, what) in capture time
    for flow, segments in flows.items():
        for conn in reassemble(flow, sorted(segments, key=lambda row: row[0]), tcp_ports | http_ports):
            host = conn.server[0]
            if conn.server[1] in tcp_ports:
                feeds.setdefault(host, []).extend(_v1_feed(conn))
            else:
                feeds.setdefault(host, []).extend(_http_feed(conn))
    judges = {}
    for host, feed in feeds.items():
        judge = monitors.new_lookupd_judge(http_seen=bool(http_ports), timing=True, whole=whole,
                                           nsqd_clients=nsqd_clients)
        for _, _, name, what in heapq.nsmallest(len(feed), feed, key=lambda entry: entry[:2]):
            what(judge, name)
        judge.finish(max((entry[0] for entry in feed), default=0.0))
        judges[host] = judge
    return judges


def _v1_feed(conn) -> list:
    name, started = conn.conn_id, conn.c2s.syn_seen and not conn.c2s.gap_count and not conn.s2c.gap_count
    first = conn.first_ts_ns / NS
    feed = [(first, _CLIENT_FIRST, name, lambda judge, name: judge.open(
        name, first, started, "%s:%d" % conn.client))]
    for direction, stream in ((_CLIENT_FIRST, conn.c2s), (_SERVER_NEXT, conn.s2c)):
        for _, data, ts_ns in stream.chunks:
            feed.append((ts_ns / NS, direction, name, _bytes(direction, ts_ns / NS, data)))
    ends = [(stream.fin_ts_ns, by) for stream, by in ((conn.c2s, CLIENT), (conn.s2c, BROKER))
            if stream.fin_ts_ns is not None]
    if ends or conn.rst_seen:
        at, by = min(ends) if ends else (conn.last_ts_ns, None)
        feed.append((at / NS, _SERVER_NEXT + 1, name, lambda judge, name: judge.close(name, at / NS, by)))
    return feed


def _bytes(direction: int, ts: float, data: bytes):
    if direction == _CLIENT_FIRST:
        return lambda judge, name: judge.client_bytes(name, ts, data)
    return lambda judge, name: judge.server_bytes(name, ts, data)


def _http_feed(conn) -> list:
    """The exchanges, each at its answer's time; a connection the capture lost any of gives none."""
    if conn.c2s.gap_count or conn.s2c.gap_count or not conn.c2s.syn_seen:
        return []
    requests, responses = HttpDecoder(requests=True), HttpDecoder(requests=False)
    try:
        asked = [request for _, data, _ in conn.c2s.chunks for request in requests.feed(data)]
        answers = [(ts_ns / NS, answer) for _, data, ts_ns in conn.s2c.chunks for answer in responses.feed(data)]
    except ProtocolViolation:
        return []
    return [(ts, _SERVER_NEXT, "HTTP", _exchange(monitors.HttpExchange(
        ts, request.method, request.target, answer.status, answer.body)))
        for request, (ts, answer) in zip(asked, answers, strict=False)]


def _exchange(exchange: monitors.HttpExchange):
    return lambda judge, name: judge.http(exchange)
