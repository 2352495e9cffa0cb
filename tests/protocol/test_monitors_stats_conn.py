"""The monitors that hold nsqd's /stats answers against the TCP connections they describe (stats_clients.py): each
fires on an entry the connection's traffic contradicts, stays silent on nsqd v1.3.0's own entries, and says "not
judged" where the traffic lacks what it needs (the address, the start, an answer before the request)."""

from __future__ import annotations

import json

from nsq_protocol import wire
from nsq_protocol.http import HttpExchange, Request, Response
from nsq_protocol.monitors import stats_clients
from nsq_protocol.monitors.http_no_auth import HttpWithoutAuth
from nsq_protocol.monitors.stats_clients import ClientsAsConnected
from nsq_protocol.monitors.stats_topics import RefusedMpubMadeTopic
from nsq_protocol.tls_records import TLS12, Record
from tests.protocol.test_monitors import ID1, T0, Traffic
from tests.protocol.test_monitors_stats import channel, ephemeral_created, ephemeral_found, topic
from tests.protocol.test_monitors_stats import stats as topics_stats

ADDRESS = "127.0.0.1:40001"
JSON_ANSWER = {"max_rdy_count": 2500, "version": "1.3.0", "max_msg_timeout": 900_000, "msg_timeout": 60_000,
               "tls_v1": False, "deflate": False, "deflate_level": 6, "max_deflate_level": 6, "snappy": False,
               "sample_rate": 0, "auth_required": False, "output_buffer_size": 16_384, "output_buffer_timeout": 250}


def entry(**changed) -> dict:
    """A client entry as nsqd v1.3.0 writes it for a plain connection from ADDRESS that never IDENTIFYed."""
    return {"client_id": "127.0.0.1", "hostname": "127.0.0.1", "version": "V2", "remote_address": ADDRESS,
            "state": 0, "ready_count": 0, "in_flight_count": 0, "message_count": 0, "finish_count": 0,
            "requeue_count": 0, "connect_ts": int(T0), "sample_rate": 0, "deflate": False, "snappy": False,
            "user_agent": "", "tls": False, "tls_cipher_suite": "", "tls_version": "", "tls_negotiated_protocol": "",
            "tls_negotiated_protocol_is_mutual": False} | changed


def stats(traffic: Traffic, at: float, clients=(), producers=(), query: str = "format=json",
          took: float = 0.01) -> Traffic:
    channels = [{"channel_name": "c", "clients": list(clients), "client_count": len(clients)}]
    document = {"version": "1.3.0", "health": "OK", "start_time": int(T0) - 100, "producers": list(producers),
                "topics": [{"topic_name": "t", "channels": channels}] if clients else []}
    traffic.judge.http_exchange(HttpExchange(T0 + at, Request("GET", f"/stats?{query}", b""),
                                             Response(200, json.dumps(document).encode()), T0 + at + took))
    return traffic


def connected(started: bool = True, client: str | None = ADDRESS) -> Traffic:
    traffic = Traffic()
    traffic.judge.open("A", T0, started, client=client, server="127.0.0.1:4150")
    return traffic


def identified(fields: dict, answer: dict | None = None) -> Traffic:
    traffic = connected().identify(0.0, fields)
    if answer is None:
        return traffic.ok(0.01)
    return traffic.receive(0.01, wire.FRAME_RESPONSE, json.dumps(answer).encode())


MINE = frozenset({*ClientsAsConnected.ITEMS, *HttpWithoutAuth.ITEMS, *RefusedMpubMadeTopic.ITEMS})


def found(traffic: Traffic, end: float = 5.0) -> list[tuple[str, str]]:
    return [one for one in traffic.violations(end) if one[0] in MINE]


def skipped(traffic: Traffic) -> set[tuple[str, str]]:
    monitor = next(one for one in traffic.judge.monitors if isinstance(one, ClientsAsConnected))
    return set(monitor.not_judged)


# ---- ID-01: the identity strings ------------------------------------------------------------------------

def test_the_remote_ip_before_any_identify_and_the_identify_strings_after_keep_id_01():
    assert found(stats(connected(), 1.0, producers=())) == []
    traffic = identified({"client_id": "me", "HOSTNAME": "box"})  # keys in any case; user_agent absent: empty
    assert found(stats(traffic.send(0.1, b"SUB", "t", "c").ok(0.11), 1.0,
                       [entry(client_id="me", hostname="box", state=3)])) == []


def test_an_entry_keeping_the_remote_ip_after_identify_is_id_01():
    traffic = identified({"client_id": "me", "hostname": "box", "user_agent": "lib/1"})
    traffic.send(0.1, b"SUB", "t", "c").ok(0.11)
    assert found(stats(traffic, 1.0, [entry(state=3)])) == [("ID-01", "broker")]


def test_an_identify_unanswered_when_the_request_was_sent_is_not_judged():
    traffic = connected().send(0.1, b"SUB", "t", "c").ok(0.11).identify(0.5, {"client_id": "me"})
    traffic = stats(traffic, 1.0, [entry(state=3)])
    assert found(traffic) == []
    assert ("ID-01", stats_clients.IN_FLUX) in skipped(traffic)


def test_a_connection_without_a_known_address_or_start_is_not_judged():
    traffic = stats(connected(client=None), 1.0, [entry(client_id="wrong")])
    assert found(traffic) == [] and ("ID-01", stats_clients.NO_ADDRESS) in skipped(traffic)
    traffic = stats(connected(started=False), 1.0, [entry(client_id="wrong")])
    assert found(traffic) == [] and ("ID-01", stats_clients.NOT_STARTED) in skipped(traffic)


def test_an_entry_of_a_connection_closed_before_the_answer_is_not_matched():
    traffic = connected().send(0.1, b"SUB", "t", "c").ok(0.11).close(1.005, "client")
    assert found(stats(traffic, 1.0, [entry(client_id="wrong", state=3)])) == []


# ---- ST-01: the state --------------------------------------------------------------------------------------

def test_state_3_once_subscribed_and_4_after_cls_keep_st_01():
    traffic = connected().send(0.1, b"SUB", "t", "c").ok(0.11)
    stats(traffic, 0.5, [entry(state=3)])
    traffic.send(0.6, b"CLS").receive(0.61, wire.FRAME_RESPONSE, b"CLOSE_WAIT")
    assert found(stats(traffic, 1.0, [entry(state=4)])) == []


def test_state_0_after_an_answered_sub_is_st_01():
    traffic = connected().send(0.1, b"SUB", "t", "c").ok(0.11)
    assert found(stats(traffic, 1.0, [entry(state=0)])) == [("ST-01", "broker")]


def test_a_sub_sent_during_the_request_leaves_the_state_unjudged():
    traffic = connected().send(1.005, b"SUB", "t", "c").ok(1.006)
    traffic = stats(traffic, 1.0, [entry(state=0)])
    assert found(traffic, 1.5) == [] and ("ST-01", stats_clients.IN_FLUX) in skipped(traffic)


# ---- T-04, H-STATS-09: the layers, the keys, the counts ---------------------------------------------------

def test_tls_negotiated_shows_its_version_and_plain_shows_empty_strings_keeping_t_04():
    traffic = identified({"feature_negotiation": True, "tls_v1": True}, JSON_ANSWER | {"tls_v1": True}).ok(0.02)
    tls = entry(tls=True, tls_version="TLS1.3", tls_cipher_suite="Unknown 4865", client_id="", hostname="",
                tls_negotiated_protocol_is_mutual=True)
    traffic = stats(traffic, 1.0, producers=[tls])  # no producer: that is H-STATS-10's, below
    assert ("T-04", "broker") not in found(traffic)
    assert ("T-04", stats_clients.HANDSHAKE) in skipped(traffic)


def test_a_tls_client_shown_plain_is_t_04():
    traffic = identified({"feature_negotiation": True, "tls_v1": True}, JSON_ANSWER | {"tls_v1": True}).ok(0.02)
    traffic.send(0.1, b"SUB", "t", "c").ok(0.11)
    assert found(stats(traffic, 1.0, [entry(state=3, client_id="", hostname="")])) == [("T-04", "broker")]


def test_the_tls_version_is_the_one_the_server_hello_chose_where_the_capture_shows_it():
    def shown(version: str) -> Traffic:
        traffic = identified({"feature_negotiation": True, "tls_v1": True}, JSON_ANSWER | {"tls_v1": True}).ok(0.02)
        traffic.judge.tls_record("A", T0 + 0.015, "broker", Record("server_hello", (TLS12,)))
        traffic.send(0.1, b"SUB", "t", "c").ok(0.11)
        return stats(traffic, 1.0, [entry(state=3, client_id="", hostname="", tls=True, tls_version=version,
                                          tls_cipher_suite="TLS_AES_128_GCM_SHA256")])

    kept = shown("TLS1.2")
    assert found(kept) == [] and ("T-04", stats_clients.HANDSHAKE) not in skipped(kept)
    assert found(shown("TLS1.3")) == [("T-04", "broker")]


def test_a_tls_upgrade_not_yet_ok_when_the_request_was_sent_is_not_judged():
    traffic = identified({"feature_negotiation": True, "tls_v1": True}, JSON_ANSWER | {"tls_v1": True})
    traffic = stats(traffic.ok(1.005), 1.0, producers=[])
    assert ("T-04", stats_clients.IN_FLUX) not in skipped(traffic)  # not matched: no entry
    traffic = identified({"feature_negotiation": True, "tls_v1": True}, JSON_ANSWER | {"tls_v1": True})
    traffic.send(0.1, b"SUB", "t", "c").ok(0.11)
    traffic = stats(traffic, 1.0, [entry(state=3, client_id="", hostname="")])
    assert found(traffic) == [] and ("T-04", stats_clients.IN_FLUX) in skipped(traffic)


def test_missing_keys_a_wrong_sample_rate_or_fewer_messages_than_delivered_are_h_stats_09():
    traffic = connected().send(0.1, b"SUB", "t", "c").ok(0.11)
    broken = entry(state=3)
    del broken["connect_ts"]
    assert found(stats(traffic, 1.0, [broken])) == [("H-STATS-09", "broker")]
    master = entry(state=3, topology_zone="", topology_region="")  # master's keys after v1.3.0: no fault
    assert found(stats(connected().send(0.1, b"SUB", "t", "c").ok(0.11), 1.0, [master])) == []
    traffic = identified({"sample_rate": 10}).send(0.1, b"SUB", "t", "c").ok(0.11)
    assert found(stats(traffic, 1.0, [entry(state=3, client_id="", hostname="")])) == [("H-STATS-09", "broker")]
    traffic = connected().send(0.1, b"SUB", "t", "c").ok(0.11).send(0.12, b"RDY", 1).message(0.2, ID1)
    assert found(stats(traffic, 1.0, [entry(state=3, message_count=0)])) == [("H-STATS-09", "broker")]
    traffic = connected().send(0.1, b"SUB", "t", "c").ok(0.11).send(0.12, b"RDY", 1).message(0.2, ID1)
    assert found(stats(traffic, 1.0, [entry(state=3, message_count=1)])) == []


def test_a_delivery_after_the_request_was_sent_is_no_floor():
    traffic = connected().send(0.1, b"SUB", "t", "c").ok(0.11).send(0.12, b"RDY", 1).message(1.001, ID1)
    assert found(stats(traffic, 1.0, [entry(state=3, message_count=0)])) == []


# ---- H-STATS-10, P-PUB-05: the producers ---------------------------------------------------------------------

def publisher(count: int = 2) -> Traffic:
    traffic = connected()
    for index in range(count):
        traffic.send(0.1 + index / 100, b"PUB", "t", body=b"x").ok(0.105 + index / 100)
    return traffic


def test_a_publisher_listed_with_its_count_keeps_h_stats_10_and_p_pub_05():
    traffic = stats(publisher(), 1.0, producers=[entry(pub_counts=[{"topic": "t", "count": 2}])])
    assert found(traffic) == []


def test_a_publisher_missing_from_the_producers_is_p_pub_05_once_an_entry_showed_the_path_direct():
    other = Traffic()
    other.judge.open("A", T0, True, client=ADDRESS, server="127.0.0.1:4150")
    other.send(0.1, b"PUB", "t", body=b"x").ok(0.105)
    other.judge.open("B", T0, True, client="127.0.0.1:40002", server="127.0.0.1:4150")
    other.send(0.1, b"SUB", "t", "c", conn="B").ok(0.11, "B")
    listed_b = entry(remote_address="127.0.0.1:40002", state=3)
    assert found(stats(other, 1.0, [listed_b], producers=[])) == [("P-PUB-05", "broker")]
    alone = stats(publisher(), 1.0, producers=[])
    assert found(alone) == [] and ("P-PUB-05", stats_clients.NOT_DIRECT) in skipped(alone)


def test_a_count_behind_the_publishes_answered_is_p_pub_05():
    traffic = stats(publisher(), 1.0, producers=[entry(pub_counts=[{"topic": "t", "count": 1}])])
    assert found(traffic) == [("P-PUB-05", "broker")]


def test_a_producer_that_never_published_or_two_topics_in_its_counts_is_h_stats_10():
    traffic = stats(connected(), 1.0, producers=[entry(pub_counts=[{"topic": "t", "count": 1}])])
    assert found(traffic) == [("H-STATS-10", "broker")]
    traffic = publisher().send(0.2, b"PUB", "u", body=b"x").ok(0.21)
    counts = [{"topic": "t", "count": 2}, {"topic": "u", "count": 1}]
    assert found(stats(traffic, 1.0, producers=[entry(pub_counts=counts)])) == [("H-STATS-10", "broker")]


def test_a_request_answered_after_the_tallies_reach_is_not_judged():
    traffic = connected().send(0.1, b"SUB", "t", "c").ok(0.11).send(0.12, b"RDY", 2).message(0.2, ID1)
    traffic.message(5.0, ID1, attempts=2).message(100.0, ID1, attempts=3)
    traffic = stats(traffic, 1.0, [entry(state=3, message_count=0)], took=99.5)
    assert found(traffic, 101.0) == [] and ("H-STATS-09", stats_clients.LONG_ASKED) in skipped(traffic)


# ---- P-AUTH-15: the HTTP API asks no secret ----------------------------------------------------------------

def http(traffic: Traffic, at: float, target: str, status: int, body: bytes) -> Traffic:
    traffic.judge.http_exchange(HttpExchange(T0 + at, Request("POST", target, b"x"), Response(status, body),
                                             T0 + at + 0.01))
    return traffic


def authed() -> Traffic:
    return identified({"feature_negotiation": True}, JSON_ANSWER | {"auth_required": True})


def test_with_auth_on_an_http_publish_refused_for_a_secret_is_p_auth_15_and_tls_required_is_not():
    assert found(http(authed(), 1.0, "/pub?topic=t", 401, b'{"message":"AUTH_REQUIRED"}')) == [("P-AUTH-15", "broker")]
    assert found(http(authed(), 1.0, "/pub?topic=t", 403, b'{"message":"TLS_REQUIRED"}')) == []
    assert found(http(authed(), 1.0, "/pub?topic=t", 200, b"OK")) == []


def test_a_refusal_with_no_connection_telling_auth_is_on_is_not_judged():
    traffic = http(identified({"feature_negotiation": True}, JSON_ANSWER).close(0.5, "client"), 1.0, "/pub?topic=t",
                   401, b"{}")
    monitor = next(one for one in traffic.judge.monitors if isinstance(one, HttpWithoutAuth))
    assert found(traffic) == [] and monitor.not_judged


# ---- P-MPUB-05: an MPUB refused for its body made its topic ------------------------------------------------------

def refused_mpub(known_life: bool = True, http_seen: bool = True) -> Traffic:
    traffic = Traffic(http_seen=http_seen)
    traffic.judge.open("A", T0, True, client=ADDRESS)
    if known_life:
        stats(traffic, 0.0)
    traffic.send(0.1, b"MPUB", "made", body=struct_body())
    return traffic.error(0.11, b"E_BAD_MESSAGE MPUB invalid message body size 0")


def struct_body() -> bytes:
    return b"\x00\x00\x00\x01\x00\x00\x00\x00"


def listing(traffic: Traffic, at: float, *names: str) -> Traffic:
    document = {"version": "1.3.0", "health": "OK", "start_time": int(T0) - 100, "producers": [],
                "topics": [{"topic_name": name, "channels": []} for name in names]}
    traffic.judge.http_exchange(HttpExchange(T0 + at, Request("GET", "/stats?format=json", b""),
                                             Response(200, json.dumps(document).encode()), T0 + at + 0.01))
    return traffic


def test_the_topic_of_an_mpub_refused_for_its_body_listed_keeps_p_mpub_05_and_missing_breaks_it():
    assert found(listing(refused_mpub(), 1.0, "made")) == []
    assert found(listing(refused_mpub(), 1.0)) == [("P-MPUB-05", "broker")]


def test_an_mpub_before_any_answer_told_the_life_or_with_unseen_http_is_not_judged():
    assert found(listing(refused_mpub(known_life=False), 1.0)) == []
    traffic = listing(refused_mpub(http_seen=False), 1.0)
    monitor = next(one for one in traffic.judge.monitors if isinstance(one, RefusedMpubMadeTopic))
    assert found(traffic) == [] and monitor.not_judged


# ---- H-08: a name's '#' sent as %23 -----------------------------------------------------------------------

def test_an_ephemeral_channel_listed_with_its_23_kept_is_h_08_and_listed_decoded_keeps_it():
    traffic = topics_stats(ephemeral_created(), 1.0, topic("t", 0, channel("e%23ephemeral")))
    assert ephemeral_found(traffic, 2.0) == [("H-08", "broker")]
    traffic = topics_stats(ephemeral_created(), 1.0, topic("t", 0, channel("e#ephemeral")))
    assert ephemeral_found(traffic, 2.0) == []
