"""nsqlookupd's monitors over captures (spark_analysis/judge/lookupd.py): the real nsqlookupd's traffic in
pcaps/cluster.pcap (nsqd v1.3.0 registering with it, from the magic on) breaks no rule, nor does the nsqd, and a
lookupd bug written into a capture, in its V1 replies or its HTTP answers (read where its HTTP port is named), is
named by its item."""

from __future__ import annotations

import pyarrow.parquet as pq

from nsq_protocol import wire, wire_v1
from nsq_protocol.http import HttpExchange, Request, Response
from spark_analysis.generate.capture import EPOCH_NS, MS, Capture, Connection
from spark_analysis.judge.lookupd import _SEGMENT, LookupdJudging, V1Rows, judge_lookupd_capture
from spark_analysis.read.pcapfile import ByteRange, read_range
from spark_analysis.read.reassembly import reassemble
from tests.trace.trace_helpers import PCAPS

LOOKUPD_TCP, LOOKUPD_HTTP = 24160, 24161  # tests/trace/cluster_recording.py
LOOKUPD_ADDRESS = "127.0.0.1"  # spark_analysis/generate/capture.py's both ends
IDENTIFY = b'{"broadcast_address":"127.0.0.1","hostname":"h","tcp_port":4150,"http_port":4151,"version":"1.3.0"}'
ANSWER = b'{"broadcast_address":"lk","hostname":"lk","http_port":24161,"tcp_port":24160,"version":"1.3.0"}'


def test_the_real_nsqlookupd_breaks_no_rule_in_the_cluster_capture():
    judges = judge_lookupd_capture(PCAPS / "cluster.pcap", frozenset({LOOKUPD_TCP}), frozenset({LOOKUPD_HTTP}),
                                   whole=True, nsqd_clients=True)  # nsqd's registering too
    assert [judge.violations for judge in judges.values()] == [[]]
    (judge,) = judges.values()
    (connection,) = judge.connections.values()
    # IDENTIFY, a REGISTER of the topic and of each of its two channels, the ephemeral's UNREGISTER, a PING
    assert connection.identified and connection.replies == 6 and not judge.failures


def lookupd_capture(path, reply: bytes, ping_type: bytes | None = None) -> None:
    """A producer registering a bad name, lookupd replying ``reply``; with ``ping_type``, a GET /ping to lookupd's
    HTTP API too, answered with that Content-Type."""
    capture = Capture(str(path), "pcap")
    conn = Connection(capture, "A", 40000, 1000)
    conn.ports = {"c2s": (40000, LOOKUPD_TCP), "s2c": (LOOKUPD_TCP, 40000)}
    conn.open(EPOCH_NS)
    conn.send("c2s", EPOCH_NS + MS, wire_v1.MAGIC_V1 + wire_v1.encode_command("IDENTIFY", body=IDENTIFY))
    conn.send("s2c", EPOCH_NS + 2 * MS, wire_v1.encode_reply(ANSWER))
    conn.send("c2s", EPOCH_NS + 3 * MS, wire_v1.encode_command("REGISTER", "bad!"))
    conn.send("s2c", EPOCH_NS + 4 * MS, wire_v1.encode_reply(reply))
    conn.close(EPOCH_NS + 5 * MS)
    if ping_type is not None:
        http = Connection(capture, "H", 40001, 5000)
        http.ports = {"c2s": (40001, LOOKUPD_HTTP), "s2c": (LOOKUPD_HTTP, 40001)}
        http.open(EPOCH_NS + 6 * MS)
        http.send("c2s", EPOCH_NS + 7 * MS, b"GET /ping HTTP/1.1\r\nHost: lk\r\n\r\n")
        http.send("s2c", EPOCH_NS + 8 * MS, b"HTTP/1.1 200 OK\r\nContent-Type: " + ping_type +
                  b"\r\nContent-Length: 2\r\n\r\nOK")
        http.close(EPOCH_NS + 9 * MS)
    capture.close()


def found(judges) -> set[tuple[str, str]]:
    return {(v.item, v.side) for judge in judges.values() for v in judge.violations}


def test_a_bad_name_registered_is_named_l_tcp_11(tmp_path):
    lookupd_capture(tmp_path / "bad.pcap", b"OK")
    judges = judge_lookupd_capture(tmp_path / "bad.pcap", frozenset({LOOKUPD_TCP}))
    assert {(v.item, v.side) for judge in judges.values() for v in judge.violations} == {("L-TCP-11", "broker")}
    lookupd_capture(tmp_path / "good.pcap", b"E_BAD_TOPIC REGISTER topic name 'bad!' is not valid")
    judges = judge_lookupd_capture(tmp_path / "good.pcap", frozenset({LOOKUPD_TCP}))
    assert [judge.violations for judge in judges.values()] == [[]]


def test_lookupd_http_answers_are_judged_where_its_port_is_named(tmp_path):
    lookupd_capture(tmp_path / "json.pcap", b"E_BAD_TOPIC REGISTER topic name 'bad!' is not valid", b"application/json")
    [judge] = judge_lookupd_capture(tmp_path / "json.pcap", frozenset({LOOKUPD_TCP}),
                                    frozenset({LOOKUPD_HTTP})).values()
    assert judge.http_seen and found({"": judge}) == {("L-HTTP-01", "broker")}  # /ping is plain text
    [unread] = judge_lookupd_capture(tmp_path / "json.pcap", frozenset({LOOKUPD_TCP})).values()
    assert not unread.http_seen and unread.violations == []
    lookupd_capture(tmp_path / "plain.pcap", b"E_BAD_TOPIC REGISTER topic name 'bad!' is not valid",
                    b"text/plain; charset=utf-8")
    assert found(judge_lookupd_capture(tmp_path / "plain.pcap", frozenset({LOOKUPD_TCP}),
                                       frozenset({LOOKUPD_HTTP}))) == set()


def test_exchanges_added_later_are_taken_in_answer_time_among_the_rows(tmp_path):
    """watch hands a judging each batch's exchanges: taken where their answers fall among the rows, as if all had
    come at once."""
    lookupd_capture(tmp_path / "bad.pcap", b"OK")
    flows: dict[str, list] = {}
    for batch in read_range(ByteRange(str(tmp_path / "bad.pcap"), 0, 1 << 62)):
        for row in batch.to_pylist():
            flows.setdefault(row["flow"], []).append(tuple(row[name] for name in _SEGMENT))
    [(flow, segments)] = flows.items()
    [conn] = reassemble(flow, segments, frozenset({LOOKUPD_TCP}))
    rows = V1Rows().window(conn)
    at = EPOCH_NS / 1e9
    ping = HttpExchange(at, Request("GET", "/ping", b""), Response(200, b"OK", {"content-type": "application/json"}),
                        at + 0.0035)
    info = HttpExchange(at, Request("GET", "/info", b""), Response(200, b"{}"), at + 0.0015)
    at_once = LookupdJudging([ping, info])
    at_once.feed(rows)
    later = LookupdJudging([])
    later.feed(rows.slice(0, 2))  # the opening and the first bytes, before either answer
    later.add_exchanges([ping, info])
    later.feed(rows.slice(2))
    assert [[(v.item, v.ts) for v in judging.finish().violations] for judging in (at_once, later)] == [[
        ("L-HTTP-02", at + 0.0015), ("L-HTTP-01", at + 0.0035), ("L-TCP-11", at + 0.004)]] * 2


def test_analyze_judges_nsqlookupd_as_the_monitors_do_without_spark(spark, tmp_path):
    """The same monitors inside analyze's Spark tasks, with nsqlookupd's HTTP API read (--lookupd-http-port): the
    real nsqlookupd of cluster.pcap breaks no rule; a lookupd that registers a bad name and answers /ping as JSON is
    named in the violations table as judge_lookupd_capture names it, under its own server."""
    from spark_analysis.analysis import run_analysis

    ports = frozenset({LOOKUPD_HTTP})
    summary = run_analysis(spark, [str(PCAPS / "cluster.pcap")], str(tmp_path / "cluster"), report=False,
                           lookupd_http_ports=ports)
    assert not any(side == "broker" for sides in summary["violations"].values() for side in sides)
    lookupd_capture(tmp_path / "bad.pcap", b"OK", b"application/json")
    summary = run_analysis(spark, [str(tmp_path / "bad.pcap")], str(tmp_path / "out"), report=False,
                           lookupd_http_ports=ports)
    assert summary["violations"] == {"L-TCP-11": {"broker": 1}, "L-HTTP-01": {"broker": 1}}
    rows = pq.read_table(tmp_path / "out" / "tables" / "violations").to_pylist()
    [judge] = judge_lookupd_capture(tmp_path / "bad.pcap", frozenset({LOOKUPD_TCP}), ports).values()
    assert sorted((row["server"], row["conn_id"], row["item"], row["ts_ns"]) for row in rows) == sorted(
        (f"{LOOKUPD_ADDRESS} {LOOKUPD_TCP}", violation.connection, violation.item, round(violation.ts * 1e9))
        for violation in judge.violations)


NSQD_TCP, NSQD_HTTP = 24150, 24151  # tests/trace/cluster_recording.py


def registered_capture(path, unregistered: bool, unread: bool = False) -> None:
    """An nsqd at port 4150 registering with lookupd; a consumer of an ephemeral channel leaves it, and nsqd
    UNREGISTERs the channel (``unregistered``) or, broken, does not (R-06). ``unread``: a connection caught mid-way
    is open meanwhile (a consumer of the channel, for all the capture says)."""
    capture = Capture(str(path), "pcap")
    if unread:
        midway = Connection(capture, "B", 40002, 9000)
        midway.send("c2s", EPOCH_NS + 5 * MS, b"NOP\n")  # no SYN: its start, so its SUB, not in the capture
        midway.close(EPOCH_NS + 30 * MS)
    identify = IDENTIFY  # tcp_port 4150: the consumer's nsqd
    lookupd = Connection(capture, "L", 40000, 1000)
    lookupd.ports = {"c2s": (40000, LOOKUPD_TCP), "s2c": (LOOKUPD_TCP, 40000)}
    lookupd.open(EPOCH_NS)
    lookupd.send("c2s", EPOCH_NS + MS, wire_v1.MAGIC_V1 + wire_v1.encode_command("IDENTIFY", body=identify))
    lookupd.send("s2c", EPOCH_NS + 2 * MS, wire_v1.encode_reply(ANSWER))
    consumer = Connection(capture, "A", 40001, 5000)
    consumer.open(EPOCH_NS + 10 * MS)
    consumer.send("c2s", EPOCH_NS + 11 * MS, wire.MAGIC_V2 + wire.encode_command("SUB", "t", "e#ephemeral"))
    consumer.send("s2c", EPOCH_NS + 12 * MS, wire.encode_frame(wire.FRAME_RESPONSE, b"OK"))
    lookupd.send("c2s", EPOCH_NS + 13 * MS, wire_v1.encode_command("REGISTER", "t", "e#ephemeral"))
    lookupd.send("s2c", EPOCH_NS + 14 * MS, wire_v1.encode_reply(b"OK"))
    consumer.close(EPOCH_NS + 20 * MS)
    if unregistered:
        lookupd.send("c2s", EPOCH_NS + 21 * MS, wire_v1.encode_command("UNREGISTER", "t", "e#ephemeral"))
        lookupd.send("s2c", EPOCH_NS + 22 * MS, wire_v1.encode_reply(b"OK"))
    for at in (10_000, 25_000):  # within 15 s, then 15 s on (watch judges what a later row follows)
        lookupd.send("c2s", EPOCH_NS + at * MS, wire_v1.encode_command("PING"))
        lookupd.send("s2c", EPOCH_NS + (at + 1) * MS, wire_v1.encode_reply(b"OK"))
    lookupd.close(EPOCH_NS + 25_002 * MS)
    capture.close()


def test_analyze_judges_the_registering_nsqds_as_the_monitors_do_without_spark(spark, tmp_path):
    """nsqd's rules of registering (R-01 to R-08) inside analyze's Spark tasks, told what each nsqd's own traffic
    showed it create and delete (the nsqds' judging job before the lookupds'): the real nsqd of cluster.pcap, whose
    ephemeral channel is UNREGISTERed as its consumer leaves, breaks none (the capture holds nsqd's HTTP API: no
    request reached it), and analyze finds what judge_lookupd_capture finds; an nsqd that does not UNREGISTER the
    channel is named R-06 by both; with --lookupd-test-clients the rules do not judge."""
    from spark_analysis.analysis import run_analysis

    def both(path, out, **options) -> tuple[dict, list, list]:
        nsqd_clients = options.get("nsqd_clients", True)
        summary = run_analysis(spark, [str(path)], str(out), frozenset({NSQD_TCP, 4150}), report=False,
                               http_ports=frozenset({NSQD_HTTP, 4151}), **options)
        rows = pq.read_table(out / "tables" / "violations").to_pylist()
        judges = judge_lookupd_capture(path, frozenset({LOOKUPD_TCP}), nsqd_clients=nsqd_clients,
                                       nsq_ports=frozenset({NSQD_TCP, 4150}), nsqd_http_ports=frozenset({NSQD_HTTP,
                                                                                                         4151}))
        return summary, sorted((row["item"], row["side"], row["conn_id"], row["ts_ns"]) for row in rows), sorted(
            (v.item, v.side, v.connection, round(v.ts * 1e9)) for judge in judges.values() for v in judge.violations)

    summary, by_spark, in_process = both(PCAPS / "cluster.pcap", tmp_path / "cluster")
    assert by_spark == in_process == [] and not summary["monitor_failures"]
    assert not any(item.startswith("R-") for item in summary["not_judged"])  # judged the ephemeral
    registered_capture(tmp_path / "kept.pcap", unregistered=True)
    summary, by_spark, in_process = both(tmp_path / "kept.pcap", tmp_path / "kept")
    assert by_spark == in_process == []
    registered_capture(tmp_path / "broken.pcap", unregistered=False)
    summary, by_spark, in_process = both(tmp_path / "broken.pcap", tmp_path / "broken")
    assert summary["violations"] == {"R-06": {"broker": 1}} and by_spark == in_process
    summary, by_spark, in_process = both(tmp_path / "broken.pcap", tmp_path / "test-clients", nsqd_clients=False)
    assert summary["violations"] == {} and by_spark == in_process == []
    registered_capture(tmp_path / "unread.pcap", unregistered=False, unread=True)  # not its last consumer, maybe
    summary, by_spark, in_process = both(tmp_path / "unread.pcap", tmp_path / "unread")
    assert summary["violations"] == {} and by_spark == in_process == []


def test_an_nsqds_changes_are_told_once_and_only_where_its_http_api_is_in_the_capture():
    """A topic published to a thousand times is one change for the lookupds' judges; without nsqd's HTTP API in
    the capture (a deletion there unseen) none is told, and R-03 to R-07 say why they are not judged."""
    from nsq_protocol.monitors.events import COMMAND, RESPONSE, Observed
    from spark_analysis.judge.monitoring import NAMES_UNKNOWN, ServerJudging

    def published(actions) -> ServerJudging:
        judging = ServerJudging([], actions)
        judging.judge.open("A", 1.0, True, True)
        for n in range(1000):
            judging.judge.observe("A", Observed(2.0 + n, COMMAND, "PUB", topic="t", bodies=(n,)))
            judging.judge.observe("A", Observed(2.5 + n, RESPONSE, "OK"))
        return judging

    seen = published([])
    assert [(row["change"], row["topic"]) for row in seen.new_changes("127.0.0.1 4150").to_pylist()] == [
        ("created", "t")]
    unseen = published(None)
    assert unseen.new_changes("127.0.0.1 4150").num_rows == 0
    assert unseen.judge.not_judged["R-03", NAMES_UNKNOWN] == 1000
