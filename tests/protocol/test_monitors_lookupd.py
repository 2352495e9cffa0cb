"""nsqlookupd's monitors (LOOKUPD_MONITORS) on hand-made traffic: each rule fires on the lookupd bug it names, stays
silent on the real nsqlookupd's behaviour, and says "not judged" where the traffic lacks what it needs; and on the
recordings of the real nsqlookupd and nsqd (fixtures/transcripts-cluster.jsonl: what nsqlookupd answered, what nsqd
sent a fake lookupd): no violation."""

from __future__ import annotations

import json
import pathlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsq_protocol import monitors, wire, wire_v1
from nsq_protocol.http import HttpExchange, Request, Response
from nsq_protocol.monitors import BROKER
from nsq_protocol.monitors.events import ERROR, RESPONSE, Observed, from_command
from nsq_protocol.monitors.nsqd_names import NamesChanged
from tests.broker.recorded import replay  # noqa: F401 (puts the recorder's modules on the path)
from tests.protocol.hostile_json import damaged

import cluster  # noqa: E402 isort: skip
import nsqwire  # noqa: E402 isort: skip

T0 = 1_800_000_000.0
PRODUCER = {"broadcast_address": "10.0.0.1", "hostname": "h", "tcp_port": 4150, "http_port": 4151,
            "version": "1.3.0"}
ANSWER = b'{"broadcast_address":"lk","hostname":"lk","http_port":4161,"tcp_port":4160,"version":"1.3.0"}'


class Traffic:
    """One nsqlookupd's traffic in the order it crossed the wire."""

    def __init__(self):
        self.judge = monitors.new_lookupd_judge(http_seen=True)
        self.at = 0.0

    def _tick(self) -> float:
        self.at += 0.001
        return T0 + self.at

    def connect(self, name: str = "A", magic: bytes = wire_v1.MAGIC_V1, started: bool = True) -> Traffic:
        self.judge.open(name, self._tick(), started)
        return self.send(magic, conn=name) if magic else self

    def send(self, data: bytes, conn: str = "A") -> Traffic:
        self.judge.client_bytes(conn, self._tick(), data)
        return self

    def command(self, *words: str, conn: str = "A") -> Traffic:
        return self.send(wire_v1.encode_command(*words), conn)

    def identify(self, fields=None, conn: str = "A") -> Traffic:
        body = fields if isinstance(fields, bytes) else json.dumps(PRODUCER if fields is None else fields).encode()
        return self.send(wire_v1.encode_command("IDENTIFY", body=body), conn)

    def reply(self, data: bytes, conn: str = "A") -> Traffic:
        self.judge.server_bytes(conn, self._tick(), wire_v1.encode_reply(data))
        return self

    def raw_reply(self, data: bytes, conn: str = "A") -> Traffic:
        self.judge.server_bytes(conn, self._tick(), data)
        return self

    def close(self, by: str | None, conn: str = "A") -> Traffic:
        self.judge.close(conn, self._tick(), by)
        return self

    def http(self, method: str, target: str, status: int, body: bytes = b"", headers=None) -> Traffic:
        self.judge.http(exchange(self._tick(), method, target, status, body, headers))
        return self

    def violations(self) -> list[tuple[str, str]]:
        return [(violation.item, violation.side) for violation in self.judge.finish(self._tick())]

    def not_judged(self, item: str) -> list[str]:
        return [why for (judged, why) in self.judge.not_judged if judged == item]


def exchange(at: float, method: str, target: str, status: int, body: bytes, headers: dict | None) -> HttpExchange:
    """An exchange answered at once; ``headers``: the answer's."""
    return HttpExchange(at, Request(method, target, b""), Response(status, body, headers or {}), at)


def producer() -> Traffic:
    return Traffic().connect().identify().reply(ANSWER)


# ---- the V1 protocol -------------------------------------------------------------------------------------

def test_a_producer_as_lookupd_answers_it_breaks_nothing():
    traffic = (producer().command("REGISTER", "t", "c").reply(b"OK").command("PING").reply(b"OK")
               .command("UNREGISTER", "never").reply(b"OK").close(monitors.CLIENT))
    assert traffic.violations() == []


def test_a_reply_nobody_asked_for_is_l_tcp_01():
    assert producer().reply(b"OK").violations() == [("L-TCP-01", BROKER)]


def test_an_idle_connection_closed_by_lookupd_is_not_judged():
    traffic = producer().close(BROKER)
    assert traffic.violations() == [] and traffic.not_judged("L-TCP-01")


def test_bad_magic_answered_and_closed_keeps_l_tcp_03():
    traffic = Traffic().connect(magic=b"  V2").reply(b"E_BAD_PROTOCOL").close(BROKER)
    assert traffic.violations() == []


def test_bad_magic_answered_otherwise_is_l_tcp_03():
    assert Traffic().connect(magic=b"  V2").reply(b"OK").violations() == [("L-TCP-03", BROKER)]
    assert Traffic().connect(magic=b"  V2").close(BROKER).violations() == [("L-TCP-03", BROKER)]


def test_bad_magic_the_client_left_is_not_judged():
    traffic = Traffic().connect(magic=b"  V2").reply(b"E_BAD_PROTOCOL").close(monitors.CLIENT)
    assert traffic.violations() == [] and traffic.not_judged("L-TCP-03")


def test_a_reply_that_does_not_frame_is_l_tcp_02():
    assert producer().command("PING").raw_reply(b"\xff\xff\xff\xffOK").violations() == [("L-TCP-02", BROKER)]


def test_identify_answer_out_of_order_is_l_tcp_05():
    answer = json.dumps(dict(reversed(json.loads(ANSWER).items())), separators=(",", ":")).encode()
    assert Traffic().connect().identify().reply(answer).violations() == [("L-TCP-05", BROKER)]
    spaced = json.dumps(json.loads(ANSWER)).encode()
    assert Traffic().connect().identify().reply(spaced).violations() == [("L-TCP-05", BROKER)]


def test_a_second_identify_refused_and_closed():
    kept = producer().identify().reply(b"E_INVALID cannot IDENTIFY again").close(BROKER)
    assert kept.violations() == []
    assert producer().identify().reply(ANSWER).violations() == [("L-TCP-06", BROKER)]


@pytest.mark.parametrize(("body", "error"), [
    (b"not json", b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (json.dumps({**PRODUCER, "version": ""}).encode(), b"E_BAD_BODY IDENTIFY missing fields"),
    (json.dumps({**PRODUCER, "tcp_port": "4150"}).encode(), b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (b"null", b"E_BAD_BODY IDENTIFY missing fields"),
])
def test_identify_bodies_lookupd_cannot_use_are_l_tcp_07(body, error):
    assert Traffic().connect().identify(body).reply(error).close(BROKER).violations() == []
    assert Traffic().connect().identify(body).reply(ANSWER).violations() == [("L-TCP-07", BROKER)]


def test_identify_keys_matching_only_case_insensitively_are_not_judged():
    traffic = Traffic().connect().identify({**PRODUCER, "Version": "1.3.0"}).reply(ANSWER)
    assert traffic.violations() == [] and traffic.not_judged("L-TCP-07")


def test_register_before_identify_is_l_tcp_08():
    kept = Traffic().connect().command("REGISTER", "t").reply(b"E_INVALID client must IDENTIFY").close(BROKER)
    assert kept.violations() == []
    assert Traffic().connect().command("UNREGISTER", "t").reply(b"OK").violations() == [("L-TCP-08", BROKER)]


def test_ping_before_identify_is_ok():
    assert Traffic().connect().command("PING").reply(b"OK").violations() == []
    assert Traffic().connect().command("PING").reply(b"E_INVALID").violations() == [("L-TCP-09", BROKER)]


def test_unknown_commands_are_l_tcp_10():
    kept = Traffic().connect().command("ping").reply(b"E_INVALID invalid command ping").close(BROKER)
    assert kept.violations() == []
    assert Traffic().connect().command("ping").reply(b"OK").violations() == [("L-TCP-10", BROKER)]
    empty = Traffic().connect().send(b"\n").reply(b"E_INVALID invalid command ").close(BROKER)
    assert empty.violations() == []


@pytest.mark.parametrize(("words", "error"), [
    (("REGISTER",), b"E_INVALID REGISTER insufficient number of params"),
    (("REGISTER", "bad!"), b"E_BAD_TOPIC REGISTER topic name 'bad!' is not valid"),
    (("UNREGISTER", "t", "bad!"), b"E_BAD_CHANNEL UNREGISTER channel name 'bad!' is not valid"),
])
def test_register_names_are_checked_l_tcp_11(words, error):
    assert producer().command(*words).reply(error).close(BROKER).violations() == []
    assert producer().command(*words).reply(b"OK").violations() == [("L-TCP-11", BROKER)]


def test_without_wording_only_the_error_code_is_judged():
    worded = producer().command("REGISTER", "bad!").reply(b"E_BAD_TOPIC topic bad")
    assert worded.violations() == [("L-TCP-11", BROKER)]
    traffic = producer()
    traffic.judge.wording = False
    assert traffic.command("REGISTER", "bad!").reply(b"E_BAD_TOPIC topic bad").violations() == []


def test_unregister_of_nothing_is_ok_l_tcp_17():
    assert producer().command("UNREGISTER", "t").reply(b"E_INVALID").violations() == [("L-TCP-17", BROKER)]


def test_lines_are_trimmed_l_tcp_20():
    assert Traffic().connect().send(b" PING \r\n").reply(b"OK").violations() == []
    untrimmed = Traffic().connect().send(b"PING\r\n").reply(b"E_INVALID invalid command PING\r")
    assert untrimmed.violations() == [("L-TCP-20", BROKER)]


def test_an_error_is_fatal_l_tcp_21():
    traffic = producer().command("REGISTER", "bad!").command("PING").reply(
        b"E_BAD_TOPIC REGISTER topic name 'bad!' is not valid").reply(b"OK")
    assert traffic.violations() == [("L-TCP-21", BROKER)]
    left = producer().command("REGISTER").reply(b"E_INVALID REGISTER insufficient number of params")\
        .close(monitors.CLIENT)
    assert left.violations() == [] and left.not_judged("L-TCP-21")


def test_a_connection_seen_from_its_middle_is_not_read():
    traffic = Traffic().connect(magic=b"", started=False).command("PING").reply(b"nonsense")
    assert traffic.violations() == []


# ---- HTTP ----------------------------------------------------------------------------------------------

def test_routes_answered_as_lookupd_break_nothing():
    traffic = (Traffic().http("GET", "/ping", 200, b"OK", {"content-type": "text/plain; charset=utf-8"})
               .http("GET", "/info", 200, b'{"version":"1.3.0"}')
               .http("POST", "/ping", 405, b'{"message":"METHOD_NOT_ALLOWED"}', {"allow": "GET, OPTIONS"})
               .http("HEAD", "/ping", 405, b"", {"allow": "GET, OPTIONS"})
               .http("GET", "/nope", 404, b'{"message":"NOT_FOUND"}')
               .http("POST", "/create_topic", 404, b'{"message":"NOT_FOUND"}')
               .http("GET", "/debug/pprof/", 301, b"", {"location": "/debug/pprof"})
               .http("GET", "/debug/pprof", 200, b"<html>")
               .http("GET", "/lookup?topic=t", 404, b'{"message":"TOPIC_NOT_FOUND"}'))
    assert traffic.violations() == []


@pytest.mark.parametrize(("exchange", "item"), [
    (("GET", "/ping", 200, b"OK", {"content-type": "text/plain", "x-nsq-content-type": "nsq; version=1.0"}),
     "L-HTTP-01"),
    (("GET", "/info", 200, b'{"version":"1.3.0","x":1}'), "L-HTTP-02"),
    (("POST", "/ping", 200, b"OK"), "L-HTTP-14"),
    (("GET", "/topic/create", 405, b"", {"allow": "POST"}), "L-HTTP-20"),
    (("GET", "/topic/create", 405, b'{"message":"METHOD_NOT_ALLOWED"}'), "L-HTTP-20"),  # no Allow: before 1.2.0
    (("GET", "/nope", 200, b""), "L-HTTP-14"),
    (("GET", "/lookup?topic=t", 404, b'{"message":"NOT_FOUND"}'), "L-HTTP-14"),
    (("POST", "/delete_topic", 200, b""), "L-HTTP-15"),
    (("GET", "/debug/pprof/", 404, b""), "L-HTTP-18"),
])
def test_routes_answered_otherwise_are_named(exchange, item):
    assert Traffic().http(*exchange).violations() == [(item, BROKER)]


def test_a_path_the_router_redirects_is_not_judged():
    traffic = Traffic().http("GET", "/ping/", 301, b"")
    assert traffic.violations() == [] and traffic.not_judged("L-HTTP-14")


# ---- the registrations ---------------------------------------------------------------------------------

ENTRY = {"remote_address": "127.0.0.1:50000", "hostname": "h", "broadcast_address": "10.0.0.1", "tcp_port": 4150,
         "http_port": 4151, "version": "1.3.0"}


def lookup_answer(channels=(), producers=(ENTRY,)) -> bytes:
    return json.dumps({"channels": list(channels), "producers": list(producers)}).encode()


def registered(whole: bool = True, **known) -> Traffic:
    traffic = Traffic()
    traffic.judge = monitors.new_lookupd_judge(http_seen=True, whole=whole, **known)
    return traffic.connect().identify().reply(ANSWER).command("REGISTER", "t", "c").reply(b"OK")


def test_lookup_answered_from_the_registrations_breaks_nothing():
    traffic = (registered().http("GET", "/lookup?topic=t", 200, lookup_answer(["c"]))
               .http("GET", "/channels?topic=t", 200, b'{"channels":["c"]}')
               .http("GET", "/topics", 200, b'{"topics":["t"]}')
               .http("GET", "/nodes", 200, json.dumps({"producers": [{**ENTRY, "topics": ["t"],
                                                                       "tombstones": [False]}]}).encode())
               .command("UNREGISTER", "t").reply(b"OK")
               .http("GET", "/lookup?topic=t", 200, lookup_answer(["c"], []))
               .http("GET", "/lookup?topic=nope", 404, b'{"message":"TOPIC_NOT_FOUND"}')
               .http("POST", "/topic/delete?topic=t", 200)
               .http("GET", "/lookup?topic=t", 404, b'{"message":"TOPIC_NOT_FOUND"}')
               .http("POST", "/channel/delete?topic=t&channel=c", 404, b'{"message":"CHANNEL_NOT_FOUND"}'))
    assert traffic.violations() == []


# a broken lookupd's answers under any status
LOOKUPD_ANSWERS = [("/lookup?topic=t", json.loads(lookup_answer(["c"]))), ("/channels?topic=t", {"channels": ["c"]}),
                   ("/topics", {"topics": ["t"]}), ("/info", json.loads(ANSWER)),
                   ("/nodes", {"producers": [{**ENTRY, "topics": ["t"], "tombstones": [False]}]}),
                   ("/lookup?topic=nope", {"message": "TOPIC_NOT_FOUND"})]
FIELDS = sorted({*ENTRY, "channels", "producers", "topics", "tombstones", "message", "version"})


@st.composite
def hostile_lookupd_answers(draw) -> tuple[str, int, bytes]:
    target, document = draw(st.sampled_from(LOOKUPD_ANSWERS))
    return target, draw(st.sampled_from([200, 404, 500])), json.dumps(damaged(draw, document, FIELDS)).encode()


@settings(max_examples=300, deadline=None)
@given(answers=st.lists(hostile_lookupd_answers(), min_size=1, max_size=5))
def test_no_monitor_raises_on_any_json_answer(answers):
    traffic = registered()
    for target, status, body in answers:
        traffic.http("GET", target, status, body)
    traffic.violations()
    assert traffic.judge.failures == []


@pytest.mark.parametrize(("then", "answer", "item"), [
    ((), lookup_answer(["c"], []), "L-TCP-12"),
    ((), lookup_answer([]), "L-TCP-12"),
    ((("UNREGISTER", "t"),), lookup_answer(["c"]), "L-TCP-15"),
    ((("UNREGISTER", "t", "c"),), lookup_answer([]), "L-TCP-14"),
])
def test_lookup_answered_otherwise_names_the_rule(then, answer, item):
    traffic = registered()
    for words in then:
        traffic.command(*words).reply(b"OK")
    assert traffic.http("GET", "/lookup?topic=t", 200, answer).violations() == [(item, BROKER)]


def test_an_ephemeral_channel_left_empty_is_forgotten_l_tcp_14():
    traffic = registered().command("REGISTER", "t", "e#ephemeral").reply(b"OK") \
        .command("UNREGISTER", "t", "e#ephemeral").reply(b"OK")
    kept = traffic.http("GET", "/channels?topic=t", 200, b'{"channels":["c"]}')
    assert kept.violations() == []
    broken = registered().command("REGISTER", "t", "e#ephemeral").reply(b"OK") \
        .command("UNREGISTER", "t", "e#ephemeral").reply(b"OK")
    assert broken.http("GET", "/channels?topic=t", 200, b'{"channels":["c","e#ephemeral"]}').violations() == [
        ("L-TCP-14", BROKER)]


def test_a_closed_producer_goes_from_lookup_l_tcp_13():
    traffic = registered().close(monitors.CLIENT)
    traffic.at += 5
    assert traffic.http("GET", "/lookup?topic=t", 200, lookup_answer(["c"])).violations() == [("L-TCP-13", BROKER)]
    soon = registered().close(monitors.CLIENT).http("GET", "/lookup?topic=t", 200, lookup_answer(["c"]))
    assert soon.violations() == []  # lookupd may not have noticed the close yet


def test_a_tombstone_hides_the_producer_for_its_lifetime():
    traffic = registered(tombstone_lifetime_s=10.0).http("POST", "/topic/tombstone?topic=t&node=10.0.0.1:4151", 200)
    assert traffic.http("GET", "/lookup?topic=t", 200, lookup_answer(["c"])).violations() == [("L-HTTP-12", BROKER)]
    later = registered(tombstone_lifetime_s=10.0).http("POST", "/topic/tombstone?topic=t&node=10.0.0.1:4151", 200)
    later.at += 20
    later.command("PING").reply(b"OK")
    assert later.http("GET", "/lookup?topic=t", 200, lookup_answer(["c"], [])).violations() == [
        ("L-HTTP-17", BROKER)]


def test_an_inactive_producer_is_left_out_l_tcp_19():
    traffic = registered(inactive_producer_timeout_s=10.0)
    traffic.at += 20
    assert traffic.http("GET", "/lookup?topic=t", 200, lookup_answer(["c"])).violations() == [("L-TCP-19", BROKER)]
    nodes = registered(inactive_producer_timeout_s=10.0)
    nodes.at += 20
    listed = json.dumps({"producers": [{**ENTRY, "topics": ["t"], "tombstones": [False]}]}).encode()
    assert nodes.http("GET", "/nodes", 200, listed).violations() == [("L-HTTP-16", BROKER)]


def test_http_changes_and_their_argument_errors():
    assert Traffic().http("POST", "/topic/create", 400, b'{"message":"MISSING_ARG_TOPIC"}').violations() == []
    assert Traffic().http("POST", "/channel/create?topic=t", 200).violations() == [("L-HTTP-09", BROKER)]
    created = registered().http("POST", "/topic/create?topic=u", 200).http("GET", "/topics", 200, b'{"topics":["t"]}')
    assert created.violations() == [("L-HTTP-08", BROKER)]
    deleted = registered().http("POST", "/channel/delete?topic=t&channel=c", 200)
    assert deleted.http("GET", "/channels?topic=t", 200, b'{"channels":["c"]}').violations() == [
        ("L-HTTP-10", BROKER)]


def test_an_answer_the_capture_kept_only_the_start_of_is_not_judged():
    """spark_analysis keeps an answer's first 256 KiB: a /topics cut there is no JSON, and no violation."""
    traffic = registered()
    cut = Response(200, b'{"topics":["t","', {}, size=300_000)
    traffic.judge.http(HttpExchange(T0 + 1, Request("GET", "/topics", b""), cut, T0 + 1))
    assert traffic.violations() == [] and traffic.not_judged("L-HTTP-05")
    whole = registered().http("GET", "/topics", 200, b'{"topics":["t","')
    assert whole.violations() == [("L-HTTP-05", BROKER)]


def test_entries_name_the_producer_as_it_identified_l_tcp_04():
    traffic = Traffic()
    traffic.judge = monitors.new_lookupd_judge(http_seen=True, whole=True)
    traffic.judge.open("A", T0, True, client_address="127.0.0.1:50000")
    traffic.send(wire_v1.MAGIC_V1).identify().reply(ANSWER).command("REGISTER", "t").reply(b"OK")
    assert traffic.http("GET", "/lookup?topic=t", 200, lookup_answer()).violations() == []
    renamed = registered().http("GET", "/lookup?topic=t", 200, lookup_answer(["c"], [{**ENTRY, "hostname": "x"}]))
    assert renamed.violations() == [("L-TCP-04", BROKER)]


def test_a_connection_not_read_whole_stops_the_model():
    traffic = registered().connect("B").send(b"IDENTIFY\n\xff\xff\xff\xff", conn="B")
    assert traffic.http("GET", "/lookup?topic=t", 200, lookup_answer(["x"], [])).violations() == []
    assert traffic.not_judged("L-HTTP-04")


def test_debug_holds_the_registrations_with_producers_l_http_13():
    debug_entry = {**ENTRY, "id": "127.0.0.1:50000", "last_update": 1, "tombstoned": False, "tombstoned_at": 0}
    kept = {"client::": [debug_entry], "topic:t:": [debug_entry], "channel:t:c": [debug_entry]}
    assert registered().http("GET", "/debug", 200, json.dumps(kept).encode()).violations() == []
    missing = {key: value for key, value in kept.items() if key != "channel:t:c"}
    assert registered().http("GET", "/debug", 200, json.dumps(missing).encode()).violations() == [
        ("L-HTTP-13", BROKER)]


def test_a_lookupd_that_never_had_a_registration_answers_empty_l_http_03():
    fresh = Traffic()
    fresh.judge = monitors.new_lookupd_judge(http_seen=True, whole=True)
    fresh.http("GET", "/topics", 200, b'{"topics":[]}').http("GET", "/debug", 200, b"{}")
    assert fresh.http("GET", "/nodes", 200, b'{"producers":[]}').violations() == []
    stale = Traffic()
    stale.judge = monitors.new_lookupd_judge(http_seen=True, whole=True)
    assert stale.http("GET", "/topics", 200, b'{"topics":["old"]}').violations() == [("L-HTTP-03", BROKER)]
    partial = Traffic().http("GET", "/topics", 200, b'{"topics":["old"]}')  # not whole: others' topics
    assert partial.violations() == []


def test_topics_of_unknown_registrations_are_not_judged():
    traffic = registered(whole=False).http("GET", "/lookup?topic=t", 200, lookup_answer(["x"], []))
    assert traffic.violations() == [] and traffic.not_judged("L-HTTP-04")
    fresh = registered(whole=False, fresh=lambda topic: topic == "t")
    assert fresh.http("GET", "/lookup?topic=t", 200, lookup_answer(["c"], [])).violations() == [("L-TCP-12", BROKER)]


# ---- what nsqd sends its lookupds ------------------------------------------------------------------------

def nsqd(at: float = 0.0, body: dict | None = None) -> Traffic:
    traffic = Traffic()
    traffic.judge = monitors.new_lookupd_judge(http_seen=False, timing=True, nsqd_clients=True)
    traffic.at = at
    return traffic.connect().identify(body).reply(ANSWER)


def test_nsqd_identifying_and_pinging_on_its_ticker_breaks_nothing():
    traffic = nsqd().command("REGISTER", "t").reply(b"OK")
    for tick in (15.0, 30.0, 45.0):
        traffic.at = tick
        traffic.command("PING").reply(b"OK")
    traffic.at = 50.0
    assert traffic.violations() == []


def test_nsqd_identify_body_with_other_keys_is_r_02():
    assert nsqd(body={**PRODUCER, "extra": 1}).violations() == [("R-02", BROKER)]
    assert nsqd(body={**PRODUCER, "topology_region": "", "topology_zone": ""}).violations() == []


def test_nsqd_not_identifying_first_is_r_01():
    traffic = Traffic()
    traffic.judge = monitors.new_lookupd_judge(http_seen=False, nsqd_clients=True)
    assert traffic.connect().command("PING").reply(b"OK").violations() == [("R-01", BROKER)]


def test_nsqd_going_on_after_a_refused_identify_is_r_02():
    traffic = Traffic()
    traffic.judge = monitors.new_lookupd_judge(http_seen=False, nsqd_clients=True)
    traffic.connect().identify().reply(b"E_INVALID").command("REGISTER", "t")
    assert ("R-02", BROKER) in traffic.violations()


def test_a_missed_ping_tick_is_r_08():
    traffic = nsqd()
    traffic.at = 17.0
    assert traffic.violations() == [("R-08", BROKER)]
    untimed = Traffic()
    untimed.judge = monitors.new_lookupd_judge(http_seen=False, nsqd_clients=True)
    untimed.connect().identify().reply(ANSWER).command("PING").reply(b"OK")
    assert untimed.violations() == [] and untimed.not_judged("R-08")


def restarted_lookupd(reconnect_at: float, ping_after: float = 0.05, timing: bool = True, closed_at: float = 31.0,
                      served_at: float | None = 33.0) -> Traffic:
    """nsqd's connection "A" (PINGs at 15 s and 30 s) ended by lookupd at ``closed_at``; lookupd seen serving again
    at ``served_at`` (an HTTP answer); nsqd's connection "B" at ``reconnect_at``, its PING ``ping_after`` later."""
    traffic = Traffic()
    traffic.judge = monitors.new_lookupd_judge(http_seen=True, timing=timing, nsqd_clients=True)
    traffic.connect().identify().reply(ANSWER).command("REGISTER", "t").reply(b"OK")
    for tick in (tick for tick in (15.0, 30.0) if tick < closed_at):
        traffic.at = tick
        traffic.command("PING").reply(b"OK")
    traffic.at = closed_at
    traffic.close(BROKER)
    if served_at is not None:
        traffic.at = served_at
        traffic.http("GET", "/ping", 200, b"OK", {"content-type": "text/plain; charset=utf-8"})
    traffic.at = reconnect_at
    traffic.connect("B").identify(conn="B").reply(ANSWER, conn="B").command("REGISTER", "t", conn="B")
    traffic.reply(b"OK", conn="B")
    traffic.at = reconnect_at + ping_after
    return traffic.command("PING", conn="B").reply(b"OK", conn="B")


def test_nsqd_connecting_again_at_the_tick_after_the_one_that_found_the_dead_link_keeps_r_14():
    assert restarted_lookupd(60.0).violations() == []
    # lookupd back only after that tick: the first tick after it
    assert restarted_lookupd(75.0, served_at=62.0).violations() == []


def test_nsqd_connecting_again_a_tick_late_is_r_14():
    assert restarted_lookupd(75.0).violations() == [("R-14", BROKER)]


def test_r_14_is_not_judged_without_the_ticker_lookupds_return_a_tick_or_the_wire_times():
    # a connection at 72 s is no tick's (a notification's): its PING waits for the tick at 75 s
    for traffic in (restarted_lookupd(30.0, closed_at=10.0, served_at=12.0), restarted_lookupd(75.0, served_at=None),
                    restarted_lookupd(72.0, ping_after=3.0), restarted_lookupd(75.0, timing=False)):
        assert traffic.violations() == [] and traffic.not_judged("R-14")


def test_test_clients_are_not_held_to_nsqds_rules():
    traffic = Traffic().connect().command("PING").reply(b"OK")
    assert traffic.violations() == [] and traffic.not_judged("R-01")


def test_every_lookupd_monitor_names_its_items():
    assert all(monitor.__doc__ and monitor.ITEMS for monitor in monitors.LOOKUPD_MONITORS)


# ---- the recordings of the real nsqlookupd ----------------------------------------------------------------

TRANSCRIPTS = pathlib.Path(__file__).parents[2] / "fixtures" / "transcripts-cluster.jsonl"


def _recorded() -> list[dict]:
    return [transcript for transcript in map(json.loads, TRANSCRIPTS.read_text().splitlines())]


def judge_recording(transcript: dict) -> monitors.LookupdJudge:
    """The recording's nsqlookupd traffic (its V1 connections, its HTTP exchanges) as it crossed the wire, the
    replies as the real nsqlookupd gave them (the recorded expectations, placeholders filled)."""
    values = cluster.values(cluster.port_plan())
    # a fresh nsqlookupd each, with the test's connections its only producers (but the 'cluster' ones, where an
    # nsqd registers unseen)
    flags = dict(flag.lstrip("-").split("=", 1) for flag in transcript["nsqlookupd_flags"] or ())
    judge = monitors.new_lookupd_judge(
        http_seen=True, whole=transcript["flagset"] in ("lookupd", "lookupd-short"),
        nsqd_clients=transcript["flagset"] == "fake-lookupd",
        inactive_producer_timeout_s=float(flags.get("inactive-producer-timeout", "300s").rstrip("s")),
        tombstone_lifetime_s=float(flags.get("tombstone-lifetime", "45s").rstrip("s")))
    lookupd: set[str] = set()
    nsqd = NsqdTraffic(judge, "127.0.0.1:%d" % values["nsqd_tcp_port"])
    request = None
    at = T0
    for step in transcript["steps"]:
        at += step.get("wait_ms", 1) / 1000  # a step takes a millisecond, a wait its time
        name = step.get("conn", "A")
        if "connect" in step and step.get("server") == "lookupd":
            lookupd.add(step["connect"])
            judge.open(step["connect"], at, True)
        elif "connect" in step:
            nsqd.connect(step["connect"], at)
        elif "http" in step:
            request = step["http"]
        elif "expect_http" in step and request is not None:
            expected = cluster.fill(step["expect_http"], values)
            body = json.dumps(expected["json"], separators=(",", ":")).encode() if "json" in expected \
                else expected.get("body", "").encode()
            headers = {key: value for key, value in expected.get("headers", {}).items() if value is not None}
            answered = exchange(at, request["method"], request["path"], expected["status"], body, headers)
            if request.get("server") == "lookupd":
                judge.http(answered)
            elif request.get("server") in (None, "nsqd"):
                nsqd.judge.http_exchange(answered)
        elif "lookupd_expect" in step:
            _nsqd_said(judge, at, step["lookupd"], step["lookupd_expect"], values)
        elif step.get("close") in lookupd:
            judge.close(step["close"], at, monitors.CLIENT)
        elif name in nsqd.judge.connections:
            nsqd.step(name, at, step, values)
        elif name not in lookupd:
            continue
        elif "send" in step:
            judge.client_bytes(name, at, nsqwire.decode_spec(step["send"]))
        elif "expect" in step:
            for reply in cluster.fill(step["expect"], values):
                data = json.dumps(reply["v1_json"], separators=(",", ":")) if "v1_json" in reply else reply["v1"]
                judge.server_bytes(name, at, wire_v1.encode_reply(data.encode()))
        elif "expect_close" in step:
            judge.close(name, at, BROKER)
    nsqd.judge.finish(at + 1)
    judge.finish(at + 1)
    return judge


class NsqdTraffic:
    """The recording's nsqd traffic (its V2 connections and HTTP exchanges, the answers as recorded), read for the
    topics and channels nsqd created and deleted, which the lookupd judge is told of (R-03 to R-07)."""

    def __init__(self, lookupd: monitors.LookupdJudge, address: str):
        names = NamesChanged(lambda change: lookupd.nsqd_changed(address, change), lambda judge, topic: True)
        self.judge = monitors.Judge([names], timing=True, http_seen=True)
        self._decoders: dict[str, wire.CommandDecoder] = {}

    def connect(self, name: str, at: float) -> None:
        self.judge.open(name, at, True)
        self._decoders[name] = wire.CommandDecoder()

    def step(self, name: str, at: float, step: dict, values: dict) -> None:
        if "send" in step:
            for command in self._decoders[name].feed(nsqwire.decode_spec(step["send"])):
                self.judge.observe(name, from_command(at, command))
        elif "expect" in step:
            for frame in cluster.fill(step["expect"], values):
                if frame.get("type") == wire.FRAME_RESPONSE:
                    self.judge.observe(name, Observed(at, RESPONSE, frame.get("data", "")))
                elif frame.get("type") == wire.FRAME_ERROR:
                    code, _, text = frame.get("data", "").partition(" ")
                    self.judge.observe(name, Observed(at, ERROR, code, text))
        elif "close" in step or "expect_close" in step:
            self.judge.close(name, at, BROKER if "expect_close" in step else monitors.CLIENT)


def _nsqd_said(judge, at: float, lookupd: int, lines: list[dict], values: dict) -> None:
    """What the real nsqd sent a fake lookupd (its magic, IDENTIFY body, command lines; an unordered step's in
    the order nsqd sends them: magic, IDENTIFY, the rest), answered as the fake answers: its JSON to IDENTIFY,
    OK to the rest."""
    order = {"magic": 0, "IDENTIFY": 1}
    for line in sorted(cluster.fill(lines, values), key=lambda line: order.get(line.get("line", "magic")
                                                                                if "magic" in line else
                                                                                line.get("line"), 2)):
        name = f"fake{lookupd}-{line['conn']}"
        if "magic" in line:
            judge.open(name, at, True)
            judge.client_bytes(name, at, line["magic"].encode())
        elif line.get("closed"):
            judge.close(name, at, monitors.CLIENT)
        elif line["line"] == "IDENTIFY":
            body = json.dumps(line["body_json"]).encode() if "body_json" in line else b"{}"
            judge.client_bytes(name, at, wire_v1.encode_command("IDENTIFY", body=body))
            judge.server_bytes(name, at, wire_v1.encode_reply(ANSWER))
        else:
            judge.client_bytes(name, at, line["line"].encode() + b"\n")
            judge.server_bytes(name, at, wire_v1.encode_reply(b"OK"))


def test_the_real_nsqlookupd_breaks_no_rule_in_its_recordings():
    judges = {transcript["id"]: judge_recording(transcript) for transcript in _recorded()}
    broken = {name: [violation.describe() for violation in judge.violations] for name, judge in judges.items()
              if judge.violations or judge.failures}
    assert broken == {}
    judged = {item for judge in judges.values() for monitor in judge.monitors for item in monitor.ITEMS}
    assert len(judges) == 93 and judged


def test_a_lookupd_case_transcript_is_judged():
    """conformance/monitoring.judge_lookupd: a suite case's V1 bytes and HTTP exchanges, as its transcript holds
    them, reach the monitors."""
    from conformance.monitoring import judge_lookupd
    from conformance.transcript import CLIENT_TO_SERVER, SERVER_TO_CLIENT, Endpoint, Transcript

    transcript = Transcript()
    transcript.endpoints["L0"] = Endpoint(("127.0.0.1", 50000), ("127.0.0.1", 4160))
    transcript.record("L0", CLIENT_TO_SERVER, ["magic"], wire_v1.MAGIC_V1)
    transcript.record("L0", CLIENT_TO_SERVER, ["PING"], b"PING\n")
    transcript.record("L0", SERVER_TO_CLIENT, ["b'NO'"], wire_v1.encode_reply(b"NO"))
    transcript.record("HTTP", CLIENT_TO_SERVER, ["POST /create_topic?topic=t"])
    transcript.record("HTTP", SERVER_TO_CLIENT, ["200 b''"], b"", observed=(
        exchange(transcript.wall_started + transcript.now(), "POST", "/create_topic?topic=t", 200, b"", {}),))
    # another nsqlookupd's (an unmonitored HttpClient's): not this one's to judge
    transcript.record("HTTP", CLIENT_TO_SERVER, ["POST /delete_topic?topic=t"])
    transcript.record("HTTP", SERVER_TO_CLIENT, ["200 b''"], b"")
    judged = judge_lookupd(transcript)
    assert [(violation.item, violation.side) for violation in judged.violations] == [
        ("L-TCP-09", BROKER), ("L-HTTP-15", BROKER)]
