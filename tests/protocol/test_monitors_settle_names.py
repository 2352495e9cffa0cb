"""The name rule held against every answer that hangs on it (D-39: AnswersAsNsqd over V2, HttpAnswersAsNsqd over
HTTP), a consumer's settle after its message timed out (D-12: LateSettleRefused, SettledByOwner) and a magic the
client's end cut short (C-03: UnreadableBytesEnd), a /stats channel's counts by locality (H-STATS-12:
CountedByLocality); each fires on the broker bug it names, stays silent on nsqd's
behaviour and says "not judged" where the traffic lacks what it needs (R-14: test_monitors_lookupd.py)."""

from __future__ import annotations

import json

from nsq_protocol import monitors, wire
from nsq_protocol.http import HttpExchange, Request, Response
from nsq_protocol.monitors import BROKER, HttpAction
from nsq_protocol.monitors.answers import AnswersAsNsqd
from nsq_protocol.monitors.events import SHORT_MAGIC, UNREADABLE, Observed
from nsq_protocol.monitors.http_answers import HttpAnswersAsNsqd
from nsq_protocol.monitors.stats_locality import CountedByLocality
from tests.protocol.test_monitors import ID1, T0, Traffic, consumer
from tests.protocol.test_monitors_delivery import _subscribed

LONGEST = "a" * 64
TOO_LONG = "a" * 65
EPHEMERAL_LONGEST = "a" * 54 + "#ephemeral"
NOT_IN_FLIGHT = b"E_FIN_FAILED FIN 0000000000000001 failed ID not in flight"
NOT_OWNED = b"E_FIN_FAILED FIN 0000000000000001 failed client does not own message"


def _not_judged(traffic: Traffic | monitors.Judge, item: str) -> list[str]:
    judge = traffic.judge if isinstance(traffic, Traffic) else traffic
    return [why for (judged, why) in judge.not_judged if judged == item]


# ---- D-39 over V2: a name refused exactly where the rule refuses it --------------------------------------------

def _answers(started: bool = True) -> Traffic:
    traffic = Traffic()
    traffic.judge = monitors.Judge([AnswersAsNsqd()], timing=True, http_seen=True, release=(1, 3, 0))
    return traffic.connect(started=started)


def _bad_topic(verb: str, name: str) -> bytes:
    return f'E_BAD_TOPIC {verb} topic name "{name}" is not valid'.encode()


def test_names_the_rule_allows_taken_and_those_it_refuses_refused_keep_d39():
    for name in (LONGEST, EPHEMERAL_LONGEST, ".", "a-b_c.D9"):
        assert _answers().send(0.0, b"PUB", name, body=b"x").ok(0.01).violations(0.1) == []
    for name in (TOO_LONG, "a" * 55 + "#ephemeral", "t#eph", "#ephemeral", "a$b"):
        refused = _answers().send(0.0, b"PUB", name, body=b"x").error(0.01, _bad_topic("PUB", name))
        assert refused.close(0.02, BROKER).violations(0.1) == [], name
    channel = _answers().send(0.0, b"SUB", "t", TOO_LONG)
    channel.error(0.01, f'E_BAD_CHANNEL SUB channel name "{TOO_LONG}" is not valid'.encode())
    assert channel.close(0.02, BROKER).violations(0.1) == []
    assert _answers().send(0.0, b"SUB", "t", "c#ephemeral").ok(0.01).violations(0.1) == []


def test_a_name_the_rule_refuses_taken_is_d39():
    assert _answers().send(0.0, b"PUB", TOO_LONG, body=b"x").ok(0.01).violations(0.1) == [("D-39", BROKER)]
    assert _answers().send(0.0, b"SUB", "t", "c!").ok(0.01).violations(0.1) == [("D-39", BROKER)]
    assert _answers().send(0.0, b"DPUB", "t#eph", 10, body=b"x").ok(0.01).violations(0.1) == [("D-39", BROKER)]


def test_a_name_the_rule_allows_refused_as_bad_is_d39():
    refused = _answers().send(0.0, b"PUB", EPHEMERAL_LONGEST, body=b"x")
    refused.error(0.01, _bad_topic("PUB", EPHEMERAL_LONGEST))
    assert refused.close(0.02, BROKER).violations(0.1) == [("D-39", BROKER)]
    channel = _answers().send(0.0, b"SUB", "t", LONGEST)
    channel.error(0.01, f'E_BAD_CHANNEL SUB channel name "{LONGEST}" is not valid'.encode())
    assert channel.close(0.02, BROKER).violations(0.1) == [("D-39", BROKER)]
    delayed = _answers().send(0.0, b"DPUB", "t", "x", body=b"x").error(0.01, _bad_topic("DPUB", "t"))
    assert delayed.close(0.02, BROKER).violations(0.1) == [("D-39", BROKER)], "an unparsable delay: not the name"


def test_a_sub_refused_for_its_state_is_not_named_by_the_name_rule():
    twice = _answers().send(0.0, b"SUB", "t", "c").ok(0.01).send(0.02, b"SUB", "t", "c")
    assert twice.error(0.03, _bad_topic("SUB", "t")).close(0.04, BROKER).violations(0.1) == [("P-SUB-01", BROKER)]


def test_names_are_not_judged_on_a_connection_whose_start_is_not_in_the_traffic():
    midway = _answers(started=False).send(0.0, b"PUB", LONGEST, body=b"x").error(0.01, _bad_topic("PUB", LONGEST))
    assert midway.close(0.02, BROKER).violations(0.1) == []
    assert _not_judged(midway, "C-13")


# ---- D-39 over HTTP ----------------------------------------------------------------------------------------

def _error(status: int, code: str) -> Response:
    return Response(status, f'{{"message":"{code}"}}'.encode(), {"x-nsq-content-type": "nsq; version=1.0",
                                                                  "content-type": "application/json; charset=utf-8"})


def _ok() -> Response:
    return Response(200, b"OK", {"x-nsq-content-type": "nsq; version=1.0", "content-type": "text/plain; charset=utf-8"})


def _empty() -> Response:
    return Response(200, b"", {"x-nsq-content-type": "nsq; version=1.0"})


def _http(target: str, response: Response, body: bytes = b"x") -> list[str]:
    judge = monitors.Judge([HttpAnswersAsNsqd()], timing=True, http_seen=True)
    judge.http_exchange(HttpExchange(T0, Request("POST", target, body, {"content-length": str(len(body))}), response,
                                     T0 + 0.01))
    judge.finish(T0 + 1)
    return [violation.item for violation in judge.violations]


def test_http_names_refused_exactly_where_the_rule_refuses_them_d39():
    assert _http(f"/pub?topic={LONGEST}", _ok()) == []
    assert _http(f"/pub?topic={TOO_LONG}", _error(400, "INVALID_TOPIC")) == []
    assert _http("/channel/create?topic=t&channel=c!", _error(400, "INVALID_ARG_CHANNEL"), b"") == []
    assert _http(f"/pub?topic={LONGEST}", _error(400, "INVALID_TOPIC")) == ["D-39"]
    assert _http("/channel/create?topic=t&channel=c", _error(400, "INVALID_ARG_CHANNEL"), b"") == ["D-39"]
    assert _http("/topic/create?topic=a$b", _empty(), b"") == ["D-39"]
    assert _http("/mpub?topic=t%23eph", _ok(), b"x\n") == ["D-39"]


def test_http_refusals_of_requests_that_check_no_name_are_their_endpoints():
    # /topic/delete looks the name up without checking it: a bad one is not found; INVALID_TOPIC is H-TOPIC-02's
    assert _http("/topic/delete?topic=bad!", _error(400, "INVALID_TOPIC"), b"") == ["H-TOPIC-02"]
    assert _http("/pub?topic=t", _error(400, "MISSING_ARG_TOPIC")) == ["H-PUB-07"]


# ---- D-12: a settle after the timeout ---------------------------------------------------------------------

def _timed_out() -> Traffic:
    """msg_timeout 1 s on a channel made 6 s before: the message delivered at 0.1 s has surely timed out by 1.8 s;
    RDY 0 keeps it from coming back."""
    return _subscribed(Traffic()).message(0.1, ID1).send(0.2, b"RDY", 0)


def test_a_late_fin_refused_as_not_in_flight_keeps_d12():
    assert _timed_out().send(2.0, b"FIN", ID1.decode()).error(2.01, NOT_IN_FLIGHT).violations(3.0) == []
    touched = _timed_out().send(2.0, b"TOUCH", ID1.decode())
    touched.error(2.01, b"E_TOUCH_FAILED TOUCH 0000000000000001 failed ID not in flight")
    assert touched.violations(3.0) == []


def test_a_late_fin_accepted_or_refused_as_not_owned_is_d12():
    assert _timed_out().send(2.0, b"FIN", ID1.decode()).violations(3.0) == [("D-12", BROKER)]
    assert _timed_out().send(2.0, b"REQ", ID1.decode(), 0).violations(3.0) == [("D-12", BROKER)]
    owned = _timed_out().send(2.0, b"FIN", ID1.decode()).error(2.01, NOT_OWNED)
    assert owned.violations(3.0) == [("D-12", BROKER)], "no other consumer had it"


def test_a_late_fin_is_not_judged_in_the_band_round_its_timeout_or_without_the_timeout_or_wire_times():
    band = _timed_out().send(1.3, b"FIN", ID1.decode())
    assert band.violations(3.0) == [] and _not_judged(band, "D-12")
    unknown = Traffic().connect().send(0.0, b"SUB", "t", "c").ok(0.01).send(0.02, b"RDY", 1).message(0.1, ID1)
    unknown.send(0.2, b"RDY", 0).send(5.0, b"FIN", ID1.decode())
    assert unknown.violations(6.0) == [] and _not_judged(unknown, "D-12")
    read = consumer(timeout_ms=1000, timing=False).message(0.1, ID1).send(0.2, b"RDY", 0)
    assert read.send(9.0, b"FIN", ID1.decode()).violations(10.0) == [] and not _not_judged(read, "D-12")
    young = consumer(timeout_ms=1000).message(0.1, ID1).send(0.2, b"RDY", 0).send(2.0, b"FIN", ID1.decode())
    assert young.violations(3.0) == [] and _not_judged(young, "D-12"), "a channel made 2 s ago may be scanned late"


def _ready() -> Traffic:
    """As ``_timed_out``, A still ready for the message to come back."""
    return _subscribed(Traffic()).message(0.1, ID1)


def test_a_late_fin_as_the_message_comes_back_to_the_sender_is_not_judged():
    back = _ready().send(1.9, b"FIN", ID1.decode()).error(1.91, NOT_IN_FLIGHT).message(1.92, ID1, attempts=2)
    assert back.violations(3.0) == [] and _not_judged(back, "D-12")


def test_a_fin_after_the_message_came_back_to_the_same_consumer_is_accepted_d12():
    back = _ready().message(1.5, ID1, attempts=2).send(1.6, b"FIN", ID1.decode())
    assert back.violations(3.0) == []
    refused = _ready().message(1.5, ID1, attempts=2).send(1.6, b"FIN", ID1.decode()).error(1.61, NOT_IN_FLIGHT)
    assert refused.violations(3.0) == [("D-12", BROKER)]


def _elsewhere() -> Traffic:
    """A's message timed out and went to B (msg_timeout 60 s), which holds it."""
    traffic = _timed_out().connect("B", at=0.2).identify(0.21, {"feature_negotiation": True}, conn="B")
    answer = {name: 0 for name in monitors.connection.IDENTIFY_ANSWER_FIELDS} | {
        "max_rdy_count": 2500, "msg_timeout": 60_000, "max_msg_timeout": 900_000, "output_buffer_timeout": 250,
        "output_buffer_size": 16_384, "tls_v1": False, "snappy": False, "deflate": False}
    traffic.receive(0.22, wire.FRAME_RESPONSE, json.dumps(answer).encode(), conn="B")
    traffic.send(0.23, b"SUB", "t", "c", conn="B").ok(0.24, conn="B")
    return traffic.send(0.25, b"RDY", 1, conn="B").message(1.5, ID1, attempts=2, conn="B")


def test_a_late_fin_of_a_message_now_another_consumers_is_refused_as_not_owned_d12():
    kept = _elsewhere().send(1.6, b"FIN", ID1.decode()).error(1.61, NOT_OWNED)
    assert kept.violations(3.0) == []
    assert _elsewhere().send(1.6, b"FIN", ID1.decode()).violations(3.0) == [("D-12", BROKER)]
    emptied = _elsewhere().send(1.6, b"FIN", ID1.decode())
    emptied.judge.http(HttpAction(T0 + 1.6, "/channel/empty", "t", "c", 200))
    assert emptied.error(1.61, NOT_IN_FLIGHT).violations(3.0) == []


# ---- C-03: a magic the client's end cut short ---------------------------------------------------------------

def test_the_decoder_holds_a_magic_cut_short():
    decoder = wire.CommandDecoder()
    assert decoder.partial_magic is None
    assert decoder.feed(b"  ") == [] and decoder.partial_magic == b"  "
    decoder.feed(b"V2")
    assert decoder.partial_magic is None and decoder.magic == wire.MAGIC_V2


def _cut_short(started: bool = True) -> Traffic:
    traffic = Traffic(timing=False).connect(started=started)
    traffic.judge.observe("A", Observed(T0 + 0.1, UNREADABLE, SHORT_MAGIC, "b'  '"))
    return traffic


def test_a_magic_cut_short_answered_by_the_close_alone_keeps_c03():
    assert _cut_short().close(0.11, BROKER).violations(0.2) == []


def test_a_frame_after_a_magic_cut_short_is_c03():
    refused = _cut_short().error(0.105, b"E_BAD_PROTOCOL client sent bad magic")
    assert refused.close(0.11, BROKER).violations(0.2) == [("C-03", BROKER)]
    early = Traffic(timing=False).connect().heartbeat(0.05)
    early.judge.observe("A", Observed(T0 + 0.1, UNREADABLE, SHORT_MAGIC, "b'  '"))
    assert early.close(0.11, BROKER).violations(0.2) == [("C-03", BROKER)], "before the client's end, as well"


def test_a_magic_cut_short_on_a_connection_seen_from_its_middle_is_not_judged():
    midway = _cut_short(started=False).error(0.105, b"E_BAD_PROTOCOL client sent bad magic")
    assert midway.close(0.11, BROKER).violations(0.2) == []
    timed = Traffic().connect()
    timed.judge.observe("A", Observed(T0 + 0.1, UNREADABLE, SHORT_MAGIC, "b'  '"))
    timed.judge.close("A", T0 + 0.11, monitors.CLIENT)
    assert timed.violations(0.2) == [] and _not_judged(timed, "C-03"), "the broker's close after the client's end"


# ---- H-STATS-12: a channel's counts by locality ----------------------------------------------------------

def _located(channel: str = "c#ephemeral", release: tuple | None = (1 << 31,)) -> Traffic:
    """A consumer of ``channel`` (RDY 1) on a broker that counts by locality (master); CountedByLocality alone."""
    traffic = Traffic()
    traffic.judge = monitors.Judge([CountedByLocality()], timing=True, http_seen=True, release=release)
    return traffic.connect().send(0.0, b"SUB", "t", channel).ok(0.01).send(0.02, b"RDY", 1)


def _stats(traffic: Traffic, at: float, channel: str = "c#ephemeral", **counts: int) -> Traffic:
    entry = {"channel_name": channel, **counts}
    body = json.dumps({"start_time": 1, "topics": [{"topic_name": "t", "channels": [entry]}]}).encode()
    traffic.judge.http_exchange(HttpExchange(T0 + at, Request("GET", "/stats?format=json", b""),
                                             Response(200, body, {}), T0 + at + 0.001))
    return traffic


def _delivered(traffic: Traffic, *at: float) -> Traffic:
    for index, when in enumerate(at):
        traffic.message(when, f"{index:016x}".encode()).send(when + 0.001, b"FIN", f"{index:016x}")
    return traffic


def test_counts_that_follow_the_deliveries_keep_h_stats_12():
    counted = _stats(_delivered(_located(), 0.1, 0.2), 0.3, global_msg_count=2)
    assert _stats(_delivered(counted, 0.4), 1.0, global_msg_count=3).violations(2.0) == []
    # a count by the zone (the experiment's flag is the broker's): the sum is what is judged
    assert _stats(_delivered(_located(), 0.1, 0.2), 0.3, zone_local_msg_count=2).violations(1.0) == []
    # a durable channel's deliveries from its disk queue are not counted
    assert _stats(_delivered(_located("c"), 0.1, 0.2), 0.3, channel="c").violations(1.0) == []


def test_counts_behind_an_ephemeral_channels_deliveries_ahead_of_any_or_a_zero_shown_are_h_stats_12():
    behind = _stats(_delivered(_located(), 0.1, 0.2), 0.3, global_msg_count=1)
    assert behind.violations(1.0) == [("H-STATS-12", BROKER)]
    ahead = _stats(_delivered(_located("c"), 0.1), 0.15, channel="c", global_msg_count=1)
    ahead = _stats(_delivered(ahead, 0.2), 0.3, channel="c", global_msg_count=5)
    assert ahead.violations(2.0) == [("H-STATS-12", BROKER)], "grown by 4, with one delivery and a window of 1"
    zero = _stats(_delivered(_located(), 0.1), 0.3, global_msg_count=1, zone_local_msg_count=0)
    assert zero.violations(1.0) == [("H-STATS-12", BROKER)]


def test_counts_are_not_judged_where_the_traffic_hides_deliveries_or_samples():
    older = _stats(_delivered(_located(release=(1, 3, 0)), 0.1, 0.2), 0.3)
    assert older.violations(1.0) == [] and not _not_judged(older, "H-STATS-12"), "v1.3.0 counts no locality"
    unseen = _located()
    unseen.judge.http_seen = False
    assert _stats(_delivered(unseen, 0.1), 0.3, global_msg_count=7).violations(1.0) == []
    assert _not_judged(unseen, "H-STATS-12")
    sampled = Traffic()
    sampled.judge = monitors.Judge([CountedByLocality()], timing=True, http_seen=True, release=(1 << 31,))
    sampled.connect().identify(0.0, {"sample_rate": 50}).ok(0.005).send(0.01, b"SUB", "t", "c#ephemeral")
    sampled.ok(0.011).send(0.02, b"RDY", 1)
    assert _stats(_delivered(sampled, 0.1), 0.3, global_msg_count=9).violations(1.0) == []
    assert _not_judged(sampled, "H-STATS-12")


def test_a_sub_without_its_channel_is_no_consumer_of_a_channel():
    refused = Traffic()
    refused.judge = monitors.Judge([CountedByLocality()], timing=True, http_seen=True, release=(1 << 31,))
    refused.connect().send(0.0, b"SUB", "t").error(0.01, b"E_INVALID SUB insufficient number of parameters")
    assert refused.close(0.02, BROKER).violations(0.1) == [] and refused.judge.failures == []


def test_a_channel_deleted_before_its_growth_is_judged_counts_anew():
    """rec-0157 (nsqd master): the growth's check waits the output buffer's timeout; a deletion and the consumer's
    close meanwhile start the channel's counts again, not its window's."""
    counted = _stats(_delivered(_located("c"), 0.1), 0.15, channel="c", global_msg_count=1)
    counted = _stats(_delivered(counted, 0.2), 0.3, channel="c", global_msg_count=2)
    counted.judge.http(HttpAction(T0 + 0.31, "/channel/delete", "t", "c", 200))
    assert counted.close(0.32, BROKER).violations(2.0) == []
