"""Every fault of the catalogue changes behaviour: a small direct probe, with the suite's own client, observes
something through the faulty proxy that differs from what it observes through the faithful one (so a kill by the
mutation run is never an artefact of the proxy). The two sides run at once, each against a reference broker of its
own; the persistence faults' probe restarts a broker with ``amnesiac.py``."""

from __future__ import annotations

import contextlib
import json
import shlex
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from conformance.case import Case, Target
from conformance.catalogue import requirements
from conformance.client import Mismatch, quote
from conformance.connection import Closed
from conformance.liveness import probe_nsqd
from conformance.lookupd_fake import FakeLookupd
from conformance.selftest import amnesiac
from conformance.selftest.faults import BY_NAME, FAULTS
from conformance.selftest.mutation import CONTROLS
from conformance.selftest.proxy import FaultyProxy
from conformance.target import EmbeddedBroker, Profile, free_loopback_address, parse_address, restart_with_command
from nsq_protocol import wire

PROBES = {}
SECTIONS = {"loss", "delay", "duplication", "order", "frame", "parameters", "errors", "state", "http", "stats",
            "admin", "ephemeral", "registration", "persistence", "tls", "death"}


def probe(*names):
    def register(function):
        for name in names:
            PROBES[name] = function
        return function
    return register


# ---- small observations -----------------------------------------------------------------------------------------

def consumer(case: Case, topic: str, ready: int, fields: dict | None = None):
    conn = case.connect()
    if fields:
        conn.identify(fields)
    conn.subscribe(topic, "c", ready=ready)
    return conn


def received(conn, seconds: float, fin: bool = True) -> list[wire.Frame]:
    """Every message within ``seconds``, each FINed unless told otherwise."""
    frames, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            batch = conn.poll(deadline - time.monotonic())
        except Mismatch:
            break
        for frame in batch:
            if frame.frame_type == wire.FRAME_MESSAGE:
                frames.append(frame)
                if fin:
                    conn.command("FIN", frame.message_id.decode())
    return frames


def first_answer(conn, seconds: float = 1.0) -> str:
    """The next response or error frame, or how the connection ended."""
    try:
        frame = conn.next_frame(seconds)
    except Mismatch as exc:
        return "closed" if "closed" in str(exc) else "nothing"
    except Closed:
        return "closed"
    return frame.data.decode("utf-8", "replace") if frame.frame_type != wire.FRAME_MESSAGE else "MESSAGE"


def still_open(conn, seconds: float = 0.5) -> bool:
    try:
        conn.expect_silence(seconds)
    except Mismatch:
        return False
    return True


def publish(case: Case, topic: str, *bodies: bytes) -> None:
    conn = case.connect()
    for body in bodies:
        conn.publish(topic, body)


def mpub(case: Case, topic: str, count: int) -> None:
    conn = case.connect()
    conn.command("MPUB", topic, body=wire.mpub_body([b"m%03d" % number for number in range(count)]))
    conn.expect_response(b"OK")


def one_delivered(case: Case, topic: str, fields: dict | None = None):
    conn = consumer(case, topic, 1, fields)
    publish(case, topic, b"m")
    return conn, conn.expect_message(b"m")


# ---- the probes ---------------------------------------------------------------------------------------------------

@probe("lose-1-in-100", "duplicate-1-in-50")
def _deliveries_of_150(case):
    topic = case.topic()
    conn = consumer(case, topic, 200)
    mpub(case, topic, 150)
    return len(received(conn, 1.0))


@probe("pub-acked-not-stored")
def _deliveries_of_50_pubs(case):
    topic = case.topic()
    conn = consumer(case, topic, 100)
    producer = case.connect()
    producer.send(b"".join(wire.encode_command("PUB", topic, body=b"p%d" % n) for n in range(50)))
    for _ in range(50):
        producer.expect_response(b"OK")
    return len(received(conn, 1.0))


@probe("mpub-drops-last")
def _deliveries_of_an_mpub_of_3(case):
    topic = case.topic()
    conn = consumer(case, topic, 5)
    mpub(case, topic, 3)
    return len(received(conn, 0.5))


@probe("dropped-without-channels")
def _delivered_of_a_pub_before_the_first_sub(case):
    topic = case.topic()
    publish(case, topic, b"held")
    return len(received(consumer(case, topic, 1), 0.5))


@probe("replayed-into-new-channel")
def _earlier_messages_on_a_later_channel(case):
    topic = case.topic()
    earlier = case.connect()
    earlier.subscribe(topic, "c1", ready=1)
    publish(case, topic, b"early")
    earlier.expect_message(b"early")
    later = case.connect()
    later.subscribe(topic, "c2", ready=1)
    return len(received(later, 0.5))


@probe("late-flush")
def _latency_at_rdy_1_over_200_ms(case):
    topic = case.topic()
    conn = consumer(case, topic, 1)
    start = time.monotonic()
    publish(case, topic, b"now")
    conn.expect_message(b"now")
    return time.monotonic() - start > 0.2


@probe("msg-timeout-doubled", "msg-timeout-ignored")
def _redelivered_within_1_6_s_of_a_1_s_timeout(case):
    topic = case.topic()
    case.fresh_channel(topic, "c")
    conn, _ = one_delivered(case, topic, {"msg_timeout": 1000})
    return bool(received(conn, 1.6))


@probe("touch-ignored")
def _redelivered_despite_touch(case):
    topic = case.topic()
    case.fresh_channel(topic, "c")
    conn, message = one_delivered(case, topic, {"msg_timeout": 2000})
    time.sleep(1.5)
    conn.command("TOUCH", message.message_id.decode())
    return bool(received(conn, 1.3, fin=False))


@probe("errors-overtake-responses")
def _pipelined_sub_and_unknown_fin(case):
    conn = case.connect()
    conn.send(wire.encode_command("SUB", case.topic(), "c") + b"FIN 0123456789abcdef\n")
    return [first_answer(conn), first_answer(conn)]


@probe("attempts-stuck", "attempts-from-zero", "timestamp-in-microseconds", "timestamp-renewed-on-redelivery",
       "ids-uppercase")
def _a_message_and_its_redelivery(case):
    conn, first = one_delivered(case, case.topic())
    conn.command("REQ", first.message_id.decode(), 0)
    again = conn.expect_message(b"m")
    return (first.attempts, again.attempts, first.timestamp > 10**17, first.timestamp == again.timestamp,
            first.message_id == first.message_id.lower() == again.message_id)


@probe("rdy-capped-at-1")
def _deliveries_of_3_at_rdy_3_unsettled(case):
    topic = case.topic()
    conn = consumer(case, topic, 3)
    mpub(case, topic, 3)
    return len(received(conn, 0.5, fin=False))


@probe("rdy-0-ignored")
def _delivery_after_rdy_0(case):
    topic = case.topic()
    conn = consumer(case, topic, 5)
    conn.send(b"RDY 0\nFIN 0123456789abcdef\n")
    first_answer(conn)  # E_FIN_FAILED: the RDY before it has been read
    publish(case, topic, b"m")
    return len(received(conn, 0.5))


@probe("req-delay-ignored")
def _back_within_half_a_second_of_req_1000(case):
    conn, message = one_delivered(case, case.topic())
    conn.command("REQ", message.message_id.decode(), 1000)
    return len(received(conn, 0.5))


@probe("dpub-defer-ignored")
def _dpub_1000_within_half_a_second(case):
    topic = case.topic()
    conn = consumer(case, topic, 1)
    producer = case.connect()
    producer.command("DPUB", topic, 1000, body=b"later")
    producer.expect_response(b"OK")
    return len(received(conn, 0.5))


@probe("http-defer-ignored")
def _http_defer_1000_within_half_a_second(case):
    topic = case.topic()
    conn = consumer(case, topic, 1)
    case.http.post(f"/pub?topic={quote(topic)}&defer=1000", b"later")
    return len(received(conn, 0.5))


@probe("heartbeat-interval-ignored")
def _heartbeat_within_1_5_s(case):
    conn = case.connect()
    conn.identify({"heartbeat_interval": 1000})
    conn.expect_silence(1.5)  # answers heartbeats itself; what came shows in the transcript
    return "_heartbeat_" in case.transcript.render()


@probe("output-buffer-timeout-ignored")
def _lone_message_after_600_ms(case):
    topic = case.topic()
    publish(case, topic, b"m")
    start = time.monotonic()
    conn = consumer(case, topic, 10, {"output_buffer_timeout": 1000})
    conn.expect_message(b"m")
    return time.monotonic() - start > 0.6


@probe("output-buffer-size-ignored")
def _unbuffered_within_100_ms(case):
    topic = case.topic()
    conn = consumer(case, topic, 10, {"output_buffer_size": -1})
    start = time.monotonic()
    publish(case, topic, b"m")
    conn.expect_message(b"m")
    return time.monotonic() - start < 0.1


@probe("sample-rate-ignored")
def _sampled_deliveries_of_100(case):
    topic = case.topic()
    conn = consumer(case, topic, 100, {"sample_rate": 10})
    mpub(case, topic, 100)
    return len(received(conn, 1.0)) < 60


@probe("deflate-level-ignored", "snappy-ignored")
def _compression_answers(case):
    levels = case.connect().identify({"feature_negotiation": True, "deflate": True, "deflate_level": 1},
                                     upgrade=False)
    snappy = case.connect().identify({"feature_negotiation": True, "snappy": True}, upgrade=False)
    return levels["deflate_level"], snappy["snappy"]


@probe("exits-on-negative-deflate-level", "hangs-on-negative-deflate-level")
def _after_a_negative_deflate_level(case):
    """Does a fresh connection still get its IDENTIFY answered after one that asked for deflate level -5?"""
    with contextlib.suppress(Mismatch):
        case.connect().identify({"feature_negotiation": True, "deflate": True, "deflate_level": -5})
    return probe_nsqd(case.target.tcp, None, 1.0) is None


@probe("error-reworded", "fatal-error-not-flushed", "no-close-after-fatal")
def _an_unknown_command(case):
    conn = case.connect()
    conn.send(b"BOGUS\n")
    return first_answer(conn), first_answer(conn)


@probe("errors-as-responses")
def _the_frame_type_of_an_error(case):
    conn = case.connect()
    conn.send(b"BOGUS\n")
    return conn.raw_frame(1.0).frame_type


@probe("identify-answer-without-max-msg-timeout")
def _the_keys_of_the_identify_answer(case):
    return sorted(case.connect().identify({"feature_negotiation": True}))


@probe("fin-failed-as-invalid", "close-after-non-fatal")
def _fin_of_an_unknown_id(case):
    conn = case.connect()
    conn.subscribe(case.topic(), "c")
    conn.send(b"FIN 0123456789abcdef\n")
    return first_answer(conn), still_open(conn)


@probe("bad-topic-as-invalid", "bad-message-as-bad-body")
def _bad_publishes(case):
    conn = case.connect()
    conn.command("PUB", "a!b", body=b"x")
    other = case.connect()
    other.command("PUB", case.topic(), body=b"")
    return first_answer(conn).split()[0], first_answer(other).split()[0]


@probe("second-sub-accepted", "identify-after-sub-accepted")
def _commands_after_sub(case):
    answers = []
    for command in (wire.encode_command("SUB", case.topic(), "c"), wire.encode_command("IDENTIFY", body=b"{}")):
        conn = case.connect()
        conn.subscribe(case.topic(), "c")
        conn.send(command)
        answers.append(first_answer(conn))
    return answers


@probe("rdy-before-sub-ignored")
def _rdy_before_sub(case):
    conn = case.connect()
    conn.command("RDY", 1)
    return first_answer(conn)


@probe("cls-keeps-rdy")
def _delivery_after_cls(case):
    topic = case.topic()
    conn = consumer(case, topic, 5)
    conn.command("CLS")
    conn.expect_response(b"CLOSE_WAIT")
    publish(case, topic, b"m")
    return len(received(conn, 0.5))


@probe("http-4xx-as-500", "http-error-key-renamed")
def _http_empty_publish(case):
    response = case.http.post(f"/pub?topic={case.topic()}", b"")
    return response.status, response.body


@probe("bad-query-as-not-found")
def _http_unparsable_query(case):
    response = case.http.post("/pub?topic=%zz", b"x")
    return response.status, response.body


@probe("stats-without-client-count", "stats-message-count-zero", "stats-in-flight-zero")
def _stats_with_one_in_flight(case):
    topic = case.topic()
    one_delivered(case, topic)
    channel = case.http.channel_stats(topic, "c")
    return channel.get("client_count"), channel.get("message_count"), channel.get("in_flight_count")


@probe("stats-deferred-zero")
def _deferred_count_after_dpub(case):
    topic = case.topic()
    consumer(case, topic, 0)
    producer = case.connect()
    producer.command("DPUB", topic, 10000, body=b"later")
    producer.expect_response(b"OK")
    time.sleep(0.2)
    return case.http.channel_stats(topic, "c")["deferred_count"]


@probe("stats-unsorted")
def _channel_order(case):
    topic = case.topic()
    case.create_over_http(topic, "zz", "aa")
    return [channel.get("channel_name") for channel in case.http.stats(topic)["channels"]]


@probe("text-stats-without-paused-marks")
def _paused_mark_in_the_text_report(case):
    topic = case.topic()
    case.create_over_http(topic)
    case.http.post(f"/topic/pause?topic={quote(topic)}")
    return f"*P [{topic}" in case.http.get("/stats").body.decode("utf-8", "replace")


@probe("pause-of-missing-answered-ok")
def _pause_of_a_missing_topic(case):
    return case.http.post(f"/topic/pause?topic={quote(case.topic(create=False))}").status


@probe("channel-pause-ignored", "topic-pause-ignored")
def _deliveries_while_paused(case):
    counts = []
    for endpoint in ("/channel/pause?topic={}&channel=c", "/topic/pause?topic={}"):
        topic = case.topic()
        conn = consumer(case, topic, 1)
        case.http.post(endpoint.format(quote(topic)))
        publish(case, topic, b"m")
        counts.append(len(received(conn, 0.5)))
    return counts


@probe("channel-empty-ignored")
def _depth_after_empty(case):
    topic = case.topic()
    consumer(case, topic, 0)
    publish(case, topic, b"m")
    case.http.post(f"/channel/empty?topic={quote(topic)}&channel=c")
    return case.http.channel_stats(topic, "c")["depth"]


@probe("channel-delete-only-empties")
def _subscriber_after_channel_delete(case):
    topic = case.topic()
    conn = consumer(case, topic, 1)
    case.http.post(f"/channel/delete?topic={quote(topic)}&channel=c")
    return still_open(conn)


@probe("client-close-noticed-late")
def _ephemeral_channel_after_its_client_left(case):
    topic = case.topic()
    conn = case.connect()
    conn.subscribe(topic, "e#ephemeral")
    conn.close()
    time.sleep(0.5)
    return case.http.channel_stats(topic, "e#ephemeral") is not None


@probe("lookupd-config-ignored", "no-ping", "unregister-missed")
def _what_a_fake_nsqlookupd_hears(case):
    lookupd = FakeLookupd().start()
    try:
        case.http.request("PUT", "/config/nsqlookupd_tcp_addresses", json.dumps(["%s:%d" % lookupd.address])
                          .encode())
        topic = case.topic()
        case.http.post(f"/topic/create?topic={topic}")
        case.http.post(f"/channel/create?topic={topic}&channel=c")
        time.sleep(0.5)
        case.http.post(f"/channel/delete?topic={topic}&channel=c")
        case.until(lambda: any(event.line == "PING" for event in lookupd.since(0)), 15.5, "a PING")
        lines = {event.line.split(" ")[0] for event in lookupd.since(0)}
        return sorted(lines & {"IDENTIFY", "PING", "UNREGISTER"})
    finally:
        case.http.request("PUT", "/config/nsqlookupd_tcp_addresses", b"[]")
        lookupd.stop()


@probe("tls-not-offered", "tls-ok-before-handshake")
def _bytes_after_identify_tls(case):
    with socket.create_connection(case.target.tcp) as sock:
        sock.sendall(wire.MAGIC_V2 + wire.encode_command("IDENTIFY", body=json.dumps(
            {"feature_negotiation": True, "tls_v1": True}).encode()))
        sock.settimeout(0.5)
        data = b""
        with contextlib.suppress(TimeoutError):
            while more := sock.recv(65536):
                data += more
    return data


# ---- the tests ----------------------------------------------------------------------------------------------------

MUTANTS = [fault for fault in FAULTS if fault.name not in CONTROLS]


def test_the_catalogue():
    """At least 40 faults, every section of the issue covered, every named requirement in the catalogue, a probe
    for each."""
    assert len(MUTANTS) >= 40
    assert {fault.section for fault in MUTANTS} == SECTIONS
    catalogue = requirements()
    assert all(requirement in catalogue for fault in MUTANTS for requirement in fault.requirements)
    assert sorted(PROBES) == sorted(fault.name for fault in MUTANTS if not fault.restart)


@pytest.fixture(scope="module")
def broker_pairs():
    """Two reference brokers per profile (the faithful side, the faulty side), started when first asked for."""
    with contextlib.ExitStack() as stack:
        started = {}

        def pair(profile: str):
            if profile not in started:
                started[profile] = [stack.enter_context(EmbeddedBroker(Profile.load(profile))) for _ in range(2)]
            return started[profile]
        yield pair


def observe(fault_name: str, broker: EmbeddedBroker, profile: str, function):
    fault = BY_NAME[fault_name]
    proxies = [FaultyProxy(address, fault).start() for address in (broker.tcp_address, broker.http_address)]
    case = Case(Target(Profile.load(profile), proxies[0].address, proxies[1].address, 1.0), "probe")
    try:
        return function(case)
    finally:
        case.close()
        for proxy in proxies:
            proxy.stop()


@pytest.mark.parametrize("fault", [fault for fault in MUTANTS if not fault.restart], ids=lambda fault: fault.name)
def test_the_fault_changes_behaviour(fault, broker_pairs):
    faithful_broker, faulty_broker = broker_pairs(fault.profile)
    with ThreadPoolExecutor(2) as pool:
        faithful = pool.submit(observe, "none", faithful_broker, fault.profile, PROBES[fault.name])
        faulty = pool.submit(observe, fault.name, faulty_broker, fault.profile, PROBES[fault.name])
        faithful, faulty = faithful.result(), faulty.result()
    assert faithful != faulty, f"{fault.name}: the probe sees the same through the faulty proxy: {faulty!r}"


def after_restart(kind: str, tmp_path) -> tuple:
    """A topic with a paused channel, one message queued and one in flight; SIGTERM and start again with ``kind``:
    does the topic exist, is the channel paused, how deep is it?"""
    tmp_path.mkdir()
    pidfile, addresses = tmp_path / "pid", [free_loopback_address(), free_loopback_address()]
    start = [sys.executable, "-m", "conformance.selftest.amnesiac", str(pidfile), str(tmp_path / "data"), *addresses]
    targets = [parse_address(address, "broker") for address in addresses]
    restart_with_command(shlex.join([*start, "none"]), targets)
    case = Case(Target(Profile.load("nsqd-defaults"), *targets, 1.0), "probe")
    try:
        topic = case.topic()
        one_delivered(case, topic)
        publish(case, topic, b"queued")
        case.http.post(f"/channel/pause?topic={topic}&channel=c")
        restart_with_command(shlex.join([*start, kind]), targets)
        channel = case.http.channel_stats(topic, "c")
        return (channel is not None, channel and channel["paused"], channel and channel["depth"])
    finally:
        amnesiac.stop(pidfile)


@pytest.mark.parametrize("fault", [fault for fault in MUTANTS if fault.restart], ids=lambda fault: fault.name)
def test_the_restart_fault_changes_behaviour(fault, tmp_path):
    faithful = after_restart("none", tmp_path / "faithful")
    faulty = after_restart(fault.restart, tmp_path / "faulty")
    assert faithful == (True, True, 2)
    assert faulty != faithful
