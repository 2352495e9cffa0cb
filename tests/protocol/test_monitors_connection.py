"""The monitors of the connection, IDENTIFY, AUTH and TLS sections on hand-made traffic: each rule stays silent on
what nsqd v1.3.0 answers, fires on the broker bug it names, and says "not judged" where the traffic lacks what it
needs."""

from __future__ import annotations

import json

from nsq_protocol import monitors, wire
from nsq_protocol.monitors.connection import IDENTIFY_ANSWER_FIELDS
from tests.protocol.test_monitors import Traffic

ANSWER = {name: 0 for name in IDENTIFY_ANSWER_FIELDS} | {
    "max_msg_timeout": 900_000, "msg_timeout": 60_000, "output_buffer_size": 16_384, "output_buffer_timeout": 250,
    "tls_v1": False, "snappy": False, "deflate": False, "auth_required": False, "deflate_level": 6,
    "max_deflate_level": 6, "version": "1.3.0", "max_rdy_count": 2500}


def answered(fields: dict, answer: dict | None = None, error: bytes | None = None, timing: bool = True,
             started: bool = True) -> Traffic:
    traffic = Traffic(timing).connect(started=started).identify(0.0, fields)
    if error is not None:
        return traffic.error(0.001, error).close(0.002, monitors.BROKER)
    if answer is None:
        return traffic.ok(0.001)
    return traffic.receive(0.001, wire.FRAME_RESPONSE, json.dumps(ANSWER | answer).encode())


def items(traffic: Traffic) -> list[tuple[str, str]]:
    return [(item, side) for item, side in traffic.violations(1.0) if item.startswith("ID-")]


def not_judged(traffic: Traffic, item: str) -> bool:
    traffic.violations(1.0)
    return any(key[0] == item for key in traffic.judge.not_judged)


# ---- IdentifyValues -------------------------------------------------------------------------------------

def test_values_within_nsqds_floors_are_accepted_and_echoed():
    fields = {"feature_negotiation": True, "heartbeat_interval": 1000, "output_buffer_timeout": 25,
              "output_buffer_size": 64, "sample_rate": 42, "msg_timeout": 5000}
    answer = {"output_buffer_timeout": 25, "output_buffer_size": 64, "sample_rate": 42, "msg_timeout": 5000}
    assert items(answered(fields, answer)) == []


def test_each_value_below_its_floor_must_be_refused():
    for key, value, item in (("heartbeat_interval", 500, "ID-02"), ("output_buffer_timeout", -5, "ID-03"),
                             ("output_buffer_timeout", 24, "ID-42"), ("output_buffer_size", 32, "ID-04"),
                             ("sample_rate", 100, "ID-06"), ("msg_timeout", 999, "ID-07"),
                             ("msg_timeout", -1, "ID-07")):
        assert items(answered({key: value})) == [(item, monitors.BROKER)], key
        refused = answered({key: value}, error=f"E_BAD_BODY IDENTIFY {key.replace('_', ' ')} ({value}) is invalid"
                           .encode())
        assert items(refused) == [], key


def test_a_refusal_of_acceptable_values_names_the_field():
    refused = answered({"sample_rate": 5}, error=b"E_BAD_BODY IDENTIFY sample rate (5) is invalid")
    assert items(refused) == [("ID-06", monitors.BROKER)]


def test_a_value_above_a_flag_of_the_broker_may_go_either_way():
    assert items(answered({"heartbeat_interval": 70_000})) == []
    assert items(answered({"heartbeat_interval": 30_000},
                          error=b"E_BAD_BODY IDENTIFY heartbeat interval (30000) is invalid")) == []
    assert items(answered({"msg_timeout": 10_000}, error=b"E_BAD_BODY IDENTIFY msg timeout (10000) is invalid")) == []


def test_the_first_bad_value_in_nsqds_order_is_named():
    both = {"heartbeat_interval": 500, "sample_rate": 100}
    assert items(answered(both, error=b"E_BAD_BODY IDENTIFY heartbeat interval (500) is invalid")) == []
    assert items(answered(both, error=b"E_BAD_BODY IDENTIFY sample rate (100) is invalid")) == [
        ("ID-08", monitors.BROKER)]
    buffers = {"output_buffer_timeout": 10, "output_buffer_size": 32}
    assert items(answered(buffers, error=b"E_BAD_BODY IDENTIFY output buffer timeout (10) is invalid")) == []
    assert items(answered(buffers, error=b"E_BAD_BODY IDENTIFY output buffer size (32) is invalid")) == [
        ("ID-05", monitors.BROKER)]


def test_a_value_of_the_wrong_type_is_refused_and_keys_match_in_any_case():
    assert items(answered({"heartbeat_interval": "abc"},
                          error=b"E_BAD_BODY IDENTIFY failed to decode JSON body")) == []
    assert items(answered({"sample_rate": 1.5})) == [("ID-14", monitors.BROKER)]
    assert items(answered({"feature_negotiation": True, "MSG_TIMEOUT": 5000, "x": [1]}, {"msg_timeout": 5000})) == []
    assert items(answered({"feature_negotiation": True, "MSG_TIMEOUT": 5000}, {"msg_timeout": 60_000})) == [
        ("ID-14", monitors.BROKER)]


def test_the_answer_echoes_what_nsqd_set():
    negotiated = {"feature_negotiation": True}
    assert items(answered(negotiated | {"sample_rate": 42}, {"sample_rate": 0})) == [("ID-06", monitors.BROKER)]
    assert items(answered(negotiated | {"output_buffer_size": -1}, {"output_buffer_size": 1,
                                                                    "output_buffer_timeout": 0})) == []
    assert items(answered(negotiated | {"output_buffer_size": -1}, {"output_buffer_size": 1})) == [
        ("ID-43", monitors.BROKER)]
    assert items(answered(negotiated | {"output_buffer_timeout": 100}, {"output_buffer_timeout": 250})) == [
        ("ID-03", monitors.BROKER)]
    assert items(answered(negotiated | {"msg_timeout": 5000}, {"msg_timeout": 60_000})) == [("ID-07", monitors.BROKER)]
    assert items(answered(negotiated, {"output_buffer_size": 8192})) == [("ID-04", monitors.BROKER)]
    assert items(answered(negotiated | {"msg_timeout": 20_000}, {"msg_timeout": 20_000, "max_msg_timeout": 5000})) \
        == [("ID-07", monitors.BROKER)]
    assert items(answered(negotiated, {"msg_timeout": 60_000, "max_msg_timeout": 5000})) == []  # --msg-timeout


def test_a_second_identify_keeps_what_the_first_set():
    traffic = answered({"feature_negotiation": True, "msg_timeout": 5000}, {"msg_timeout": 5000})
    traffic.identify(0.1, {"feature_negotiation": True, "sample_rate": 3})
    traffic.receive(0.101, wire.FRAME_RESPONSE, json.dumps(ANSWER | {"msg_timeout": 60_000, "sample_rate": 3})
                    .encode())
    assert items(traffic) == [("ID-07", monitors.BROKER)]


def test_what_the_traffic_does_not_show_is_not_judged():
    assert not_judged(answered({"sample_rate": 100}, started=False), "ID-08")
    traffic = Traffic().connect().send(0.0, b"IDENTIFY", body=b"[1]").error(0.001, b"E_BAD_BODY IDENTIFY failed to "
                                                                              b"decode JSON body")
    assert not_judged(traffic, "ID-14")
    assert items(answered({"feature_negotiation": True}, {"msg_timeout": 1234, "output_buffer_timeout": 99})) == []


# ---- AnswersAsNsqd: names, AUTH's states, wording --------------------------------------------------------

def identified(auth_required: bool | None) -> Traffic:
    """Started, and told by the IDENTIFY answer whether the broker has an auth address (None: not asked)."""
    traffic = Traffic(timing=False).connect()
    if auth_required is None:
        return traffic
    return traffic.identify(0.0, {"feature_negotiation": True}).receive(
        0.001, wire.FRAME_RESPONSE, json.dumps(ANSWER | {"auth_required": auth_required}).encode())


def broker_items(traffic: Traffic) -> list[str]:
    return [item for item, side in traffic.violations(1.0) if side == monitors.BROKER]


def test_a_lowercase_verb_or_a_bare_newline_accepted_is_c16_or_c20():
    assert broker_items(identified(None).send(0.1, b"nop").error(0.11, b"E_INVALID invalid command nop")) == []
    assert "C-16" in broker_items(identified(None).send(0.1, b"pub", "t", body=b"x").ok(0.11))
    assert "C-20" in broker_items(identified(None).send(0.1, b"").ok(0.11))
    assert broker_items(identified(None).send(0.1, b"").error(0.11, b"E_INVALID invalid command ")) == []


def test_auth_where_the_broker_has_no_auth_address_is_disabled():
    disabled = b"E_AUTH_DISABLED AUTH disabled"
    assert broker_items(identified(False).send(0.1, b"AUTH", body=b"s").error(0.11, disabled)) == []
    granted = json.dumps({"identity": "i", "identity_url": "", "permission_count": 1}).encode()
    assert broker_items(identified(False).send(0.1, b"AUTH", body=b"s")
                        .receive(0.11, wire.FRAME_RESPONSE, granted)) == ["P-AUTH-05"]
    assert broker_items(identified(True).send(0.1, b"AUTH", body=b"s").error(0.11, disabled)) == ["P-AUTH-14"]
    assert broker_items(identified(None).send(0.1, b"AUTH", body=b"s").error(0.11, disabled)) == []
    reworded = Traffic().connect().identify(0.0, {"feature_negotiation": True}).receive(
        0.001, wire.FRAME_RESPONSE, json.dumps(ANSWER | {"auth_required": False}).encode())
    assert broker_items(reworded.send(0.1, b"AUTH", body=b"s").error(0.11, b"E_AUTH_DISABLED AUTH Disabled")) == [
        "P-AUTH-17"]


def test_a_second_auth_after_one_that_succeeded_is_already_set():
    granted = json.dumps({"identity": "i", "identity_url": "", "permission_count": 1}).encode()
    first = identified(True).send(0.1, b"AUTH", body=b"s").receive(0.11, wire.FRAME_RESPONSE, granted)
    assert broker_items(first.send(0.2, b"AUTH", body=b"s").error(0.21, b"E_INVALID AUTH already set")) == []
    again = identified(True).send(0.1, b"AUTH", body=b"s").receive(0.11, wire.FRAME_RESPONSE, granted)
    assert broker_items(again.send(0.2, b"AUTH", body=b"s").receive(0.21, wire.FRAME_RESPONSE, granted)) == [
        "P-AUTH-04"]


def test_an_id_of_the_wrong_length_is_refused_in_nsqds_words():
    subscribed = Traffic().connect().send(0.0, b"SUB", "t", "c").ok(0.01)
    assert broker_items(subscribed.send(0.1, b"FIN", "abc").error(0.11, b"E_INVALID invalid message ID")) == []
    reworded = Traffic().connect().send(0.0, b"SUB", "t", "c").ok(0.01)
    assert broker_items(reworded.send(0.1, b"FIN", "abc").error(0.11, b"E_INVALID bad message ID")) == ["C-34"]


# ---- IdentifyAnswer's T-05, FeaturesKept, TlsRequired ------------------------------------------------------

def test_an_upgrade_not_asked_for_is_t05_or_id20():
    assert items(answered({"feature_negotiation": True}, {"tls_v1": True})) == []  # T-05 is not an ID- item
    assert [item for item, _ in answered({"feature_negotiation": True}, {"tls_v1": True}).violations(1.0)] == ["T-05"]
    assert items(answered({"feature_negotiation": True, "tls_v1": False}, {"snappy": True})) == [
        ("ID-20", monitors.BROKER)]


def offered_then(second: dict, asked: dict | None = None, b_opened: float = 0.0) -> Traffic:
    """Connection A shows the broker has snappy; B, opened at ``b_opened``, asks for it too and gets ``second``."""
    traffic = Traffic().connect("A").connect("B", b_opened)
    traffic.identify(0.01, {"feature_negotiation": True, "snappy": True}, conn="A")
    traffic.receive(0.011, wire.FRAME_RESPONSE, json.dumps(ANSWER | {"snappy": True}).encode(), conn="A").ok(
        0.012, conn="A")
    traffic.identify(0.1, asked or {"feature_negotiation": True, "snappy": True}, conn="B")
    return traffic.receive(0.101, wire.FRAME_RESPONSE, json.dumps(ANSWER | second).encode(), conn="B")


def test_a_feature_the_broker_showed_it_has_answered_false_is_id21():
    assert items(offered_then({"snappy": True}).ok(0.102, conn="B")) == []
    assert items(offered_then({"snappy": False})) == [("ID-21", monitors.BROKER)]
    assert items(offered_then({"snappy": False}, {"feature_negotiation": True})) == []
    lacking = Traffic().connect().identify(0.0, {"feature_negotiation": True, "snappy": True}).receive(
        0.001, wire.FRAME_RESPONSE, json.dumps(ANSWER | {"snappy": False}).encode())
    assert items(lacking) == []  # --snappy=false, as far as the traffic shows
    later = offered_then({"snappy": False}, b_opened=0.05)  # perhaps another run of the broker, with other flags
    assert items(later) == [] and ("ID-21", "whether the broker has snappy (its flags) is not in the traffic while "
                                   "the connection was open") in later.judge.not_judged


REFUSED = b"E_INVALID cannot SUB in current state (TLS required)"


def tls_required() -> Traffic:
    """Connection A shows that TCP requires TLS while B is open."""
    traffic = Traffic().connect("A").connect("B").send(0.01, b"SUB", "t", "c", conn="A")
    return traffic.error(0.011, REFUSED, conn="A").close(0.012, monitors.BROKER, conn="A")


def t_items(traffic: Traffic) -> list[str]:
    return [item for item, _ in traffic.violations(1.0) if item.startswith("T-")]


def test_after_a_tls_refusal_every_plain_first_command_is_refused():
    refused = tls_required().send(0.1, b"PUB", "t", body=b"x", conn="B")
    assert t_items(refused.error(0.101, b"E_INVALID cannot PUB in current state (TLS required)", conn="B")) == []
    accepted = tls_required().send(0.1, b"PUB", "t", body=b"x", conn="B").ok(0.101, conn="B")
    assert t_items(accepted) == ["T-07"]
    identified = tls_required().identify(0.1, {"feature_negotiation": True}, conn="B")
    identified.receive(0.101, wire.FRAME_RESPONSE, json.dumps(ANSWER).encode(), conn="B")
    assert t_items(identified.send(0.2, b"SUB", "t", "c", conn="B").ok(0.201, conn="B")) == ["T-08"]
    upgraded = tls_required().identify(0.1, {"feature_negotiation": True, "tls_v1": True},
                                                         conn="B")
    upgraded.receive(0.101, wire.FRAME_RESPONSE, json.dumps(ANSWER | {"tls_v1": True}).encode(), conn="B")
    assert t_items(upgraded.ok(0.15, conn="B").send(0.2, b"SUB", "t", "c", conn="B").ok(0.201, conn="B")) == []


def test_without_a_tls_refusal_while_it_was_open_nothing_is_required():
    plain = Traffic().connect("B").send(0.1, b"PUB", "t", body=b"x", conn="B").ok(0.101, conn="B")
    assert t_items(plain) == []
    later = tls_required().connect("C", 0.05).send(0.1, b"PUB", "t", body=b"x", conn="C").ok(0.101, conn="C")
    assert t_items(later) == []  # perhaps another run of the broker, with other flags
    identify_refused = Traffic().connect().identify(0.0, {}).error(0.001, b"E_INVALID cannot IDENTIFY in current "
                                                                          b"state (TLS required)")
    assert t_items(identify_refused) == ["T-08"]


def test_an_ok_after_identify_beyond_its_upgrades_is_id35():
    assert items(answered({"feature_negotiation": True, "snappy": True}, {"snappy": True}).ok(0.002)) == []
    assert items(answered({"feature_negotiation": True}, {}).ok(0.002)) == [("ID-35", monitors.BROKER)]
    assert items(answered({}).ok(0.002)) == [("ID-35", monitors.BROKER)]


def test_a_heartbeat_after_heartbeat_interval_minus_one_is_c32():
    def c_items(traffic):
        return [item for item, _ in traffic.violations(40.0) if item.startswith("C-")]
    disabled = answered({"heartbeat_interval": -1})
    assert c_items(disabled) == []
    assert c_items(answered({"heartbeat_interval": -1}).heartbeat(30.0)) == ["C-32"]
    assert c_items(answered({"heartbeat_interval": -1}, timing=False).heartbeat(30.0)) == []


def test_a_command_left_unanswered_until_the_client_gives_up_is_c22():
    def c22(traffic):
        return [item for item, _ in traffic.violations(40.0) if item == "C-22"]
    published = Traffic().connect().send(0.0, b"PUB", "t", body=b"x")
    assert c22(published.ok(0.01).close(20.0, monitors.CLIENT)) == []
    assert c22(Traffic().connect().send(0.0, b"PUB", "t", body=b"x").close(20.0, monitors.CLIENT)) == ["C-22"]
    assert c22(Traffic().connect().send(0.0, b"PUB", "t", body=b"x").close(2.0, monitors.CLIENT)) == []
    assert c22(Traffic(timing=False).connect().send(0.0, b"PUB", "t", body=b"x").close(20.0, monitors.CLIENT)) == []


def test_an_error_frame_before_the_brokers_idle_close_is_c25():
    def c25(traffic):
        return [item for item, _ in traffic.violations(100.0) if item == "C-25"]
    idle = answered({"heartbeat_interval": 10_000})
    assert c25(idle.close(20.0, monitors.BROKER)) == []
    notice = answered({"heartbeat_interval": 10_000}).error(20.0, b"E_TIMEOUT idle")
    notice.close(20.001, monitors.BROKER)
    assert c25(notice) == ["C-25"]
    refusal = answered({"heartbeat_interval": 10_000}).send(19.0, b"XYZ")
    refusal.error(19.001, b"E_INVALID invalid command XYZ")
    assert c25(refusal) == []
    unknown = Traffic().connect(started=False).error(50.0, b"E_TIMEOUT idle")
    assert c25(unknown) == [] and ("C-25", "the heartbeat interval or the connection's start is not in the traffic") \
        in unknown.judge.not_judged


def test_upgrades_asked_without_feature_negotiation_get_a_plain_ok():
    assert items(answered({"tls_v1": True, "snappy": True}).send(0.1, b"NOP")) == []
    assert items(answered({"tls_v1": True, "snappy": True}, {"tls_v1": True})) == [("ID-10", monitors.BROKER)]
    assert items(answered({"sample_rate": 3}, {"sample_rate": 3})) == [("ID-09", monitors.BROKER)]


def test_an_empty_parameter_from_two_spaces_accepted_is_c15():
    assert broker_items(identified(None).send(0.1, b"SUB", "", "c").error(0.11, b'E_BAD_TOPIC SUB topic name "" is '
                                                                               b'not valid')) == []
    assert broker_items(identified(None).send(0.1, b"SUB", "", "c").ok(0.11)) == ["C-15"]
    assert broker_items(identified(None).send(0.1, b"PUB", "", body=b"x").ok(0.11)) == ["C-15"]


def test_a_tickers_first_heartbeat_before_its_interval_is_c27_or_c30():
    def early(traffic):
        return [item for item, _ in traffic.violations(60.0) if item in ("C-27", "C-30")]
    assert early(Traffic().connect().send(0.0, b"NOP").heartbeat(30.0)) == []
    assert early(Traffic().connect().send(0.0, b"NOP").heartbeat(20.0)) == ["C-27"]
    assert early(answered({"heartbeat_interval": 5000}).heartbeat(5.0)) == []
    assert early(answered({"heartbeat_interval": 5000}).heartbeat(2.0)) == ["C-30"]
    slipped = Traffic().connect().identify(29.9, {"heartbeat_interval": 5000}).heartbeat(30.0).ok(30.01)
    assert early(slipped.heartbeat(34.95)) == []
    assert early(Traffic(timing=False).connect().send(0.0, b"NOP").heartbeat(20.0)) == []


def two_channels() -> Traffic:
    traffic = Traffic().connect("A").send(0.0, b"SUB", "t", "a", conn="A").ok(0.001, conn="A")
    traffic.send(0.002, b"RDY", 5, conn="A")
    traffic.connect("B").send(0.0, b"SUB", "t", "b", conn="B").ok(0.001, conn="B")
    return traffic.send(0.002, b"RDY", 5, conn="B")


def test_copies_of_one_id_in_a_topics_channels_are_one_message_c11():
    def c11(traffic):
        return [item for item, _ in traffic.violations(1.0) if item == "C-11"]
    same = two_channels().message(0.1, b"0000000000000001", conn="A").message(0.1, b"0000000000000001", conn="B")
    assert c11(same) == []
    restamped = two_channels().message(0.1, b"0000000000000001", conn="A")
    assert c11(restamped.message(0.1, b"0000000000000001", conn="B", published=-5.0)) == ["C-11"]
    other = two_channels().message(0.1, b"0000000000000001", conn="A")
    assert c11(other.message(0.1, b"0000000000000001", body=b"other", conn="B")) == ["C-11"]
    unsubscribed = Traffic().connect(started=False).message(0.1, b"0000000000000001")
    unsubscribed.violations(1.0)
    assert any(item == "C-11" for item, _ in unsubscribed.judge.not_judged)
