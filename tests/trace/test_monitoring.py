"""The catalogue's monitors over captures (spark_analysis/judge/monitoring.py): the real nsqd's captures break no
broker rule, and a broker bug written into a real pcap is named by its item, with the side that broke it."""

from __future__ import annotations

import gc
import json
import ssl
import struct
import weakref
from collections import Counter

import pytest

from nsq_protocol import wire
from spark_analysis.generate.capture import EPOCH_NS, MS, Capture, Connection
from spark_analysis.judge.monitoring import judge_capture
from tests.trace.trace_helpers import PCAPS, REPO

RECORDED = {"workload-small": 24150, "compressed": 24150, "cluster": 24150, "transcripts": 24150}
IDENTIFY_ANSWER = {"max_rdy_count": 2500, "version": "1.3.0", "max_msg_timeout": 900000, "msg_timeout": 1000,
                   "tls_v1": False, "deflate": False, "deflate_level": 6, "max_deflate_level": 6, "snappy": False,
                   "sample_rate": 0, "auth_required": False, "output_buffer_size": 16384,
                   "output_buffer_timeout": 250}


def judged(path, port: int = 4150, http_port: int | None = None):
    return judge_capture(path, frozenset({port}), frozenset({http_port}) if http_port else frozenset())


@pytest.mark.parametrize("capture", sorted(RECORDED))
def test_the_real_nsqd_breaks_no_rule_in_its_captures(capture):
    judges = judged(PCAPS / f"{capture}.pcap", RECORDED[capture], RECORDED[capture] + 1)  # its HTTP API too
    assert all(judge.http_seen for judge in judges.values())
    broker_side = [v.describe() for judge in judges.values() for v in judge.violations if v.side == "broker"]
    assert judges and not broker_side, broker_side
    assert sum(len(judge.connections) for judge in judges.values()) >= 3


@pytest.mark.parametrize("capture", sorted(RECORDED))
def test_monitors_judged_in_shares_find_together_what_one_judge_finds(capture):
    """`analyze` spreads one nsqd's monitors over as many tasks as cores (judge/job.py): every violation, every
    "not judged" count, once."""
    def verdicts(share):
        judges = judge_capture(PCAPS / f"{capture}.pcap", frozenset({RECORDED[capture]}),
                               frozenset({RECORDED[capture] + 1}), share=share)
        return ([v.as_dict() for judge in judges.values() for v in judge.violations],
                Counter({key: count for judge in judges.values() for key, count in judge.not_judged.items()}))

    whole_violations, whole_not_judged = verdicts((0, 1))
    assert whole_violations or capture != "transcripts"
    for count in (2, 3):
        shares = [verdicts((index, count)) for index in range(count)]
        assert sorted(map(repr, (v for violations, _ in shares for v in violations))) == \
            sorted(map(repr, whole_violations))
        assert sum((not_judged for _, not_judged in shares), Counter()) == whole_not_judged


@pytest.mark.parametrize("capture", sorted(RECORDED))
def test_a_judge_is_freed_without_the_cycle_collector(capture):
    """A judge holds millions of objects on a real capture: in no reference cycle, so that it is freed as its task
    lets go of it, with the cycle collector off (whose passes over it cost ~20 % of the judging)."""
    gc.disable()
    try:
        judges = judged(PCAPS / f"{capture}.pcap", RECORDED[capture], RECORDED[capture] + 1)
        freed = [weakref.ref(judge) for judge in judges.values()]
        del judges
        assert freed and all(judge() is None for judge in freed)
    finally:
        gc.enable()


def test_the_recordings_clients_rule_breaking_is_named_as_the_clients():
    """The workload FINs IDs it never got on purpose (its truth counts them): P-FIN-04, the client's side."""
    truth = json.loads((PCAPS / "workload-small.truth.json").read_text())
    violations = [v for judge in judged(PCAPS / "workload-small.pcap", 24150).values() for v in judge.violations]
    assert {(v.item, v.side) for v in violations} == {("P-FIN-04", "client")}
    deliberate = sum(channel["e_fin_failed_deliberate_unknown_id"] for topic in truth["topics"].values()
                     for channel in topic["channels"].values())
    assert len(violations) == deliberate


class Exchange:
    """One client connection to a broker, written as a real capture: what the client sends, what the broker
    answers, at the times given (ms)."""

    def __init__(self, path):
        self.capture = Capture(str(path), "pcap")
        self.conn = Connection(self.capture, "A", 40000, 1000)
        self.conn.open(EPOCH_NS)
        self.conn.send("c2s", EPOCH_NS + MS, wire.MAGIC_V2)

    def client(self, ms: float, data: bytes) -> Exchange:
        self.conn.send("c2s", EPOCH_NS + int(ms * MS), data)
        return self

    def broker(self, ms: float, data: bytes) -> Exchange:
        self.conn.send("s2c", EPOCH_NS + int(ms * MS), data)
        return self

    def subscribed(self) -> Exchange:
        self.client(2, wire.encode_command("IDENTIFY", body=wire.identify_body(
            {"feature_negotiation": True, "msg_timeout": 1000, "heartbeat_interval": 1000})))
        self.broker(3, wire.encode_frame(wire.FRAME_RESPONSE, json.dumps(IDENTIFY_ANSWER).encode()))
        self.client(4, wire.encode_command("SUB", "t", "c")).broker(5, wire.encode_frame(wire.FRAME_RESPONSE, b"OK"))
        return self.client(6, wire.encode_command("RDY", 1))

    def message(self, ms: float, attempts: int) -> Exchange:
        return self.broker(ms, wire.encode_frame(wire.FRAME_MESSAGE, wire.encode_message(
            EPOCH_NS - 10**10, attempts, b"0000000000000001", b"body")))

    def heartbeats(self, until_ms: int) -> Exchange:
        for ms in range(1000, until_ms, 1000):
            self.broker(ms, wire.encode_frame(wire.FRAME_RESPONSE, wire.HEARTBEAT)).client(ms + 1, b"NOP\n")
        return self

    def http(self, ms: float, request: bytes, answer: bytes = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; "
             b"charset=utf-8\r\nX-Nsq-Content-Type: nsq; version=1.0\r\nContent-Length: 2\r\n\r\nOK") -> Exchange:
        """One request to the broker's HTTP API (port 4151) on a connection of its own, and its answer (by default
        nsqd's to a /pub)."""
        http = Connection(self.capture, "H", 40001, 5000)
        http.ports = {"c2s": (40001, 4151), "s2c": (4151, 40001)}
        http.open(EPOCH_NS + int(ms * MS))
        http.send("c2s", EPOCH_NS + int(ms * MS), request)
        http.send("s2c", EPOCH_NS + int((ms + 1) * MS), answer)
        http.close(EPOCH_NS + int((ms + 2) * MS))
        return self

    def end(self, ms: float):
        self.conn.close(EPOCH_NS + int(ms * MS))
        self.capture.close()


def named(path) -> set[tuple[str, str]]:
    return {(v.item, v.side) for judge in judged(path).values() for v in judge.violations}


def test_attempts_stuck_at_one_is_named_c12(tmp_path):
    Exchange(tmp_path / "a.pcap").subscribed().message(10, 1).heartbeats(3000).message(1600, 1).end(3000)
    assert named(tmp_path / "a.pcap") == {("C-12", "broker")}


def test_a_healthy_timeout_redelivery_is_not_named(tmp_path):
    Exchange(tmp_path / "a.pcap").subscribed().message(10, 1).heartbeats(3000).message(1600, 2).end(3000)
    assert named(tmp_path / "a.pcap") == set()


def test_an_error_written_as_a_response_is_named_c07(tmp_path):
    exchange = Exchange(tmp_path / "a.pcap").client(2, wire.encode_command("PUB", "bad!", body=b"x"))
    exchange.broker(3, wire.encode_frame(wire.FRAME_RESPONSE, b"E_BAD_TOPIC PUB topic name \"bad!\" is not valid"))
    exchange.end(10)
    assert named(tmp_path / "a.pcap") == {("C-07", "broker")}


def test_heartbeats_never_sent_are_named_c28(tmp_path):
    exchange = Exchange(tmp_path / "a.pcap").subscribed()
    for ms in range(500, 5000, 500):
        exchange.client(ms, b"NOP\n")
    exchange.end(5000)
    assert named(tmp_path / "a.pcap") == {("C-28", "broker")}


def test_a_message_that_never_times_out_is_d11_where_the_brokers_http_api_is_in_the_capture(tmp_path):
    """Without the HTTP API in the capture, a /channel/empty or /channel/pause there would explain it."""
    Exchange(tmp_path / "a.pcap").subscribed().message(10, 1).heartbeats(9000).end(9000)
    [judge] = judged(tmp_path / "a.pcap").values()
    assert judge.violations == []
    assert judge.not_judged[
        "D-11", "some connection, or the HTTP requests, of this nsqd are not in the traffic"] == 1
    # never back: past its scan's bound too (D-14)
    assert named_with_http(tmp_path / "a.pcap") == {("D-11", "broker"), ("D-14", "broker")}


def test_a_channel_emptied_over_http_is_no_lost_redelivery(tmp_path):
    exchange = Exchange(tmp_path / "a.pcap").subscribed().message(10, 1)
    exchange.http(500, b"POST /channel/empty?topic=t&channel=c HTTP/1.1\r\nHost: x\r\n\r\n", EMPTY_200)
    exchange.heartbeats(9000).end(9000)
    assert named_with_http(tmp_path / "a.pcap") == set()


def test_an_http_answer_nsqd_would_not_give_is_named_from_the_capture(tmp_path):
    exchange = Exchange(tmp_path / "a.pcap").subscribed()
    exchange.http(500, b"POST /pub HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
                  b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json; charset=utf-8\r\n"
                  b"X-Nsq-Content-Type: nsq; version=1.0\r\nContent-Length: 31\r\n\r\n"
                  b'{"message":"MISSING_ARG_TOPIC"}')  # H-PUB-02: an empty body is refused before the topic
    exchange.end(1000)
    assert named_with_http(tmp_path / "a.pcap") == {("H-PUB-02", "broker")}


EMPTY_200 = b"HTTP/1.1 200 OK\r\nX-Nsq-Content-Type: nsq; version=1.0\r\nContent-Length: 0\r\n\r\n"  # as nsqd


def named_with_http(path) -> set[tuple[str, str]]:
    return {(v.item, v.side) for judge in judged(path, 4150, 4151).values() for v in judge.violations}


def test_the_monitors_body_hash_is_the_decoders_bulk_one():
    """A publish joins its deliveries by body hash, in the monitors as in the decoder's tables: one hash."""
    from nsq_protocol.monitors import body_hash
    from spark_analysis.decode.v2 import body_hashes

    bodies = [b"", b"x", b"hello world", bytes(range(256)) * 40]
    assert body_hashes(bodies) == [body_hash(body) for body in bodies]


@pytest.mark.parametrize(("plaintext_ok", "named_items"), [(True, {("ID-30", "broker")}), (False, set())])
def test_an_ok_in_plaintext_where_the_tls_handshake_belongs_is_id30(tmp_path, plaintext_ok, named_items):
    """After an answer that switches TLS on, the server's next bytes are its handshake; the OK goes through TLS,
    which a capture does not show. An OK a capture can read went out in plaintext (ID-30)."""
    exchange = Exchange(tmp_path / "a.pcap").client(2, wire.encode_command("IDENTIFY", body=wire.identify_body(
        {"feature_negotiation": True, "tls_v1": True})))
    server_hello = b"\x16\x03\x03\x00\x04\x02\x00\x00\x00"
    ok = wire.encode_frame(wire.FRAME_RESPONSE, b"OK") if plaintext_ok else b""
    exchange.broker(3, wire.encode_frame(wire.FRAME_RESPONSE, json.dumps({**IDENTIFY_ANSWER, "tls_v1": True}).encode())
                    + ok)
    exchange.client(4, b"\x16\x03\x01\x00\x04\x01\x00\x00\x00").broker(5, server_hello).end(10)
    assert named(tmp_path / "a.pcap") == named_items


def tls12_handshake(server_verify: ssl.VerifyMode) -> list[tuple[str, bytes]]:
    """A TLS 1.2 handshake of Python's ssl with the suite's test certificates, its client presenting no certificate:
    each side's flights in order ("c2s", "s2c")."""
    tls = REPO / "conformance" / "tls"
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(tls / "server.pem", tls / "server.key")
    server.load_verify_locations(tls / "ca.pem")
    server.verify_mode = server_verify
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname, client.verify_mode, client.maximum_version = False, ssl.CERT_NONE, ssl.TLSVersion.TLSv1_2
    bios = [ssl.MemoryBIO() for _ in range(4)]
    ends = {"c2s": (client.wrap_bio(bios[0], bios[1]), bios[1], bios[2]),
            "s2c": (server.wrap_bio(bios[2], bios[3], server_side=True), bios[3], bios[0])}
    flights = []
    for _ in range(4):
        for direction, (end, outgoing, peer) in ends.items():
            try:
                end.do_handshake()
            except ssl.SSLError:
                pass  # wants more, or failed: what it wrote is its flight
            if data := outgoing.read():
                flights.append((direction, data))
                peer.write(data)
    return flights


@pytest.mark.parametrize(("verify", "named_items"), [(ssl.CERT_REQUIRED, set()), (ssl.CERT_OPTIONAL,
                                                                                   {("ID-32", "broker")})])
def test_a_broker_that_asks_for_a_certificate_refuses_an_empty_one_id32(tmp_path, verify, named_items):
    """Under TLS 1.2 the CertificateRequest and the client's Certificate are plaintext: a broker that asked for a
    certificate and goes on after an empty one (OpenSSL's CERT_OPTIONAL; nsqd's policies both refuse) breaks ID-32."""
    exchange = Exchange(tmp_path / "a.pcap").client(2, wire.encode_command("IDENTIFY", body=wire.identify_body(
        {"feature_negotiation": True, "tls_v1": True})))
    exchange.broker(3, wire.encode_frame(wire.FRAME_RESPONSE, json.dumps({**IDENTIFY_ANSWER, "tls_v1": True}).encode()))
    for ms, (direction, data) in enumerate(tls12_handshake(verify), 4):
        (exchange.client if direction == "c2s" else exchange.broker)(ms, data)
    exchange.end(20)
    assert named(tmp_path / "a.pcap") == named_items


def test_an_overlong_client_line_reaches_the_monitors_and_a_broker_that_keeps_the_connection_is_named(tmp_path):
    """C-19: the decoder's row for a line over nsqd's 16 KiB buffer is the client's unreadable bytes to the judge;
    nsqd closes at once and sends nothing, this broker still answers and closes only when the client gives up."""
    exchange = Exchange(tmp_path / "a.pcap").client(2, b"NOP" + b"x" * wire.DEFAULT_MAX_LINE)
    exchange.broker(3, wire.encode_frame(wire.FRAME_ERROR, b"E_INVALID invalid command")).end(3000)
    [judge] = judged(tmp_path / "a.pcap").values()
    assert {(v.item, v.side) for v in judge.violations if v.item == "C-19"} == {("C-19", "broker")}


def test_an_overlong_client_line_closed_as_nsqd_does_is_not_named(tmp_path):
    capture = Capture(str(tmp_path / "a.pcap"), "pcap")
    conn = Connection(capture, "A", 40000, 1000)
    conn.open(EPOCH_NS)
    conn.send("c2s", EPOCH_NS + MS, wire.MAGIC_V2 + b"NOP" + b"x" * wire.DEFAULT_MAX_LINE)
    conn.close(EPOCH_NS + 2 * MS, first="s2c")
    capture.close()
    [judge] = judged(tmp_path / "a.pcap").values()
    assert judge.violations == []
    assert not any(item == "C-19" for item, _ in judge.not_judged)


def test_a_bad_magic_in_a_capture_answered_as_nsqd_is_not_named_and_a_silent_close_is_c02(tmp_path):
    for answered, expected in ((True, set()), (False, {("C-02", "broker")})):
        capture = Capture(str(tmp_path / "a.pcap"), "pcap")
        conn = Connection(capture, "A", 40000, 1000)
        conn.open(EPOCH_NS)
        conn.send("c2s", EPOCH_NS + MS, b"  V3")
        if answered:
            conn.send("s2c", EPOCH_NS + 2 * MS, wire.encode_frame(wire.FRAME_ERROR, b"E_BAD_PROTOCOL"))
        conn.close(EPOCH_NS + 3 * MS, first="s2c")
        capture.close()
        assert named(tmp_path / "a.pcap") == expected


def test_a_magic_cut_short_by_the_clients_fin_answered_by_nothing_keeps_c03_and_by_a_frame_is_named(tmp_path):
    """The decoder's row for a client FIN within the magic (C-03) reaches the monitors as the suite's event does."""
    for answered, expected in ((False, set()), (True, {("C-03", "broker")})):
        capture = Capture(str(tmp_path / "a.pcap"), "pcap")
        conn = Connection(capture, "A", 40000, 1000)
        conn.open(EPOCH_NS)
        conn.send("c2s", EPOCH_NS + MS, b"  ")
        if answered:
            conn.send("s2c", EPOCH_NS + MS + MS // 2, wire.encode_frame(wire.FRAME_ERROR, b"E_BAD_PROTOCOL"))
        conn.close(EPOCH_NS + 2 * MS, first="c2s")
        capture.close()
        [judge] = judged(tmp_path / "a.pcap").values()
        assert {(v.item, v.side) for v in judge.violations} == expected
        assert any(event == "C-03" for event, _ in judge.not_judged) != answered, "the close after the client's FIN"


def _error(code: bytes, text: bytes) -> bytes:
    return wire.encode_frame(wire.FRAME_ERROR, code + b" " + text)


_OK = wire.encode_frame(wire.FRAME_RESPONSE, b"OK")
_BATCH = wire.mpub_body([b"a", b"bc"])
# the line's shape and the bodies' sizes the decoder reads for the monitors (C-14, C-17, P-AUTH-02, P-AUTH-03,
# P-MPUB-04): a command, nsqd's answer, and a broker's that breaks the item
LINE_SHAPES = {
    "C-14": (b"SUB t c\r\n", _OK, _error(b"E_BAD_CHANNEL", b'SUB channel name "c\\r" is not valid')),
    "C-17": (b"SUB t c more\n", _OK, _error(b"E_INVALID", b"SUB invalid number of parameters")),
    "P-AUTH-02": (b"AUTH secret\n" + struct.pack(">i", 1) + b"s",
                  _error(b"E_INVALID", b"AUTH invalid number of parameters"), _error(b"E_AUTH_DISABLED",
                                                                                     b"AUTH disabled")),
    "P-AUTH-03": (b"AUTH\n" + struct.pack(">i", 0), _error(b"E_BAD_BODY", b"AUTH invalid body size 0"),
                  _error(b"E_AUTH_DISABLED", b"AUTH disabled")),
    # the outer size 10 beyond the body its count and sizes frame: nsqd reads those, and publishes
    "P-MPUB-04": (b"MPUB t\n" + struct.pack(">i", len(_BATCH) + 10) + _BATCH, _OK,
                  _error(b"E_BAD_SIZE", b"MPUB body size 25 is not 15")),
}


def shaped_capture(path, answers: dict[str, bytes]) -> None:
    """A connection per item of ``answers`` (LINE_SHAPES' command, answered so), each closed by nsqd."""
    capture = Capture(str(path), "pcap")
    for index, (item, answer) in enumerate(answers.items()):
        conn = Connection(capture, item, 40000 + index, 1000 + 100_000 * index)
        at = EPOCH_NS + index * 100 * MS
        conn.open(at)
        conn.send("c2s", at + MS, wire.MAGIC_V2 + LINE_SHAPES[item][0])
        conn.send("s2c", at + 2 * MS, answer)
        conn.close(at + 3 * MS)
    capture.close()


@pytest.mark.parametrize("item", sorted(LINE_SHAPES))
def test_a_command_lines_shape_and_body_size_are_judged_from_a_capture(tmp_path, item):
    command, kept, broken = LINE_SHAPES[item]
    shaped_capture(tmp_path / "kept.pcap", {item: kept})
    [judge] = judged(tmp_path / "kept.pcap").values()
    assert judge.violations == [] and not [why for (skipped, why) in judge.not_judged if skipped == item]
    shaped_capture(tmp_path / "broken.pcap", {item: broken})
    assert named(tmp_path / "broken.pcap") == {(item, "broker")}
