"""The rules of older releases judged by the release the judge is told or the traffic shows (release.py): P-REQ-08,
ID-44, ID-45; and the limits the broker shows held through a connection's life (LimitsHeld, LIM-01). Each rule stays
silent on what nsqd of that release answers, fires on the broker bug it names, and says "not judged" where the
traffic lacks what it needs."""

from __future__ import annotations

import json

from nsq_protocol import monitors, wire
from nsq_protocol.http import HttpExchange, Request, Response
from nsq_protocol.monitors import BROKER, CLIENT
from nsq_protocol.monitors.answers import AnswersAsNsqd
from nsq_protocol.monitors.identify import IdentifyAnswer
from nsq_protocol.monitors.identify_values import IdentifyValues
from nsq_protocol.monitors.limits import LimitsHeld
from tests.protocol.test_monitors import ID1, T0, Traffic

V1_0, V1_1 = (1, 0, 0), (1, 1, 0)
ANSWER = {"max_rdy_count": 2500, "max_msg_timeout": 900_000, "msg_timeout": 60_000, "max_deflate_level": 6,
          "deflate": False, "deflate_level": 0, "snappy": False, "tls_v1": False, "output_buffer_size": 16_384,
          "output_buffer_timeout": 250, "sample_rate": 0, "auth_required": False, "version": ""}


def judged(monitor: monitors.Monitor, release: tuple[int, ...] | None) -> Traffic:
    traffic = Traffic()
    traffic.judge = monitors.Judge([monitor], timing=True, http_seen=True, release=release)
    return traffic.connect()


def negotiated(traffic: Traffic, at: float, asked: dict, version: str | None = None, **answered) -> Traffic:
    answer = ANSWER | ({"version": version} if version else {}) | answered
    return traffic.identify(at, {"feature_negotiation": True, **asked}).receive(
        at + 0.001, wire.FRAME_RESPONSE, json.dumps(answer).encode())


def not_judged(traffic: Traffic, item: str) -> bool:
    return any(key[0] == item for key in traffic.judge.not_judged)


def get(traffic: Traffic, at: float, path: str, body: bytes) -> Traffic:
    traffic.judge.http_exchange(HttpExchange(T0 + at, Request("GET", path, b""), Response(200, body), T0 + at))
    return traffic


# ---- P-REQ-08: a REQ timeout above --max-req-timeout before 1.1.0 ------------------------------------------

def requeued(release, timeout_ms: int, version: str | None = None) -> Traffic:
    """A consumer, /config showing --max-req-timeout 1 h while it is open, then a REQ of ``timeout_ms``."""
    traffic = negotiated(judged(AnswersAsNsqd(), release), 0.0, {}, version).send(0.01, b"SUB", "t", "c").ok(0.02)
    get(traffic, 0.03, "/config/max_req_timeout", b"3600000000000")
    return traffic.message(0.07, ID1).send(0.08, b"REQ", ID1, timeout_ms)


def test_a_req_above_the_maximum_is_refused_before_1_1_p_req_08():
    refused = b"E_INVALID REQ timeout 7200000000000 out of range 0-3600000000000"
    assert requeued(V1_0, 7_200_000).error(0.09, refused).close(0.1, BROKER).violations(1.0) == []
    assert requeued(V1_0, 7_200_000).close(3.0, CLIENT).violations(4.0) == [("P-REQ-08", BROKER)], \
        "it must be refused"
    in_range = b"E_INVALID REQ timeout 1000000000 out of range 0-3600000000000"
    assert requeued(V1_0, 1000).error(0.09, in_range).violations(1.0) == [("P-REQ-08", BROKER)]
    # 1.1.0 and later lower it instead (P-REQ-05)
    assert requeued(V1_1, 7_200_000).violations(1.0) == []
    assert requeued(V1_1, 7_200_000).error(0.09, refused).violations(1.0) == [("P-REQ-05", BROKER)]


def test_the_release_the_traffic_shows_judges_p_req_08():
    assert requeued(None, 7_200_000, version="1.0.0-compat").close(3.0, CLIENT).violations(4.0) == [
        ("P-REQ-08", BROKER)]
    assert requeued(None, 7_200_000, version="1.3.0").violations(1.0) == []


def test_p_req_08_not_judged_without_the_release_or_the_maximum():
    unknown = requeued(None, 7_200_000)
    assert unknown.violations(1.0) == [] and not_judged(unknown, "P-REQ-05")
    unseen = negotiated(judged(AnswersAsNsqd(), V1_0), 0.0, {}).send(0.01, b"SUB", "t", "c").ok(0.02)
    unseen = unseen.message(0.03, ID1).send(0.04, b"REQ", ID1, 7_200_000)
    assert unseen.violations(1.0) == [] and not_judged(unseen, "P-REQ-08")


# ---- ID-44: the deflate level before 1.1.0 -------------------------------------------------------------------

def deflate(release, asked: dict, version: str | None = None, **answered) -> list:
    traffic = negotiated(judged(IdentifyAnswer(), release), 0.0, asked, version, **answered)
    return traffic.violations(1.0)


def test_the_deflate_level_before_1_1_is_6_only_without_a_positive_one_id_44():
    assert deflate(V1_0, {"deflate": True, "deflate_level": 3}, deflate=True, deflate_level=0) == []
    assert deflate(V1_0, {"deflate": True, "deflate_level": -5}, deflate=True, deflate_level=6) == []
    assert deflate(V1_0, {}, deflate_level=0) == []
    assert deflate(V1_0, {"deflate": True, "deflate_level": 3}, deflate=True, deflate_level=3) == [("ID-44", BROKER)]
    assert deflate(V1_0, {}, deflate_level=6) == [("ID-44", BROKER)]
    assert deflate(None, {}, version="1.0.0", deflate_level=6) == [("ID-44", BROKER)]
    assert deflate(V1_1, {"deflate": True, "deflate_level": 3}, deflate=True, deflate_level=0) == [("ID-11", BROKER)]


def test_the_deflate_level_is_not_judged_without_the_release():
    traffic = negotiated(judged(IdentifyAnswer(), None), 0.0, {}, deflate_level=0)
    assert traffic.violations(1.0) == [] and not_judged(traffic, "ID-11")


# ---- ID-45: both output buffer values bad before 1.2.0 ----------------------------------------------------

def both_bad(release, error: bytes) -> list:
    traffic = judged(IdentifyValues(), release).identify(0.0, {"output_buffer_size": 1, "output_buffer_timeout": -7})
    return traffic.error(0.01, error).close(0.02, BROKER).violations(1.0)


def test_the_size_is_named_first_before_1_2_id_45():
    size, timeout = b"E_BAD_BODY IDENTIFY output buffer size (1) is invalid", \
        b"E_BAD_BODY IDENTIFY output buffer timeout (-7) is invalid"
    assert both_bad(V1_1, size) == [] and both_bad((1, 3, 0), timeout) == []
    assert both_bad(V1_1, timeout) == [("ID-45", BROKER)]
    assert both_bad((1, 3, 0), size) == [("ID-05", BROKER)]


def test_a_timeout_under_25_ms_is_taken_before_1_2():
    asked = {"output_buffer_timeout": 10}
    taken = negotiated(judged(IdentifyValues(), V1_1), 0.0, asked, output_buffer_timeout=10)
    assert taken.violations(1.0) == []
    assert negotiated(judged(IdentifyValues(), (1, 3, 0)), 0.0, asked, output_buffer_timeout=10).violations(
        1.0) == [("ID-42", BROKER)]


def test_the_order_is_not_judged_without_the_release():
    traffic = judged(IdentifyValues(), None).identify(0.0, {"output_buffer_size": 1, "output_buffer_timeout": -7})
    traffic.error(0.01, b"E_BAD_BODY IDENTIFY output buffer timeout (-7) is invalid").close(0.02, BROKER)
    assert traffic.violations(1.0) == [] and not_judged(traffic, "ID-45")


# ---- LIM-01: one value of each limit while a connection lives ---------------------------------------------

def test_limits_shown_alike_keep_lim_01():
    traffic = negotiated(judged(LimitsHeld(), None), 0.0, {})
    traffic.send(0.01, b"SUB", "t", "c").ok(0.02).send(0.03, b"RDY", 2501).error(
        0.04, b"E_INVALID RDY count 2501 out of range 0-2500")
    get(traffic, 0.05, "/config/max_msg_timeout", b"900000000000")
    get(traffic, 0.06, "/config/max_rdy_count", b"2500")
    assert traffic.violations(1.0) == []


def test_two_values_of_a_limit_while_a_connection_lives_break_lim_01():
    traffic = negotiated(judged(LimitsHeld(), None), 0.0, {})
    get(traffic, 0.05, "/config/max_rdy_count", b"100")
    assert traffic.violations(1.0) == [("LIM-01", BROKER)]
    quoted = negotiated(judged(LimitsHeld(), None), 0.0, {}).send(0.01, b"PUB", "t", body=b"x" * 20).error(
        0.02, b"E_BAD_MESSAGE PUB message too big 20 > 10")
    get(quoted, 0.03, "/config/max_msg_size", b"1048576")
    assert quoted.violations(1.0) == [("LIM-01", BROKER)]


def test_a_restart_between_two_values_keeps_lim_01():
    traffic = negotiated(judged(LimitsHeld(), None), 0.0, {}).close(0.01, BROKER)
    get(traffic, 0.05, "/config/max_rdy_count", b"100")
    assert traffic.violations(1.0) == []


def test_limits_not_shown_are_not_judged():
    traffic = judged(LimitsHeld(), None).identify(0.0, {}).ok(0.01)
    assert traffic.violations(1.0) == [] and not_judged(traffic, "LIM-01")


# ---- ID-40: a second IDENTIFY's values are echoed, the first one's kept -------------------------------------

def identified_twice(second: dict, first_timeout: int = 5000) -> Traffic:
    """Heartbeats every second and a msg_timeout of ``first_timeout``, then a second IDENTIFY of ``second``."""
    traffic = negotiated(Traffic().connect(), 0.0, {"heartbeat_interval": 1000, "msg_timeout": first_timeout},
                         msg_timeout=first_timeout)
    return negotiated(traffic, 0.01, second, **second).send(0.02, b"SUB", "t", "c").ok(0.03).send(0.04, b"RDY", 1)


def test_heartbeats_after_a_second_identify_follow_the_first_id_40():
    kept = identified_twice({"heartbeat_interval": 4000})
    for at in (1.0, 2.0, 3.0):
        kept.heartbeat(at).send(at + 0.01, b"NOP")
    assert [item for item in kept.violations(3.5) if item[0] in ("ID-40", "C-28")] == []
    taken = identified_twice({"heartbeat_interval": 4000}).heartbeat(4.0)
    assert [item for item in taken.violations(4.1) if item[0] in ("ID-40", "C-28")] == [("ID-40", BROKER)]
    unexplained = identified_twice({}).heartbeat(4.0)
    assert [item for item in unexplained.violations(4.1) if item[0] in ("ID-40", "C-28")] == [("C-28", BROKER)]


def test_messages_after_a_second_identify_time_out_by_the_first_id_40():
    def redelivered(second: dict, at: float) -> list:
        traffic = identified_twice(second).message(0.05, ID1)
        return [item for item in traffic.message(at, ID1, attempts=2).violations(at + 0.1)
                if item[0] in ("ID-40", "D-11")]

    assert redelivered({"msg_timeout": 1000}, 5.2) == []
    assert redelivered({"msg_timeout": 1000}, 0.3) == [("D-11", BROKER)]
    assert redelivered({"msg_timeout": 1000}, 1.2) == [("ID-40", BROKER)]
    assert redelivered({}, 1.2) == [("D-11", BROKER)]


# ---- C-26: any command answers a heartbeat -------------------------------------------------------------------

def answered_by(command: bytes, closed: float = 0.9, others: bool = True) -> list:
    traffic = negotiated(Traffic().connect(), 0.0, {"heartbeat_interval": 1000}).connect("B", 0.0)
    traffic.heartbeat(0.5).send(0.6, command, "t", body=b"x") if command == b"PUB" else \
        traffic.heartbeat(0.5).send(0.6, command)
    if command == b"PUB":
        traffic.ok(0.61)
    traffic.close(closed, BROKER)
    if others:
        traffic.heartbeat(closed + 0.1, conn="B")
    return [item for item in traffic.violations(closed + 0.2) if item[0] == "C-26"]


def test_a_heartbeat_answered_with_another_command_keeps_the_connection_c_26():
    assert answered_by(b"NOP") == []
    assert answered_by(b"PUB") == [("C-26", BROKER)]
    assert answered_by(b"PUB", others=False) == [], "a shutdown closes every connection"


def test_a_heartbeat_in_an_error_frame_breaks_c_26():
    traffic = Traffic().connect().error(0.1, b"_heartbeat_")
    assert ("C-26", BROKER) in traffic.violations(0.2)


def test_c_26_not_judged_without_the_http_requests():
    traffic = Traffic(http_seen=False).connect().identify(0.0, {}).ok(0.01).heartbeat(30.0).send(30.1, b"PUB", "t",
                                                                                                body=b"x")
    traffic.ok(30.11).close(30.5, BROKER)
    traffic.violations(31.0)
    assert not_judged(traffic, "C-26")


# ---- C-06: a frame's size covers its type word ------------------------------------------------------------------

def unframed(reason: str) -> list:
    traffic = Traffic().connect()
    traffic.judge.observe("A", monitors.Observed(T0 + 0.1, monitors.events.UNFRAMED, text=reason))
    return [item for item in traffic.violations(0.2) if item[0] == "C-06"]


def test_a_frame_size_below_its_type_word_breaks_c_06():
    assert unframed("frame size 3 out of range") == [("C-06", BROKER)]
    assert unframed("frame size 5000000 out of range") == [], "a frame above the decoder's bound is no C-06"


def test_c_06_needs_the_decoders_event():
    traffic = Traffic().connect().identify(0.0, {}).ok(0.1)
    assert traffic.violations(0.2) == []
