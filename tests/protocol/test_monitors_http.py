"""The HTTP monitors (http_answers.py, http_documents.py) on hand-made exchanges: the real nsqd v1.3.0's answers
(as it gave them to these requests) break no rule, a broker that answers otherwise is named by the item, and what
one exchange cannot show (a flag, whether a topic exists) is "not judged"."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance import monitoring
from conformance.transcript import SERVER_TO_CLIENT, Transcript
from conformance.versions import NsqVersion
from nsq_protocol import monitors, wire
from nsq_protocol.http import HttpDecoder, HttpExchange, Request, Response
from nsq_protocol.monitors.http_answers import HttpAnswersAsNsqd
from nsq_protocol.monitors.http_documents import DocumentsAsNsqd
from tests.protocol.hostile_json import JSON_VALUES, damaged

T0 = 1_800_000_000.0
NSQ = {"x-nsq-content-type": "nsq; version=1.0"}
JSON = {**NSQ, "content-type": "application/json; charset=utf-8"}


def error(status: int, code: str, **headers: str) -> Response:
    return Response(status, json.dumps({"message": code}, separators=(",", ":")).encode(), {**JSON, **headers})


def ok() -> Response:
    return Response(200, b"OK", {**NSQ, "content-type": "text/plain; charset=utf-8"})


def empty() -> Response:
    return Response(200, b"", dict(NSQ))


def document(value) -> Response:
    return Response(200, json.dumps(value, separators=(",", ":")).encode(), dict(JSON))


CHANNEL = {"channel_name": "c", "depth": 0, "backend_depth": 0, "in_flight_count": 0, "deferred_count": 0,
           "message_count": 0, "requeue_count": 0, "timeout_count": 0, "client_count": 0, "clients": [],
           "paused": False, "e2e_processing_latency": {"count": 0, "percentiles": None}}
TOPIC = {"topic_name": "t", "channels": [CHANNEL], "depth": 0, "backend_depth": 0, "message_count": 0,
         "message_bytes": 0, "paused": False, "e2e_processing_latency": {"count": 0, "percentiles": None}}
MEMORY = {"heap_objects": 1, "heap_idle_bytes": 1, "heap_in_use_bytes": 1, "heap_released_bytes": 1,
          "gc_pause_usec_100": 1, "gc_pause_usec_99": 1, "gc_pause_usec_95": 1, "next_gc_bytes": 1,
          "gc_total_runs": 1}


def stats(topics=(TOPIC,), memory=True, producers=None, **changes) -> dict:
    answer = {"version": "1.3.0", "health": "OK", "start_time": 1, "topics": list(topics) if topics is not None
              else None, **({"memory": MEMORY} if memory else {}), "producers": producers}
    return {**answer, **changes}


INFO = {"version": "1.3.0", "broadcast_address": "vm", "hostname": "vm", "http_port": 4151, "tcp_port": 4150,
        "start_time": 1, "max_heartbeat_interval": 60_000_000_000, "max_output_buffer_size": 65536,
        "max_output_buffer_timeout": 30_000_000_000, "max_deflate_level": 6}
BINARY_ZERO = struct.pack(">ii", 1, 0)  # one message of size 0

# the real nsqd v1.3.0's answers (recorded against it: GET /ping ... as below)
NSQD = [
    ("GET", "/ping", b"", Response(200, b"OK", {"content-type": "text/plain; charset=utf-8"})),
    ("GET", "/PING", b"", Response(301, b"<a href=\"/ping\">Moved Permanently</a>.\n\n", {"location": "/ping"})),
    ("POST", "/CHANNEL/create?topic=x", b"", Response(307, b"", {"location": "/channel/create?topic=x"})),
    ("POST", "/ping/", b"", error(404, "NOT_FOUND")),
    ("OPTIONS", "/pub", b"", Response(200, b"", {"allow": "OPTIONS, POST"})),
    ("OPTIONS", "/nope", b"", error(404, "NOT_FOUND")),
    ("GET", "/pub", b"", error(405, "METHOD_NOT_ALLOWED", allow="OPTIONS, POST")),
    ("HEAD", "/ping", b"", Response(405, b"", {**JSON, "allow": "GET, OPTIONS"})),
    ("POST", "/pub", b"", error(400, "MSG_EMPTY")),
    ("POST", "/pub?topic=t", b"x", ok()),
    ("POST", "/pub?topic=t&defer=+5", b"x", error(400, "INVALID_DEFER")),  # '+' is a space in a query
    ("POST", "/pub?topic=t&defer=3600000", b"x", ok()),
    ("POST", "/pub?topic=%zz", b"x", error(400, "INVALID_REQUEST")),
    ("POST", "/pub?topic=a;b", b"x", error(400, "INVALID_REQUEST")),
    ("POST", "/pub?topic=bad!", b"x", error(400, "INVALID_TOPIC")),
    ("POST", "/pub?topic=t&topic=bad!", b"x", ok()),  # the first of repeated keys
    ("POST", "/config/x", b"", error(405, "METHOD_NOT_ALLOWED", allow="GET, OPTIONS, PUT")),
    ("GET", "/config/node_id", b"", error(400, "INVALID_OPTION")),
    ("GET", "/config/max_msg_size", b"", document(1048576)),
    ("PUT", "/config/log_level", b"WARN", document(3)),
    ("PUT", "/config/log_level", b"", error(413, "INVALID_VALUE")),
    ("PUT", "/config/max_msg_size", b"5", error(400, "INVALID_OPTION")),
    ("POST", "/debug/freememory", b"", error(500, "INTERNAL_ERROR")),
    ("POST", "/put", b"", error(404, "NOT_FOUND")),
    ("POST", "/channel/empty?topic=nope", b"", error(400, "MISSING_ARG_CHANNEL")),
    ("POST", "/topic/delete?topic=bad!", b"", error(404, "TOPIC_NOT_FOUND")),
    ("POST", "/mpub?topic=t&binary=yes", BINARY_ZERO, error(413, "BAD_MESSAGE")),
    ("POST", "/mpub?topic=t", b"\n\n", ok()),
    ("POST", "/mpub?topic=t&binary=1", b"", error(413, "BAD_BODY")),
    ("POST", "/topic/create?topic=t", b"", empty()),
    ("POST", "/channel/create?topic=t&channel=c", b"", empty()),
    ("POST", "/channel/create?topic=bad!", b"", error(400, "INVALID_ARG_TOPIC")),
    ("GET", "/stats?format=json", b"", document(stats())),
    ("GET", "/stats?format=json&topic=missing", b"", document(stats(topics=None))),
    ("GET", "/stats?format=json&channel=missing", b"", document(stats(topics=[]))),
    ("GET", "/stats?format=json&include_mem=false&include_clients=false", b"",
     document(stats(topics=[{**TOPIC, "channels": [{**CHANNEL, "clients": None}]}], memory=False))),
    ("GET", "/stats", b"", Response(200, b"nsqd v1.3.0 (built w/go1.19.8)\n\nMemory:\n", ok().headers)),
    ("GET", "/stats?include_mem=0", b"", Response(200, b"nsqd v1.3.0 (built w/go1.19.8)\n", ok().headers)),
    ("GET", "/info?x=%zz", b"", document(INFO)),
]


def judged(*exchanges: tuple, http_seen: bool = True, wording: bool = True) -> monitors.Judge:
    judge = monitors.Judge([HttpAnswersAsNsqd(), DocumentsAsNsqd()], timing=True, http_seen=http_seen,
                           wording=wording)
    for index, (method, target, body, response) in enumerate(exchanges):
        size = None
        if isinstance(body, int):  # a body of that size, of which the traffic kept nothing
            body, size = b"", body
        headers = {"content-length": str(size if size is not None else len(body))}
        judge.http_exchange(HttpExchange(T0 + index, Request(method, target, body, headers, size), response,
                                         T0 + index + 0.5))
    judge.finish(T0 + len(exchanges))
    return judge


def named(judge: monitors.Judge) -> set[tuple[str, str]]:
    return {(violation.item, violation.side) for violation in judge.violations}


def test_the_real_nsqds_answers_break_no_rule():
    judge = judged(*NSQD)
    assert judge.violations == [] and judge.failures == []


@pytest.mark.parametrize(("exchange", "item"), [
    (("POST", "/pub", b"", error(400, "MISSING_ARG_TOPIC")), "H-PUB-02"),
    (("POST", "/pub?topic=bad!", b"x", ok()), "D-39"),  # the name rule, which /pub applies (H-PUB-03)
    (("POST", "/pub?topic=%zz", b"x", error(400, "MISSING_ARG_TOPIC")), "H-PUB-03"),
    (("POST", "/pub?topic=t&defer=-1", b"x", ok()), "H-PUB-05"),
    (("POST", "/pub?topic=t", b"x", Response(200, b"OK", {"content-type": "text/plain"})), "H-02"),
    (("GET", "/pub", b"", error(404, "NOT_FOUND")), "H-PUB-08"),
    (("POST", "/pub", b"", Response(400, b'{"message":"MSG_EMPTY"}', dict(NSQ))), "H-01"),
    (("POST", "/pub", b"", error(400, "MSG_EMPTY", **{"x-nsq-content-type": "nsq"})), "H-01"),
    (("POST", "/topic/create?topic=t", b"", Response(200, b"", JSON)), "H-02"),
    (("GET", "/ping", b"", Response(200, b"OK", {**NSQ, "content-type": "text/plain"})), "H-03"),
    (("GET", "/nope", b"", ok()), "H-04"),
    (("GET", "/ping/", b"", error(404, "NOT_FOUND")), "H-05"),
    (("OPTIONS", "/pub", b"", Response(200, b"", {"allow": "POST"})), "H-10"),
    (("POST", "/put", b"x", ok()), "H-09"),
    (("POST", "/channel/empty?topic=nope", b"", error(404, "TOPIC_NOT_FOUND")), "H-CHANNEL-03"),
    (("POST", "/channel/create?topic=t", b"", error(400, "MISSING_ARG_TOPIC")), "H-CHANNEL-01"),
    (("POST", "/topic/delete?topic=bad!", b"", error(400, "INVALID_TOPIC")), "H-TOPIC-02"),
    (("POST", "/topic/empty?topic=bad!", b"", error(404, "TOPIC_NOT_FOUND")), "H-TOPIC-03"),
    (("POST", "/mpub?topic=t&binary=yes", BINARY_ZERO, ok()), "H-MPUB-03"),
    (("POST", "/mpub?topic=t&binary=true", BINARY_ZERO, error(413, "BAD_BODY")), "H-MPUB-05"),
    (("POST", "/mpub?topic=t", b"\n\n", error(400, "MSG_EMPTY")), "H-MPUB-04"),
    (("POST", "/mpub?topic=t", b"a\nb\n", error(413, "BAD_MESSAGE")), "H-MPUB-07"),
    (("POST", "/mpub?topic=t", 6_000_000, error(400, "MISSING_ARG_TOPIC")), "H-MPUB-01"),
    (("POST", "/mpub", b"a", ok()), "H-MPUB-02"),
    (("PUT", "/config/log_level", b"WARN", document("WARN")), "H-CFG-04"),
    (("PUT", "/config/log_level", b"LOUD", document(3)), "H-CFG-02"),
    (("GET", "/config/node_id", b"", document(1)), "H-CFG-01"),
    (("POST", "/config/x", b"", error(404, "NOT_FOUND")), "H-CFG-03"),
    (("GET", "/debug/pprof/", b"", error(404, "NOT_FOUND")), "H-DEBUG-01"),
    (("GET", "/stats?format=json", b"", ok()), "H-STATS-01"),
    (("GET", "/stats", b"", document(stats())), "H-STATS-01"),
    (("GET", "/info", b"", document({**INFO, "extra": 1})), "H-INFO-01"),
    (("GET", "/info", b"", document({**INFO, "max_heartbeat_interval": 60000})), "H-INFO-02"),
    (("GET", "/info", b"", document({key: value for key, value in INFO.items() if key != "max_deflate_level"})),
     "H-INFO-02"),
    (("GET", "/stats?format=json", b"", document(stats(topics=None))), "H-STATS-04"),
    (("GET", "/stats?format=json", b"", document({**stats(), "uptime": 1})), "H-STATS-02"),
    (("GET", "/stats?format=json&include_mem=false", b"", document(stats())), "H-STATS-03"),
    (("GET", "/stats?format=json&include_clients=0", b"", document(stats())), "H-STATS-03"),
    (("GET", "/stats?format=json", b"", document(stats(memory=False))), "H-STATS-17"),
    (("GET", "/stats?include_mem=false", b"", Response(200, b"nsqd v1\n\nMemory:\n", ok().headers)), "H-STATS-17"),
    (("GET", "/stats?format=json", b"", document(stats(topics=[{**TOPIC, "topic_name": "u"}, TOPIC]))),
     "H-STATS-06"),
    (("GET", "/stats?format=json", b"", document(stats(topics=[{**TOPIC, "depth_total": 0}]))), "H-STATS-07"),
    (("GET", "/stats?format=json", b"", document(stats(topics=[{**TOPIC, "channels": [{
        key: value for key, value in CHANNEL.items() if key != "client_count"}]}]))), "H-STATS-08"),
    (("GET", "/stats?format=json", b"", document(stats(topics=[{**TOPIC, "channels": [{
        **CHANNEL, "client_count": 2}]}]))), "H-STATS-14"),
    (("GET", "/stats?format=json&topic=x", b"", document(stats())), "H-STATS-15"),
    (("GET", "/stats?format=json&channel=d", b"", document(stats())), "H-STATS-05"),
])
def test_an_answer_nsqd_would_not_give_is_named(exchange, item):
    assert named(judged(exchange)) == {(item, "broker")}


def test_an_error_code_of_another_type_than_text_is_named():
    for code in ({"INVALID_TOPIC": 1}, ["INVALID_TOPIC"], None, 400):
        refused = Response(400, json.dumps({"message": code}).encode(), JSON)
        assert named(judged(("POST", "/pub?topic=t", b"x", refused))) == {("H-PUB-07", "broker")}


CLIENT = {"client_id": "c", "hostname": "h", "version": "V2", "remote_address": "127.0.0.1:40000", "state": 3,
          "ready_count": 1, "in_flight_count": 0, "message_count": 0, "finish_count": 0, "requeue_count": 0,
          "connect_ts": int(T0), "sample_rate": 0, "deflate": False, "snappy": False, "user_agent": "", "tls": False}
# a broken broker's answers: nsqd's documents damaged at any depth (or any JSON value alone) under any status
FIELDS = sorted({*INFO, *stats(), *TOPIC, *CHANNEL, *CLIENT, "message", "https_port"})
# a /stats that lists the consumer the judge saw connect, so that the monitors of client entries read it
WITH_CLIENT = ("GET", "/stats?format=json", b"", document(stats(topics=[{**TOPIC, "channels": [
    {**CHANNEL, "client_count": 1, "clients": [CLIENT]}]}], producers=[CLIENT])))


@st.composite
def hostile_answers(draw) -> tuple:
    method, target, body, honest = draw(st.sampled_from([*NSQD, WITH_CLIENT]))
    document = json.loads(honest.body) if honest.body.startswith((b"{", b"[")) else draw(JSON_VALUES)
    status = draw(st.sampled_from([honest.status, 200, 400, 403, 404, 413, 500]))
    return method, target, body, Response(status, json.dumps(damaged(draw, document, FIELDS)).encode(), honest.headers)


@settings(max_examples=300, deadline=None)
@given(exchanges=st.lists(hostile_answers(), min_size=1, max_size=6))
def test_no_monitor_raises_on_any_json_answer(exchanges):
    # what a hostile broker made the suite's monitors raise on (an unhashable "message"): caught by a monitor
    # that raised, which the suite would report as its own ERROR
    judge = monitors.new_judge(timing=True, http_seen=True, release=(1, 3, 0))
    judge.open("A", T0 - 1, started=True, server="127.0.0.1:4150", client=CLIENT["remote_address"])
    judge.observe("A", monitors.from_command(T0 - 0.9, wire.Command(b"SUB", (b"t", b"c"))))
    for index, (method, target, body, response) in enumerate(exchanges):
        judge.http_exchange(HttpExchange(T0 + index, Request(method, target, body, {}), response, T0 + index + 0.5))
    judge.finish(T0 + len(exchanges))
    assert judge.failures == []


def test_wording_of_an_error_body_is_judged_only_where_asked():
    spaced = Response(400, b'{"message": "MSG_EMPTY"}', JSON)
    assert named(judged(("POST", "/pub", b"", spaced))) == {("H-01", "broker")}
    assert named(judged(("POST", "/pub", b"", spaced), wording=False)) == set()


def test_plain_http_once_refused_for_tls_stays_refused():
    refused = Response(403, b'{"message": "TLS_REQUIRED", "https_port": 4152}', JSON)
    assert named(judged(("GET", "/ping", b"", refused), ("GET", "/nope", b"", refused))) == set()
    assert named(judged(("GET", "/ping", b"", refused), ("POST", "/pub?topic=t", b"x", ok()))) == {
        ("H-06", "broker")}
    compact = Response(403, b'{"message":"TLS_REQUIRED","https_port":4152}', JSON)
    assert named(judged(("GET", "/ping", b"", compact))) == {("H-06", "broker")}


def test_a_refusal_only_another_flag_explains_is_not_judged():
    too_big = ("POST", "/pub?topic=t", 2_000_000, ok())  # --max-msg-size above its default, or a broker bug
    judge = judged(too_big)
    assert judge.violations == []
    assert judge.not_judged["H-PUB-01", "the answer fits only a --max-msg-size other than its default"] == 1
    assert named(judged(("POST", "/pub?topic=t&defer=4000000", b"x", ok()))) == set()  # --max-req-timeout
    assert named(judged(("POST", "/pub?topic=t", 2_000_000, error(413, "BODY_TOO_BIG")))) == {("H-PUB-01", "broker")}


STARTED = ("GET", "/info", b"", document(INFO))  # the broker's start_time, before the traffic


def test_what_exists_decides_a_404_where_every_http_request_is_seen():
    created = STARTED, ("POST", "/topic/create?topic=t", b"", empty())
    missing = ("POST", "/channel/create?topic=t&channel=c", b"", error(404, "TOPIC_NOT_FOUND"))
    assert named(judged(*created, missing)) == {("H-CHANNEL-01", "broker")}
    deleted = ("POST", "/topic/delete?topic=t", b"", empty())
    assert named(judged(*created, deleted, missing)) == set()
    restarted = ("GET", "/info", b"", document({**INFO, "start_time": int(T0) + 2}))  # maybe without its data
    assert named(judged(*created, restarted, missing)) == set()
    assert named(judged(created[1], missing)) == set()  # the broker's start not known: maybe after the create
    judge = judged(*created, missing, http_seen=False)
    assert judge.violations == []
    assert judge.not_judged[
        "H-CHANNEL-01", "whether the topic exists: the broker's HTTP requests are not all in the traffic"] == 1


def test_stats_after_the_http_requests_show_what_they_did():
    refused = ("POST", "/pub?topic=u&defer=-1", b"x", error(400, "INVALID_DEFER"))  # H-PUB-04: u created anyway
    assert named(judged(STARTED, refused, ("GET", "/stats?format=json", b"", document(stats())))) == {
        ("H-PUB-04", "broker")}
    listed = document(stats(topics=[TOPIC, {**TOPIC, "topic_name": "u"}]))
    assert named(judged(STARTED, refused, ("GET", "/stats?format=json", b"", listed))) == set()
    restarted = document(stats(start_time=int(T0) + 2))
    assert named(judged(STARTED, refused, ("GET", "/stats?format=json", b"", restarted))) == set()
    paused = ("POST", "/topic/pause?topic=t", b"", empty())
    assert named(judged(STARTED, paused, ("GET", "/stats?format=json", b"", document(stats())))) == {
        ("H-TOPIC-04", "broker")}
    assert named(judged(STARTED, paused, ("GET", "/stats?format=json", b"", document(stats(
        topics=[{**TOPIC, "paused": True}]))))) == set()


def test_a_query_is_read_as_go_reads_it():
    def params(target: str):
        return Request("GET", target, b"").params()

    assert params("/x?topic=a&topic=b&c=%23d+e") == {"topic": "a", "c": "#d e"}
    assert params("/x?topic=%zz") is None and params("/x?a=1;b=2") is None and params("/x") == {}


def test_an_answer_to_head_has_no_body_and_the_next_answer_is_read_whole():
    answers = HttpDecoder(requests=False)
    answers.asked.extend(["HEAD", "GET"])
    assert answers.feed(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 405 Method Not Allowed\r\nContent-Length: 32\r\n\r\n"
                        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nOK") == [Response(405, b""), Response(200, b"OK")]


def test_a_chunked_mpub_past_a_smaller_max_body_size_is_not_judged():
    judge = judged(("POST", "/mpub?topic=t", b"a\n" * 1000, error(413, "BODY_TOO_BIG")))
    assert judge.violations == [] and sum(judge.not_judged.values()) == 1


def test_the_suite_feeds_its_exchanges_with_nsqd_of_a_release_the_monitors_hold():
    transcript = Transcript()
    exchange = HttpExchange(T0, Request("POST", "/pub", b"", {}), error(400, "MISSING_ARG_TOPIC"), T0 + 0.1)
    transcript.record("HTTP", SERVER_TO_CLIENT, ["400"], observed=(exchange,))
    assert named(monitoring.judge(transcript)) == {("H-PUB-02", "broker")}
    assert named(monitoring.judge(transcript, NsqVersion.parse("1.1.0"))) == set()
