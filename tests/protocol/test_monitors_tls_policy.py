"""The TLS policy as the traffic shows it (tls_http.py; tls_handshake.py): plain HTTP refused or served as the broker's
--tls-required says (told, or shown by its first answers), and the plain records of the TLS handshake against
--tls-min-version and the client auth policy."""

from __future__ import annotations

import json

from nsq_protocol import monitors, wire
from nsq_protocol.http import HttpExchange, Request, Response
from nsq_protocol.monitors import BROKER, CLIENT, TlsPolicy
from nsq_protocol.monitors.connection import TAIL_LOST
from nsq_protocol.monitors.tls_handshake import NO_MINIMUM, TLS13_HIDES, TlsHandshake
from nsq_protocol.monitors.tls_http import NOT_SHOWN, PlainHttpPolicy
from nsq_protocol.monitors.tls_policy import RESTARTED
from nsq_protocol.tls_records import (
    ALERT_NAME,
    ENCRYPTED,
    NOT_TLS,
    PROTOCOL_VERSION,
    TLS10,
    TLS11,
    TLS12,
    TLS13,
    Record,
    TlsReader,
)

T0 = 1_800_000_000.0
JSON = {"x-nsq-content-type": "nsq; version=1.0", "content-type": "application/json; charset=utf-8"}
REFUSED = Response(403, b'{"message": "TLS_REQUIRED", "https_port": 4152}', JSON)
OTHER_PORT = Response(403, b'{"message": "TLS_REQUIRED", "https_port": 4999}', JSON)
SERVED = Response(200, b"OK", {"x-nsq-content-type": "nsq; version=1.0"})
TCP_REFUSAL = b"E_INVALID cannot PUB in current state (TLS required)"


class Traffic:
    def __init__(self, *watching, told: TlsPolicy | None = None):
        self.judge = monitors.Judge([monitor() for monitor in watching], timing=True, http_seen=True, tls_policy=told)

    def connect(self, name: str, at: float) -> Traffic:
        self.judge.open(name, T0 + at, True)
        return self

    def close(self, name: str, at: float) -> Traffic:
        self.judge.close(name, T0 + at, monitors.BROKER)
        return self

    def http(self, at: float, response: Response, path: str = "/ping", method: str = "GET", tls: bool = False
             ) -> Traffic:
        self.judge.http_exchange(HttpExchange(T0 + at, Request(method, path, b""), response, T0 + at, tls))
        return self

    def tcp_refused(self, at: float, name: str) -> Traffic:
        self.judge.observe(name, monitors.from_command(T0 + at, wire.Command(b"PUB", (b"t",), b"x")))
        self.judge.observe(name, monitors.from_frame(T0 + at, wire.Frame(wire.FRAME_ERROR, TCP_REFUSAL)))
        return self

    def named(self) -> set[tuple[str, str]]:
        return {(v.item, v.side) for v in self.judge.finish(T0 + 100)}


# ---- T-10, T-11, T-16: plain HTTP --------------------------------------------------------------------------

def test_plain_http_refused_alike_once_shown():
    kept = Traffic(PlainHttpPolicy).connect("A", 0).http(1, REFUSED).http(2, REFUSED, "/nope") \
        .http(3, REFUSED, "/pub?topic=t", "POST").http(4, SERVED, tls=True)  # HTTPS serves
    assert kept.named() == set()
    broken = Traffic(PlainHttpPolicy).connect("A", 0).http(1, REFUSED).http(2, SERVED, "/pub?topic=t", "POST")
    assert broken.named() == {("T-10", "broker")}
    moved = Traffic(PlainHttpPolicy).connect("A", 0).http(1, REFUSED).http(2, OTHER_PORT)
    assert moved.named() == {("T-10", "broker")}


def test_plain_http_policy_not_judged_before_it_shows_or_after_a_possible_restart():
    unshown = Traffic(PlainHttpPolicy).connect("A", 0).http(1, SERVED)
    assert unshown.named() == set()
    assert unshown.judge.not_judged["T-10", NOT_SHOWN] == 1
    restarted = Traffic(PlainHttpPolicy).connect("A", 0).http(1, REFUSED).close("A", 2).connect("B", 3) \
        .http(4, SERVED)  # no connection lived through: the broker may have restarted without --tls-required
    assert restarted.named() == set()
    assert restarted.judge.not_judged["T-10", RESTARTED] == 1


def test_tcp_https_shown_keeps_plain_http_served():
    kept = Traffic(PlainHttpPolicy).connect("A", 0).connect("B", 0).tcp_refused(1, "B").http(2, SERVED) \
        .http(3, SERVED, "/stats")
    assert kept.named() == set()
    broken = Traffic(PlainHttpPolicy).connect("A", 0).connect("B", 0).tcp_refused(1, "B").http(2, SERVED) \
        .http(3, REFUSED)
    assert broken.named() == {("T-11", "broker")}
    untold = Traffic(PlainHttpPolicy).connect("A", 0).http(1, REFUSED)  # nothing served before: no contradiction
    assert untold.named() == set()
    assert untold.judge.not_judged["T-11", NOT_SHOWN] == 1


def test_told_policy_judges_every_plain_request():
    required = TlsPolicy("true")
    assert Traffic(PlainHttpPolicy, told=required).http(1, REFUSED).http(2, REFUSED, "/x", "HEAD").named() == set()
    assert Traffic(PlainHttpPolicy, told=required).http(1, SERVED).named() == {("T-10", "broker")}
    implied = TlsPolicy(client_auth="require")  # T-12: the policy alone requires TLS on HTTP too
    assert implied.plain_http_refused
    assert Traffic(PlainHttpPolicy, told=implied).http(1, SERVED).named() == {("T-16", "broker")}
    tcp_https = TlsPolicy("tcp-https", "require")
    assert Traffic(PlainHttpPolicy, told=tcp_https).http(1, SERVED).named() == set()
    assert Traffic(PlainHttpPolicy, told=tcp_https).http(1, REFUSED).named() == {("T-11", "broker")}
    untold = Traffic(PlainHttpPolicy, told=TlsPolicy()).http(1, SERVED)
    assert untold.named() == set()
    assert untold.judge.not_judged["T-10", "the broker is told not to require TLS"] == 1


def test_policy_of_a_profile():
    assert TlsPolicy.of({"tls_required": "true", "tls_client_auth": "require-verify", "tls_min_version": "tls1.3"}) \
        == TlsPolicy("true", "require-verify", "tls1.3")
    assert TlsPolicy.of({}) == TlsPolicy()


def test_told_policy_judges_plain_tcp_from_the_first_connection():
    from nsq_protocol.monitors.tls import TlsRequired
    refused = Traffic(TlsRequired, told=TlsPolicy("tcp-https")).connect("A", 0).tcp_refused(1, "A")
    assert refused.named() == set()
    served = Traffic(TlsRequired, told=TlsPolicy(client_auth="require")).connect("A", 0)
    served.judge.observe("A", monitors.from_command(T0 + 1, wire.Command(b"PUB", (b"t",), b"x")))
    served.judge.observe("A", monitors.from_frame(T0 + 1, wire.Frame(wire.FRAME_RESPONSE, b"OK")))
    assert served.named() == {("T-07", "broker")}
    untold = Traffic(TlsRequired).connect("A", 0)
    untold.judge.observe("A", monitors.from_command(T0 + 1, wire.Command(b"NOP", ())))
    assert untold.named() == set()
    assert untold.judge.not_judged["T-07", "no TLS-required refusal (the broker's flag) while the connection was "
                                           "open"] == 1


# ---- ID-31, ID-32, T-17: the plaintext handshake -------------------------------------------------------------

TLS_ANSWER = json.dumps({"max_rdy_count": 2500, "version": "1.3.0", "max_msg_timeout": 900000, "msg_timeout": 60000,
                         "tls_v1": True, "deflate": False, "deflate_level": 6, "max_deflate_level": 6,
                         "snappy": False, "sample_rate": 0, "auth_required": False, "output_buffer_size": 16384,
                         "output_buffer_timeout": 250}).encode()
HELLO_12, HELLO_13 = Record("client_hello", (TLS10, TLS11, TLS12)), Record("client_hello", (TLS12, TLS13))


class Handshakes(Traffic):
    def __init__(self, told: TlsPolicy | None = None):
        super().__init__(TlsHandshake, told=told)

    def upgrade(self, at: float, name: str) -> Handshakes:
        self.connect(name, at)
        body = json.dumps({"feature_negotiation": True, "tls_v1": True}).encode()
        self.judge.observe(name, monitors.from_command(T0 + at, wire.Command(b"IDENTIFY", (), body)))
        self.judge.observe(name, monitors.from_frame(T0 + at, wire.Frame(wire.FRAME_RESPONSE, TLS_ANSWER)))
        return self

    def record(self, at: float, name: str, sender: str, *records: Record) -> Handshakes:
        for record in records:
            self.judge.tls_record(name, T0 + at, sender, record)
        return self

    def session(self, at: float, name: str, hello: Record, *answer: Record, ended: bool = True) -> Handshakes:
        """The feeder closes a connection where its plaintext ends (judge/monitoring.py: TLS_OPAQUE)."""
        self.upgrade(at, name).record(at + 0.01, name, CLIENT, hello).record(at + 0.02, name, BROKER, *answer)
        return self.close(name, at + 0.02) if ended else self


ACCEPTED_13 = (Record("server_hello", (TLS13,)), Record(ENCRYPTED))
VERSION_REFUSED = (Record(ALERT_NAME, alert=PROTOCOL_VERSION),)


def test_the_handshake_follows_the_answer_and_the_client_hello():
    assert Handshakes().session(1, "A", HELLO_13, *ACCEPTED_13).named() == set()
    early = Handshakes().upgrade(1, "A").record(1.01, "A", BROKER, *ACCEPTED_13)
    assert early.named() == {("ID-31", "broker")}
    garbage = Handshakes().session(1, "A", HELLO_13, Record(NOT_TLS, text="record header 0000000600"))
    assert garbage.named() == {("ID-31", "broker")}
    after_other_bytes = Handshakes().session(1, "A", Record(NOT_TLS, text="record header 5055422074"),
                                             *ACCEPTED_13)
    assert after_other_bytes.named() == {("ID-31", "broker")}


def test_a_silent_client_is_closed_at_the_deadline():
    closed = Handshakes().upgrade(1, "A").close("A", 6.1)
    assert closed.named() == set()
    kept_open = Handshakes().upgrade(1, "A")
    assert kept_open.named() == {("ID-31", "broker")}  # the traffic goes on to 100 s
    handshaking = Handshakes().upgrade(1, "A").record(5.5, "A", CLIENT, HELLO_13).record(5.51, "A", BROKER,
                                                                                        *ACCEPTED_13)
    assert handshaking.named() == set()
    lost = Handshakes()
    lost.judge.open("A", T0 + 1, True, seen_until=T0 + 2)
    lost.judge.observe("A", monitors.from_command(T0 + 1, wire.Command(b"IDENTIFY", (), b'{"tls_v1": true}')))
    lost.judge.observe("A", monitors.from_frame(T0 + 1, wire.Frame(wire.FRAME_RESPONSE, TLS_ANSWER)))
    assert lost.named() == set()
    assert lost.judge.not_judged["ID-31", TAIL_LOST] == 1


def test_the_minimum_version_told():
    told = TlsPolicy("true", "require-verify", "tls1.3")
    kept = Handshakes(told).session(1, "A", HELLO_12, *VERSION_REFUSED).session(2, "B", HELLO_13, *ACCEPTED_13)
    assert kept.named() == set()
    below = Handshakes(told).session(1, "A", HELLO_12, Record("server_hello", (TLS12,)))
    assert below.named() == {("T-17", "broker")}
    refused = Handshakes(told).session(1, "A", HELLO_13, *VERSION_REFUSED)
    assert refused.named() == {("T-17", "broker")}


def test_the_minimum_version_shown():
    kept = Handshakes().connect("W", 0).session(1, "A", HELLO_12, *VERSION_REFUSED) \
        .session(2, "B", HELLO_13, *ACCEPTED_13).session(3, "C", HELLO_12, *VERSION_REFUSED)
    assert kept.named() == set()
    assert kept.judge.not_judged["T-17", NO_MINIMUM] == 1  # the first one showed it
    broken = Handshakes().connect("W", 0).session(1, "A", HELLO_12, *VERSION_REFUSED) \
        .session(2, "B", HELLO_12, Record("server_hello", (TLS12,)))
    assert broken.named() == {("T-17", "broker")}
    lowered = Handshakes().connect("W", 0).session(1, "A", HELLO_13, *ACCEPTED_13) \
        .session(2, "B", HELLO_13, *VERSION_REFUSED)
    assert lowered.named() == {("T-17", "broker")}
    restarted = Handshakes().connect("W", 0).session(1, "A", HELLO_12, *VERSION_REFUSED).close("W", 1.5) \
        .session(2, "B", HELLO_12, Record("server_hello", (TLS12,)))
    assert restarted.named() == set()
    assert restarted.judge.not_judged["T-17", RESTARTED] == 1


FLIGHT_12 = (Record("server_hello", (TLS12,)), Record("certificate", certificates=1),
             Record("server_key_exchange"))
ASKS = (*FLIGHT_12, Record("certificate_request"), Record("server_hello_done"))
ASKS_NOT = (*FLIGHT_12, Record("server_hello_done"))
EMPTY = (Record("certificate", certificates=0), Record("client_key_exchange"), Record(ENCRYPTED))


def test_an_empty_client_certificate_is_refused_where_the_broker_asked():
    refused = Handshakes().session(1, "A", HELLO_12, *ASKS, ended=False).record(1.03, "A", CLIENT, *EMPTY) \
        .record(1.04, "A", BROKER, Record(ALERT_NAME, alert=42))
    assert ("ID-32", "broker") not in refused.named()
    accepted = Handshakes().session(1, "A", HELLO_12, *ASKS, ended=False).record(1.03, "A", CLIENT, *EMPTY) \
        .record(1.04, "A", BROKER, Record(ENCRYPTED))
    assert ("ID-32", "broker") in accepted.named()
    unasked = Handshakes().session(1, "A", HELLO_12, *ASKS_NOT, ended=False).record(1.03, "A", CLIENT, *EMPTY) \
        .record(1.04, "A", BROKER, Record(ENCRYPTED))
    assert ("ID-32", "broker") not in unasked.named()


def test_the_certificate_request_against_the_policy():
    told = TlsPolicy(client_auth="require")
    assert Handshakes(told).session(1, "A", HELLO_12, *ASKS).named() == set()
    assert Handshakes(told).session(1, "A", HELLO_12, *ASKS_NOT).named() == {("ID-32", "broker")}
    assert Handshakes(TlsPolicy()).session(1, "A", HELLO_12, *ASKS).named() == {("ID-32", "broker")}
    shown = Handshakes().connect("W", 0).session(1, "A", HELLO_12, *ASKS).session(2, "B", HELLO_12, *ASKS_NOT)
    assert shown.named() == {("ID-32", "broker")}
    tls13 = Handshakes().session(1, "A", HELLO_13, *ACCEPTED_13)
    assert tls13.named() == set()
    assert tls13.judge.not_judged["ID-32", TLS13_HIDES] == 1


def test_plaintext_records_read_from_bytes():
    reader = TlsReader()
    hello = bytes.fromhex("0303") + bytes(32) + b"\x00" + b"\x00\x02\x13\x01" + b"\x01\x00" \
        + (7).to_bytes(2, "big") + bytes.fromhex("002b") + (3).to_bytes(2, "big") + bytes.fromhex("020304")
    message = b"\x01" + len(hello).to_bytes(3, "big") + hello
    record = bytes.fromhex("160301") + len(message).to_bytes(2, "big") + message
    assert reader.feed(record[:7]) == []  # a record comes whole
    assert reader.feed(record[7:] + bytes.fromhex("1403030001") + b"\x01") == [
        Record("client_hello", (TLS13,)), Record(ENCRYPTED)]
    assert reader.done and reader.feed(b"more") == []
    assert TlsReader().feed(b"PUB t\n") == [Record(NOT_TLS, text="record header 5055422074")]
    assert Record.from_text("client_hello", Record("client_hello", (TLS12, TLS13)).as_text()) == HELLO_13
    truncated = TlsReader()
    assert truncated.feed(bytes.fromhex("160303000401000010")) == []  # a message longer than its record: waits


def test_a_client_hello_timed_before_the_answer_still_counts():
    early = Handshakes().connect("A", 1).record(1.0, "A", CLIENT, HELLO_13)
    body = json.dumps({"feature_negotiation": True, "tls_v1": True}).encode()
    early.judge.observe("A", monitors.from_command(T0 + 1, wire.Command(b"IDENTIFY", (), body)))
    early.judge.observe("A", monitors.from_frame(T0 + 1.01, wire.Frame(wire.FRAME_RESPONSE, TLS_ANSWER)))
    early.record(1.02, "A", BROKER, *ACCEPTED_13).close("A", 1.02)
    assert early.named() == set()
