"""A capture's decoded connections through the catalogue's monitors (nsq_protocol.monitors): the decoded rows of
each V2 connection become the monitors' events, and one judge per nsqd takes its connections' events in capture
time. Captures time frames as they crossed the wire, so every rule judges (``timing``). The brokers' HTTP API is
read where the caller names its ports (``judge_capture``); without it, and where a connection was caught mid-way,
lost bytes or is in TLS, the judge cannot see the traffic whole, and the rules that need every publish, every
consumer of a channel or every HTTP request that changes delivery say "not judged"."""

from __future__ import annotations

import json
from collections.abc import Iterable

import pyarrow as pa

from nsq_protocol import monitors
from nsq_protocol.http import HttpDecoder
from nsq_protocol.monitors import BROKER, CLIENT, Observed
from nsq_protocol.monitors.events import COMMAND, ERROR, HEARTBEAT, JSON, MESSAGE, RESPONSE
from nsq_protocol.wire import ProtocolViolation
from spark_analysis.decode.kinds import Close, Kind
from spark_analysis.decode.v2 import decode_connection
from spark_analysis.read.pcapfile import ByteRange, read_range
from spark_analysis.read.reassembly import reassemble

NS = 1_000_000_000
_FRAMES = {"message": MESSAGE, "heartbeat": HEARTBEAT, "response": RESPONSE, "error": ERROR}
_CLOSED_BY = {Close.SERVER_FIN: BROKER, Close.CLIENT_FIN: CLIENT, Close.RST: None}
_NUMBER = {"RDY": "rdy", "REQ": "delay_ms", "DPUB": "delay_ms", "MPUB": "message_count"}
_SEGMENT = ("ts_ns", "src", "dst", "sport", "dport", "seq", "flags", "payload")


def judge_capture(path: str, nsq_ports: frozenset[int], http_ports: frozenset[int] = frozenset()
                  ) -> dict[str, monitors.Judge]:
    """A small capture judged in this process, without Spark: its segments by flow, each connection reassembled
    whole; the V2 ones decoded, the HTTP ones (to ``http_ports``, the brokers' HTTP APIs) read for the requests that
    change delivery; then ``judge_connections``."""
    flows: dict[str, list] = {}
    for batch in read_range(ByteRange(str(path), 0, 1 << 62)):
        for row in batch.to_pylist():
            if row["error"] is None:
                flows.setdefault(row["flow"], []).append(tuple(row[name] for name in _SEGMENT))
    tables, http, unreadable = [], {}, set()
    for flow, segments in flows.items():
        for conn in reassemble(flow, sorted(segments, key=lambda row: row[0]), nsq_ports | http_ports):
            if conn.server[1] not in http_ports:
                tables.append(decode_connection(conn, nsq_ports))
            elif (actions := _http_actions(conn)) is None:
                unreadable.add(conn.server[0])  # a host whose HTTP requests are not all known
            else:
                http.setdefault(conn.server[0], []).extend(actions)
    for host in unreadable:
        http[host] = None
    return judge_connections(tables, http if http_ports else None)


def _http_actions(conn) -> list[monitors.HttpAction] | None:
    """The requests of one connection to a broker's HTTP API that change delivery, with their answers' status; None
    when the capture lost some of it, or a request that changes delivery got no answer."""
    if conn.c2s.gap_count or conn.s2c.gap_count:
        return None
    asked, answers = [], []
    try:
        requests, responses = HttpDecoder(requests=True), HttpDecoder(requests=False)
        for _, data, ts_ns in conn.c2s.chunks:
            asked += [(ts_ns / NS, request) for request in requests.feed(data)]
        for _, data, _ in conn.s2c.chunks:
            answers += responses.feed(data)
    except ProtocolViolation:
        return None
    actions = [monitors.http_action(ts, request, answers[index].status if index < len(answers) else 0)
               for index, (ts, request) in enumerate(asked)]
    if any(action is not None for action in actions[len(answers):]):
        return None
    return [action for action in actions if action is not None]


def judge_connections(tables: Iterable[pa.Table], http: dict[str, list | None] | None = None
                      ) -> dict[str, monitors.Judge]:
    """Each nsqd's judge (by server address), run over the decoded events of its V2 connections and, where ``http``
    has them whole (by the broker's host; a host without any had none), the HTTP requests that change delivery."""
    timelines: dict[str, list] = {}
    for events in tables:
        rows = events.to_pylist()
        connection = next((row for row in rows if row["kind"] == Kind.CONNECTION), None)
        if connection is None or connection["name"] != "nsq":
            continue
        timelines.setdefault(connection["server"], []).extend(_timeline(rows, connection))
    judges = {}
    hosts = [server.split(" ")[0] for server in timelines]
    for server, timeline in timelines.items():
        host = server.split(" ")[0]
        # a host's HTTP requests are this nsqd's only where it is the one nsqd on that host
        actions = http.get(host, []) if http is not None and hosts.count(host) == 1 else None
        judge = judges[server] = monitors.new_judge(timing=True, http_seen=actions is not None)
        timeline += [(action.ts, 1, None, action) for action in actions or ()]
        timeline.sort(key=lambda entry: entry[0])
        for ts, order, name, what in timeline:
            if order == 0:
                judge.open(name, ts, *what)
            elif order == 2:
                judge.close(name, ts, what)
            elif name is None:
                judge.http(what)
            else:
                judge.observe(name, what)
        judge.finish(timeline[-1][0])
    return judges


def _timeline(rows: list[dict], connection: dict) -> list[tuple]:
    """(ts, order, connection, what): its opening, its events, its end, sortable with other connections'."""
    facts = connection["connection"]
    name, first = connection["conn_id"], min(row["ts_ns"] for row in rows) / NS
    lost = any(row["kind"] == Kind.GAP for row in rows)
    # after bytes it cannot decode, nsqd ends the connection too (C-19, C-21): only its end can be missing
    undecoded = any(row["kind"] == Kind.ERROR for row in rows)
    whole = facts["syn_seen"] and facts["codec"] != "tls" and not lost and (not undecoded or
                                                                             facts["close"] != Close.OPEN)
    started = whole and facts["magic"] == "  V2" and not undecoded
    timeline = [(first, 0, name, (started, whole))]
    if started:
        answer = {key: value for key, value in (facts["identify_response"] or {}).items() if value is not None}
        observed = list(_observed(rows, answer or None))
        timeline += [(event.ts, 1, name, event) for event in observed]
    if facts["close"] != Close.OPEN:
        timeline.append((facts["last_ts_ns"] / NS, 2, name, _CLOSED_BY[facts["close"]]))
    return timeline


def _observed(rows: list[dict], identify_answer: dict | None) -> Iterable[Observed]:
    """The rows as the monitors' events: a publish command takes the body hashes of its publish rows; the first JSON
    answer the fields the decoder read from it whole (a row's text is cut short)."""
    ordered = sorted(range(len(rows)), key=lambda index: rows[index]["ts_ns"])
    pending = None  # a publish command, until its publish rows are taken
    for index in ordered:
        row = rows[index]
        kind = row["kind"]
        if kind == Kind.PUBLISH and pending is not None:
            pending["bodies"].append(row["body_hash"])
            continue
        if pending is not None:
            yield _event(pending)
            pending = None
        if kind == Kind.COMMAND:
            pending = {"row": row, "bodies": []}
            if row["name"] not in ("PUB", "MPUB", "DPUB"):
                yield _event(pending)
                pending = None
        elif kind == Kind.FRAME and row["direction"] == "s2c":
            event = _frame(row)
            if event.name == JSON and identify_answer is not None:
                event, identify_answer = event._replace(fields=identify_answer), None
            yield event
    if pending is not None:
        yield _event(pending)


def _event(pending: dict) -> Observed:
    row = pending["row"]
    verb = row["name"]
    fields = _identify_body(row["identify"]) if verb == "IDENTIFY" else None
    number = row[_NUMBER[verb]] if verb in _NUMBER else None
    return Observed(row["ts_ns"] / NS, COMMAND, verb, msg_id=row["msg_id"], number=number, topic=row["topic"],
                    channel=row["channel"] if verb == "SUB" else None, bodies=tuple(pending["bodies"]),
                    fields=fields)


def _identify_body(identify: dict | None) -> dict:
    """The IDENTIFY's JSON as sent (its keys in any case, ID-14), else the fields the decoder typed."""
    identify = identify or {}
    try:
        body = json.loads(identify.get("body") or "")
    except ValueError:
        body = None
    if isinstance(body, dict):
        return body
    return {key: value for key, value in identify.items() if value is not None and key != "body"}


def _frame(row: dict) -> Observed:
    ts, kind = row["ts_ns"] / NS, _FRAMES[row["name"]]
    if kind == MESSAGE:
        return Observed(ts, MESSAGE, msg_id=row["msg_id"], attempts=row["attempts"], msg_ts_ns=row["msg_ts_ns"],
                        bodies=(row["body_hash"],))
    if kind == ERROR:  # the decoder read the ID an E_FIN_FAILED, ... names (msg_id), as from_frame does
        return Observed(ts, ERROR, row["code"] or "", row["text"] or "", msg_id=row["msg_id"])
    text = row["text"] or ""
    if kind == RESPONSE and text.startswith("{"):
        try:
            fields = json.loads(text)
        except ValueError:
            fields = None
        return Observed(ts, RESPONSE, JSON, fields=fields if isinstance(fields, dict) else None)
    return Observed(ts, kind, text if kind == RESPONSE else "")
