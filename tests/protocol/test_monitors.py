"""The catalogue's monitors on hand-made traffic: each rule fires on the broker bug it names, stays silent on the
real nsqd's behaviour, and says "not judged" where the traffic lacks what it needs. The events are built from the
codec's own records (wire.Command, wire.Frame), as the suite's connections build them."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable

import pytest

from nsq_protocol import monitors, wire
from nsq_protocol.monitors import BROKER, CLIENT, HttpAction
from nsq_protocol.monitors.connection import TAIL_LOST

T0 = 1_800_000_000.0  # seconds since the epoch: the traffic's clock
NS = 1_000_000_000


class Traffic:
    """One nsqd's traffic, written in the order it crossed the wire; ``judge()`` runs the monitors over it."""

    def __init__(self, timing: bool = True, http_seen: bool = True, also: tuple[monitors.Monitor, ...] = (),
                 release: tuple[int, ...] | None = (1, 3, 0), fresh: Callable[[str], bool] | None = None):
        self.judge = monitors.Judge([*(monitor() for monitor in monitors.MONITORS), *also], timing=timing,
                                    http_seen=http_seen, release=release, fresh=fresh)

    def connect(self, name: str = "A", at: float = 0.0, started: bool = True, seen_until: float | None = None
                ) -> Traffic:
        self.judge.open(name, T0 + at, started, seen_until=None if seen_until is None else T0 + seen_until)
        return self

    def send(self, at: float, name: bytes, *params: bytes | str | int, body: bytes | None = None,
             conn: str = "A") -> Traffic:
        command = wire.Command(name, tuple(wire.encode_command(b"X", p)[2:-1] for p in params), body)
        self.judge.observe(conn, monitors.from_command(T0 + at, command))
        return self

    def identify(self, at: float, fields: dict, conn: str = "A") -> Traffic:
        return self.send(at, b"IDENTIFY", body=json.dumps(fields).encode(), conn=conn)

    def receive(self, at: float, frame_type: int, data: bytes, conn: str = "A") -> Traffic:
        self.judge.observe(conn, monitors.from_frame(T0 + at, wire.Frame(frame_type, data)))
        return self

    def ok(self, at: float, conn: str = "A") -> Traffic:
        return self.receive(at, wire.FRAME_RESPONSE, b"OK", conn)

    def heartbeat(self, at: float, conn: str = "A") -> Traffic:
        return self.receive(at, wire.FRAME_RESPONSE, wire.HEARTBEAT, conn)

    def message(self, at: float, msg_id: bytes, attempts: int = 1, body: bytes = b"hello", conn: str = "A",
                published: float | None = None) -> Traffic:
        stamp = int((T0 + (-10.0 if published is None else published)) * NS)  # before the traffic by default
        return self.receive(at, wire.FRAME_MESSAGE, wire.encode_message(stamp, attempts, msg_id, body), conn)

    def error(self, at: float, text: bytes, conn: str = "A") -> Traffic:
        return self.receive(at, wire.FRAME_ERROR, text, conn)

    def close(self, at: float, by: str | None, conn: str = "A") -> Traffic:
        self.judge.close(conn, T0 + at, by)
        return self

    def violations(self, end: float) -> list[tuple[str, str]]:
        return [(violation.item, violation.side) for violation in self.judge.finish(T0 + end)]


ID1, ID2, ID3 = b"0000000000000001", b"0000000000000002", b"0000000000000003"


def consumer(timeout_ms: int = 2000, rdy: int = 1, timing: bool = True, also=()) -> Traffic:
    """Subscribed with msg_timeout negotiated, answered as nsqd answers it."""
    answer = {name: 0 for name in monitors.connection.IDENTIFY_ANSWER_FIELDS} | {
        "max_rdy_count": 2500, "msg_timeout": timeout_ms, "max_msg_timeout": 900_000, "output_buffer_timeout": 250,
        "output_buffer_size": 16_384, "tls_v1": False, "snappy": False, "deflate": False}
    return (Traffic(timing, also=also).connect().identify(0.0, {"feature_negotiation": True, "msg_timeout": timeout_ms})
            .receive(0.001, wire.FRAME_RESPONSE, json.dumps(answer).encode())
            .send(0.01, b"SUB", "t", "c").ok(0.011).send(0.02, b"RDY", rdy))


# ---- frames and errors ---------------------------------------------------------------------------------

def test_an_error_sent_as_a_response_frame_is_c07():
    traffic = Traffic().connect().send(0.0, b"PUB", "bad topic!", body=b"x")
    traffic.receive(0.01, wire.FRAME_RESPONSE, b"E_BAD_TOPIC PUB topic name is not valid")
    assert traffic.violations(1.0) == [("C-07", BROKER)]


def test_an_error_frame_without_its_code_is_c08_and_a_real_one_is_not():
    traffic = Traffic().connect().send(0.0, b"NOPE").error(0.01, b"invalid command NOPE").close(0.02, BROKER)
    assert traffic.violations(1.0) == [("C-08", BROKER)]
    traffic = Traffic().connect().send(0.0, b"NOPE").error(0.01, b"E_INVALID invalid command NOPE")
    assert traffic.close(0.02, BROKER).violations(1.0) == []


def test_a_connection_left_open_after_a_fatal_error_is_c23():
    traffic = Traffic().connect().send(0.0, b"NOPE").error(0.01, b"E_INVALID invalid command NOPE")
    assert traffic.close(3.0, CLIENT).violations(3.0) == [("C-23", BROKER)]
    traffic = Traffic().connect().send(0.0, b"NOPE").error(0.01, b"E_INVALID invalid command NOPE")
    assert traffic.send(2.0, b"NOP").violations(5.0) == [("C-23", BROKER)], "alive, and open when the capture ends"
    lost = Traffic().connect().send(0.0, b"NOPE").error(0.01, b"E_INVALID invalid command NOPE")
    assert lost.violations(5.0) == [], "nothing after the error: the capture may have lost the close"


def test_a_non_fatal_error_keeps_the_connection_and_a_heartbeat_may_slip_out_after_a_fatal_one():
    traffic = consumer().message(0.1, ID1).send(0.2, b"FIN", ID2.decode())
    traffic.error(0.21, b"E_FIN_FAILED FIN 0000000000000002 failed ID not in flight")
    assert ("C-23", BROKER) not in traffic.violations(5.0)
    traffic = Traffic(timing=False).connect().send(0.0, b"NOPE").error(0.01, b"E_INVALID invalid command NOPE")
    assert traffic.heartbeat(4.0).close(4.0, BROKER).violations(4.0) == []


def test_the_suite_without_timing_judges_a_later_frame_by_order_alone():
    traffic = Traffic(timing=False).connect().send(0.0, b"NOPE").error(0.01, b"E_INVALID invalid command NOPE")
    assert traffic.ok(0.02).violations(0.02) == [("C-23", BROKER), ("C-13", BROKER)]


def test_an_uppercase_id_is_c10_and_a_timestamp_in_microseconds_c09():
    upper = consumer(rdy=5).message(0.1, b"0000000000000ABC")
    assert upper.violations(0.2) == [("C-10", BROKER)]
    traffic = consumer(rdy=5)
    traffic.receive(0.1, wire.FRAME_MESSAGE, wire.encode_message(int(T0 * 1e6), 1, ID1, b"x"))  # microseconds
    assert traffic.violations(0.2) == [("C-09", BROKER)]
    short = consumer(rdy=5).receive(0.1, wire.FRAME_MESSAGE, b"\0" * 20)
    assert short.violations(0.2) == [("C-09", BROKER)]


def test_a_redelivery_with_a_new_timestamp_is_c12():
    traffic = consumer(timeout_ms=1000).message(0.1, ID1, attempts=1, published=-5.0)
    assert traffic.message(2.0, ID1, attempts=2, published=-4.0).violations(2.1) == [("C-12", BROKER)]


def test_a_response_to_no_command_is_c13_but_an_upgrades_ok_is_not():
    extra = consumer().send(0.1, b"NOP").ok(0.11)
    assert extra.violations(0.2) == [("C-13", BROKER)]
    answer = {name: 0 for name in monitors.connection.IDENTIFY_ANSWER_FIELDS} | {"snappy": True, "tls_v1": False,
                                                                                  "deflate": False,
                                                                                  "output_buffer_size": 16_384}
    upgraded = Traffic().connect().identify(0.0, {"feature_negotiation": True, "snappy": True})
    upgraded.receive(0.01, wire.FRAME_RESPONSE, json.dumps(answer).encode()).ok(0.02)
    assert upgraded.violations(0.1) == []


# ---- heartbeats ----------------------------------------------------------------------------------------

def test_no_heartbeat_for_two_negotiated_intervals_is_c28():
    traffic = Traffic().connect().identify(0.0, {"heartbeat_interval": 1000}).ok(0.01)
    traffic.heartbeat(1.01).send(1.02, b"NOP")
    assert traffic.close(5.0, CLIENT).violations(5.0) == [("C-28", BROKER)]


def test_heartbeats_on_the_ticker_are_not_a_violation_and_a_mid_stream_capture_is_not_judged():
    traffic = Traffic().connect().identify(0.0, {"heartbeat_interval": 1000}).ok(0.01)
    for second in range(1, 6):
        traffic.heartbeat(second + 0.01).send(second + 0.02, b"NOP")
    assert traffic.close(5.5, CLIENT).violations(5.5) == []
    mid_stream = Traffic().connect(started=False).send(0.0, b"NOP")
    assert mid_stream.close(100.0, CLIENT).violations(100.0) == []
    assert ("C-28", "the heartbeat interval or the connection's start is not in the traffic") in \
        mid_stream.judge.not_judged


def test_the_default_interval_is_30_s_and_minus_one_turns_heartbeats_off():
    assert Traffic().connect().send(1.0, b"NOP").close(50.0, CLIENT).violations(50.0) == [("C-28", BROKER)]
    assert Traffic().connect().send(1.0, b"NOP").close(40.0, CLIENT).violations(40.0) == []
    off = Traffic().connect().identify(0.0, {"heartbeat_interval": -1}).ok(0.01)
    assert off.close(100.0, CLIENT).violations(100.0) == []


def test_a_client_silent_for_two_intervals_and_closed_by_the_broker_broke_c29():
    traffic = Traffic().connect().identify(0.0, {"heartbeat_interval": 1000}).ok(0.01)
    traffic.heartbeat(1.0).heartbeat(2.0)
    assert traffic.close(2.05, BROKER).violations(2.05) == [("C-29", CLIENT)]


# ---- IDENTIFY ------------------------------------------------------------------------------------------

def test_a_negotiated_answer_without_every_field_is_id20():
    answer = {"max_rdy_count": 2500, "version": "x", "msg_timeout": 60000}
    traffic = Traffic().connect().identify(0.0, {"Feature_Negotiation": True})
    traffic.receive(0.01, wire.FRAME_RESPONSE, json.dumps(answer).encode())
    found = traffic.judge.finish(T0 + 0.02)
    assert [(v.item, v.side) for v in found] == [("ID-20", BROKER)]
    assert "max_msg_timeout" in found[0].observed and "output_buffer_timeout" in found[0].observed


def test_json_without_negotiation_or_ok_with_it_is_id09():
    plain = Traffic().connect().identify(0.0, {"client_id": "x"}).receive(0.01, wire.FRAME_RESPONSE, b"{}")
    assert plain.violations(0.02) == [("ID-09", BROKER)]
    asked = Traffic().connect().identify(0.0, {"feature_negotiation": True}).ok(0.01)
    assert asked.violations(0.02) == [("ID-09", BROKER)]
    assert consumer().violations(0.1) == []


# ---- delivery ------------------------------------------------------------------------------------------

def test_a_delivery_beyond_rdy_is_d01_and_one_after_a_fin_is_not():
    traffic = consumer(rdy=1).message(0.1, ID1).message(0.2, ID2)
    assert traffic.violations(0.3) == [("D-01", BROKER)]
    assert consumer(rdy=1).message(0.1, ID1).send(0.15, b"FIN", ID1.decode()).message(0.2, ID2).violations(0.3) == []


def test_d01_is_not_judged_without_the_subscription_or_timing():
    mid = Traffic().connect(started=False).message(0.1, ID1).message(0.2, ID2)
    assert mid.violations(0.3) == []
    assert ("D-01", "the subscription's start (its RDY) is not in the traffic") in mid.judge.not_judged
    assert consumer(rdy=1, timing=False).message(0.1, ID1).message(0.2, ID2).violations(0.3) == []


def test_attempts_that_do_not_grow_are_c12():
    traffic = consumer(timeout_ms=1000).message(0.1, ID1, attempts=1).message(2.0, ID1, attempts=1)
    assert ("C-12", BROKER) in traffic.violations(2.1)
    traffic = consumer(timeout_ms=1000).message(0.1, ID1, attempts=1).message(2.0, ID1, attempts=2)
    assert traffic.violations(2.1) == []


def test_after_a_crash_a_message_may_come_again_as_it_was_written():
    """A disk queue whose read position was not synced at a SIGKILL hands its messages on again, attempts 1."""
    traffic = Traffic(timing=False).connect().send(0.0, b"SUB", "t", "c").ok(0.01).send(0.02, b"RDY", 5)
    traffic.judge.crash(T0 + 0.5)
    traffic.connect("B", 1.0).send(1.0, b"SUB", "t", "c", conn="B").ok(1.01, conn="B").send(1.02, b"RDY", 5, conn="B")
    traffic.message(1.1, ID1, conn="B").send(1.2, b"FIN", ID1.decode(), conn="B").message(1.3, ID1, conn="B")
    assert traffic.violations(2.0) == []
    assert ("C-12", "the broker crashed: a disk queue whose read position was not synced hands messages on again") \
        in traffic.judge.not_judged


def test_a_finished_message_delivered_again_is_p_fin_06_unless_its_fin_failed():
    traffic = consumer(timeout_ms=1000).message(0.1, ID1).send(0.2, b"FIN", ID1.decode())
    assert traffic.message(2.0, ID1, attempts=2).violations(2.1) == [("P-FIN-06", BROKER)]
    late = consumer(timeout_ms=1000).message(0.1, ID1).send(1.5, b"FIN", ID1.decode())
    late.error(1.51, b"E_FIN_FAILED FIN 0000000000000001 failed ID not in flight")
    assert late.message(2.0, ID1, attempts=2).violations(2.1) == []


def test_a_message_back_before_its_timeout_is_d11_and_a_touched_one_p_touch_04():
    early = consumer(timeout_ms=5000).message(0.1, ID1).message(1.0, ID1, attempts=2)
    assert early.violations(1.1) == [("D-11", BROKER)]
    touched = consumer(timeout_ms=2000).message(0.1, ID1).send(1.5, b"TOUCH", ID1.decode())
    assert touched.message(2.2, ID1, attempts=2).violations(2.3) == [("P-TOUCH-04", BROKER)]
    on_time = consumer(timeout_ms=2000).message(0.1, ID1).message(2.2, ID1, attempts=2)
    assert on_time.violations(2.3) == []


def test_a_timeout_left_to_the_brokers_flag_is_not_guessed():
    traffic = Traffic().connect().identify(0.0, {"client_id": "x"}).ok(0.01).send(0.02, b"SUB", "t", "c")
    traffic.ok(0.03).send(0.04, b"RDY", 2).message(0.1, ID1).message(1.5, ID1, attempts=2)
    assert traffic.violations(1.6) == []
    assert ("D-11", "the msg_timeout of the first delivery is the broker's flag, not in the traffic") in \
        traffic.judge.not_judged


def test_an_identify_without_negotiation_sets_msg_timeout_too():
    """nsqd applies msg_timeout from an IDENTIFY answered OK (ID-07): not the 60 s default."""
    traffic = Traffic().connect().identify(0.0, {"msg_timeout": 1000}).ok(0.01).send(0.02, b"SUB", "t", "c")
    traffic.ok(0.03).send(0.04, b"RDY", 1).message(0.1, ID1).message(1.5, ID1, attempts=2)
    assert traffic.violations(1.6) == []


def test_a_message_never_back_after_its_timeout_or_req_delay_is_d11_or_p_req_07():
    never = consumer(timeout_ms=1000).message(0.1, ID1).send(9.0, b"NOP")
    assert never.violations(9.0) == [("D-11", BROKER), ("D-14", BROKER)], "never back, so late past the scan (D-14)"
    requeued = consumer(timeout_ms=60000).message(0.1, ID1).send(0.2, b"REQ", ID1.decode(), 500)
    assert requeued.send(8.0, b"NOP").violations(8.0) == [("P-REQ-07", BROKER)]
    back = consumer(timeout_ms=60000).message(0.1, ID1).send(0.2, b"REQ", ID1.decode(), 500)
    assert back.message(0.8, ID1, attempts=2).send(8.0, b"NOP").violations(8.0) == []


def test_a_message_that_cannot_come_back_is_not_a_violation():
    """No consumer with room (RDY 0), or the channel paused over HTTP: the broker could not deliver it."""
    stalled = consumer(timeout_ms=1000).message(0.1, ID1).send(0.2, b"RDY", 0).send(9.0, b"NOP")
    assert stalled.violations(9.0) == []
    paused = consumer(timeout_ms=1000).message(0.1, ID1)
    paused.judge.http(HttpAction(T0 + 0.2, "/channel/pause", "t", "c", 200))
    assert paused.send(9.0, b"NOP").violations(9.0) == []
    unseen = consumer(timeout_ms=1000).connect("B", 0.0, started=False).message(0.1, ID1).send(9.0, b"NOP")
    assert unseen.violations(9.0) == []


def test_the_clients_fin_of_an_id_it_never_got_is_p_fin_04_on_the_client():
    traffic = consumer().send(0.1, b"FIN", ID3.decode())
    traffic.error(0.11, b"E_FIN_FAILED FIN 0000000000000003 failed ID not in flight")
    assert traffic.violations(0.2) == [("P-FIN-04", CLIENT)]


# ---- publishing ----------------------------------------------------------------------------------------

def test_a_dpub_delivered_before_its_delay_is_p_dpub_04():
    def run(delivered_at: float) -> list:
        traffic = consumer().connect("P", 0.0).send(0.1, b"DPUB", "t", 2000, body=b"later", conn="P")
        traffic.ok(0.11, conn="P")
        return traffic.message(delivered_at, ID1, body=b"later").violations(delivered_at + 0.1)
    assert run(0.2) == [("P-DPUB-04", BROKER)]
    assert run(2.2) == []


def test_a_body_no_publish_carried_is_c09():
    def run(delivered: bytes, http_seen: bool = True) -> list:
        traffic = Traffic(http_seen=http_seen).connect("P").send(0.1, b"PUB", "t", body=b"hello world", conn="P")
        traffic.ok(0.11, conn="P").connect("A", 0.2).send(0.2, b"SUB", "t", "c").ok(0.21).send(0.22, b"RDY", 5)
        return traffic.message(2.3, ID1, body=delivered, published=2.0).violations(2.4)
    assert run(b"hello") == [("C-09", BROKER)]
    assert run(b"hello world") == []
    assert run(b"hello", http_seen=False) == [], "an HTTP publish may have carried it"


def test_an_accepted_publish_never_delivered_to_an_idle_ready_consumer_is_d35():
    def run(delivered: bool, rdy: int = 5, channel: str = "c") -> list:
        traffic = Traffic().connect("A").send(0.0, b"SUB", "t", channel).ok(0.01).send(0.02, b"RDY", rdy)
        traffic.connect("P", 0.5).send(0.5, b"PUB", "t", body=b"x", conn="P").ok(0.51, conn="P")
        if delivered:
            traffic.message(0.52, ID1, body=b"x")
        return traffic.send(4.0, b"NOP").violations(4.0)
    # D-38 at least once, and D-41: nothing reached the consumer with room within its output buffer's timeout
    assert sorted(run(delivered=False)) == [("D-35", BROKER), ("D-38", BROKER), ("D-41", BROKER)]
    assert run(delivered=True) == []
    assert run(delivered=False, rdy=0) == [], "nothing had room for it"
    assert run(delivered=False, channel="c#ephemeral") == [], "an ephemeral channel may drop it (D-53)"


def test_mpub_bodies_are_each_a_publish():
    body = wire.mpub_body([b"one", b"two"])
    traffic = Traffic().connect("P").send(0.1, b"MPUB", "t", body=body, conn="P").ok(0.11, conn="P")
    traffic.connect("A", 0.2).send(0.2, b"SUB", "t", "c").ok(0.21).send(0.22, b"RDY", 5)
    traffic.message(2.3, ID1, body=b"two", published=2.0)
    assert traffic.violations(2.4) == []
    assert struct.unpack(">i", body[:4]) == (2,)


# ---- the catalogue -------------------------------------------------------------------------------------

def test_every_monitor_judges_catalogue_items():
    from conformance.spec import behaviours
    items = behaviours()
    cited = {item for monitor in monitors.MONITORS for item in monitor.ITEMS}
    assert cited and cited <= items.keys(), sorted(cited - items.keys())


@pytest.mark.parametrize("monitor", monitors.MONITORS, ids=lambda monitor: monitor.__name__)
def test_every_monitor_says_what_it_judges(monitor):
    assert monitor.ITEMS and monitor.__doc__


def test_a_violation_is_valid_utf8_whatever_bytes_the_broker_sent():
    traffic = Traffic().connect().send(0.0, b"PUB", "t", body=b"x")
    traffic.receive(0.01, wire.FRAME_RESPONSE, b"E_BAD \xff\xfe not utf-8")
    [violation] = traffic.judge.finish(T0 + 1.0)
    strings = [violation.connection, violation.expected, violation.observed, *violation.evidence]
    assert all(text.encode("utf-8") for text in strings), "a lone surrogate does not encode"
    assert "\ufffd" in violation.evidence[0]


# ---- answers as nsqd gives them --------------------------------------------------------------------------

def subscribed(timing: bool = True) -> Traffic:
    return Traffic(timing).connect().send(0.0, b"SUB", "t", "c").ok(0.01)


def test_a_command_refused_in_its_state_but_answered_ok_is_named_by_the_state_rule():
    assert subscribed().send(0.1, b"SUB", "t", "d").ok(0.11).violations(0.2) == [("P-SUB-01", BROKER)]
    assert subscribed().send(0.1, b"IDENTIFY", body=b"{}").ok(0.11).violations(0.2) == [("P-ID-01", BROKER)]
    closing = subscribed().send(0.1, b"CLS").receive(0.11, wire.FRAME_RESPONSE, b"CLOSE_WAIT")
    assert closing.send(0.2, b"CLS").receive(0.21, wire.FRAME_RESPONSE, b"CLOSE_WAIT").violations(0.3) == [
        ("P-CLS-01", BROKER)]
    refused = subscribed().send(0.1, b"SUB", "t", "d").error(0.11, b"E_INVALID cannot SUB in current state")
    assert refused.close(0.12, BROKER).violations(0.2) == []


def test_a_refusal_that_never_comes_is_named_when_a_later_answer_or_the_close_shows_it():
    ignored = Traffic().connect().send(0.0, b"RDY", 1).send(0.1, b"SUB", "t", "c").ok(0.11)
    assert ignored.violations(0.2) == [("P-RDY-02", BROKER)]
    left_open = Traffic().connect().send(0.0, b"RDY", 1).close(2.0, CLIENT)
    assert left_open.violations(2.0) == [("P-RDY-02", BROKER)]
    unflushed = Traffic().connect().send(0.0, b"nop").close(0.5, BROKER)
    assert unflushed.violations(0.5) == [("C-23", BROKER)]
    assert Traffic().connect().send(0.0, b"nop").close(0.05, BROKER).violations(0.1) == [], "a race with a shutdown"
    assert Traffic().connect().send(0.0, b"RDY", 1).close(0.5, CLIENT).violations(0.5) == [], "closed before it came"


def test_the_error_code_is_nsqds_for_what_was_asked():
    def answer(command: tuple, error: bytes) -> list:
        traffic = subscribed().send(0.1, *command[:-1], body=command[-1]).error(0.11, error)
        return traffic.close(0.12, BROKER).violations(0.2)
    assert answer((b"PUB", "a!b", b"x"), b'E_INVALID PUB topic name "a!b" is not valid') == [("P-PUB-02", BROKER)]
    assert answer((b"PUB", "a!b", b"x"), b'E_BAD_TOPIC PUB topic name "a!b" is not valid') == []
    assert answer((b"PUB", "t", b""), b"E_BAD_BODY PUB invalid message body size 0") == [("P-PUB-03", BROKER)]
    assert answer((b"PUB", "t", b""), b"E_BAD_MESSAGE PUB invalid message body size 0") == []
    assert answer((b"MPUB", "a!b", wire.mpub_body([b"x"])), b'E_BAD_TOPIC E_BAD_TOPIC MPUB topic name "a!b" is not '
                  b'valid') == [], "X-11: MPUB's code twice"
    failed = subscribed().send(0.1, b"FIN", ID1.decode())
    assert failed.error(0.11, b"E_INVALID FIN 0000000000000001 failed ID not in flight").violations(0.2) == [
        ("P-FIN-04", BROKER)]


def test_an_error_not_worded_as_nsqd_words_it_is_c08():
    reworded = Traffic().connect().send(0.0, b"ASDF").error(0.01, b"E_INVALID reworded: invalid command ASDF")
    assert reworded.close(0.02, BROKER).violations(0.1) == [("C-08", BROKER)]
    exact = Traffic().connect().send(0.0, b"ASDF").error(0.01, b"E_INVALID invalid command ASDF")
    assert exact.close(0.02, BROKER).violations(0.1) == []
    suite = Traffic()
    suite.judge = monitors.new_judge(timing=False, http_seen=False, wording=False)
    suite.connect().send(0.0, b"ASDF").error(0.01, b"E_INVALID reworded: invalid command ASDF")
    assert suite.close(0.02, BROKER).violations(0.1) == [], "the suite's cases judge the wording, as a SHOULD"
    tls = Traffic().connect().send(0.0, b"NOP").error(0.01, b"E_INVALID cannot NOP in current state (TLS required)")
    assert tls.close(0.02, BROKER).violations(0.1) == [], "a TLS-required policy the traffic does not show (P-G-01)"


def test_a_silence_after_the_capture_lost_the_connections_tail_is_not_judged():
    """A sniffer that dropped the rest of a connection (nothing more of it, not its end): no answer to IDENTIFY and
    no heartbeat are no evidence once past what the capture last showed of it; before that they are."""
    def run(seen_until: float | None) -> Traffic:
        traffic = Traffic().connect(seen_until=seen_until).identify(0.0, {"heartbeat_interval": 1000})
        return traffic.connect("B", 40.0).send(40.0, b"NOP", conn="B")
    assert run(None).violations(40.0) == [("P-ID-04", BROKER)]
    lost = run(0.5)
    assert lost.violations(40.0) == []
    assert ("P-ID-04", TAIL_LOST) in lost.judge.not_judged
    answered = Traffic().connect(seen_until=0.5).identify(0.0, {"heartbeat_interval": 1000}).ok(0.01)
    answered.connect("B", 40.0).send(40.0, b"NOP", conn="B")
    assert answered.violations(40.0) == [] and ("C-28", TAIL_LOST) in answered.judge.not_judged
    heard = Traffic().connect(seen_until=30.0).identify(0.0, {"heartbeat_interval": 1000}).ok(0.01)
    heard.send(29.9, b"PUB", "t", body=b"x").ok(30.0).connect("B", 40.0).send(40.0, b"NOP", conn="B")
    assert heard.violations(40.0) == [("C-28", BROKER)], "no heartbeat while the capture still showed the connection"


def test_an_error_that_overtakes_an_earlier_answer_is_c13():
    traffic = Traffic().connect().send(0.0, b"SUB", "t", "c").send(0.0, b"FIN", ID1.decode())
    traffic.send(0.0, b"PUB", "t", body=b"x").error(0.01, b"E_FIN_FAILED FIN 0000000000000001 failed ID not in flight")
    assert ("C-13", BROKER) in traffic.ok(0.02).ok(0.02).violations(0.1)
    in_order = Traffic().connect().send(0.0, b"SUB", "t", "c").send(0.0, b"FIN", ID1.decode())
    in_order.send(0.0, b"PUB", "t", body=b"x").ok(0.01)
    in_order.error(0.01, b"E_FIN_FAILED FIN 0000000000000001 failed ID not in flight")
    assert in_order.ok(0.02).violations(0.1) == [("P-FIN-04", CLIENT)], "a FIN of what it never got"


def test_an_identify_never_answered_is_id11_when_it_asked_for_a_level_nsqd_never_refuses():
    def run(level: int, close_by: str | None = None) -> list:
        traffic = Traffic().connect()
        traffic.identify(0.0, {"feature_negotiation": True, "deflate": True, "deflate_level": level})
        if close_by:
            traffic.close(0.3, close_by)
        return traffic.connect("B", 3.0).send(3.0, b"NOP", conn="B").violations(3.0)
    assert run(-5) == [("ID-11", BROKER)]
    assert run(-5, close_by=BROKER) == [("ID-11", BROKER)]
    assert run(3) == [("P-ID-04", BROKER)]
    answered = Traffic().connect().identify(0.0, {"deflate_level": -5}).ok(0.01)
    assert answered.connect("B", 3.0).send(3.0, b"NOP", conn="B").violations(3.0) == []
    assert Traffic(timing=False).connect().identify(0.0, {"deflate_level": -5}).violations(9.0) == [], \
        "a suite reads its answers when it wants them"


def test_a_close_right_after_a_non_fatal_error_is_c23_unless_a_shutdown_or_a_delete_explains_it():
    def run(then_alive: bool = True, deleted: bool = False) -> list:
        traffic = subscribed().connect("B", 0.0).send(0.1, b"FIN", ID1.decode())
        traffic.error(0.11, b"E_FIN_FAILED FIN 0000000000000001 failed ID not in flight")
        if deleted:
            traffic.judge.http(HttpAction(T0 + 0.2, "/channel/delete", "t", "c", 200))
        traffic.close(0.4, BROKER)
        if then_alive:
            traffic.heartbeat(0.5, conn="B")
        return [found for found in traffic.violations(1.0) if found[1] == BROKER]
    assert run() == [("C-23", BROKER)]
    assert run(then_alive=False) == [], "the broker may have shut down"
    assert run(deleted=True) == [], "D-62: a deleted channel's subscribers are closed"


# ---- IDENTIFY's numbers and upgrades --------------------------------------------------------------------

def negotiated(asked: dict, **answered) -> Traffic:
    answer = {name: 0 for name in monitors.connection.IDENTIFY_ANSWER_FIELDS} | {
        "max_rdy_count": 2500,
        "tls_v1": False, "snappy": False, "deflate": False, "deflate_level": 6, "max_deflate_level": 6,
        "output_buffer_size": 16_384} | answered
    return Traffic().connect().identify(0.0, {"feature_negotiation": True, **asked}).receive(
        0.01, wire.FRAME_RESPONSE, json.dumps(answer).encode())


def test_a_deflate_level_other_than_nsqd_picks_is_id11():
    assert negotiated({"deflate": True, "deflate_level": 1}, deflate=True).ok(0.02).violations(0.1) == [
        ("ID-11", BROKER)]
    assert negotiated({"deflate": True, "deflate_level": 1}, deflate=True, deflate_level=1).ok(0.02).violations(
        0.1) == []
    assert negotiated({"deflate": True, "deflate_level": 9}, deflate=True).ok(0.02).violations(0.1) == [], "capped"
    assert negotiated({"deflate": True, "deflate_level": -5}, deflate=True).ok(0.02).violations(0.1) == []
    assert negotiated({"deflate_level": 3}).violations(0.1) == [], "without deflate: 6"


def test_a_compression_agreed_without_its_ok_is_id30():
    silent = negotiated({"snappy": True}, snappy=True).connect("B", 2.0).send(2.0, b"NOP", conn="B")
    assert silent.violations(2.0) == [("ID-30", BROKER)]
    upgraded = negotiated({"snappy": True}, snappy=True).ok(0.02).connect("B", 2.0).send(2.0, b"NOP", conn="B")
    assert upgraded.violations(2.0) == []


# ---- the RDY window ---------------------------------------------------------------------------------------

def test_a_delivery_after_rdy_0_and_the_fin_that_freed_the_slot_is_d03_once_the_fin_proved_settled():
    """Unknown msg_timeout: the first message might have timed out, unless its later FIN succeeded."""
    def run(fin_failed: bool) -> list:
        traffic = Traffic().connect().send(0.0, b"SUB", "t", "c").ok(0.01).send(0.02, b"RDY", 1).message(0.03, ID1)
        traffic.send(0.04, b"RDY", 0).send(0.04, b"FIN", ID1.decode()).message(0.05, ID2)
        if fin_failed:
            traffic.error(0.06, b"E_FIN_FAILED FIN 0000000000000001 failed ID not in flight")
        return traffic.close(1.0, CLIENT).violations(1.0)
    assert run(fin_failed=False) == [("D-03", BROKER)]
    assert run(fin_failed=True) == [], "the first had timed out: the window had room before RDY 0 was taken"
    lowered_later = consumer(rdy=1).message(0.1, ID1).send(0.2, b"FIN", ID1.decode()).message(0.21, ID2)
    assert lowered_later.send(0.21, b"RDY", 0).violations(0.3) == [], "the RDY 0 came after it on the wire"


def test_a_delivery_after_cls_was_answered_is_p_cls_02():
    traffic = Traffic().connect().send(0.0, b"SUB", "t", "c").ok(0.01).send(0.02, b"CLS")
    traffic.receive(0.03, wire.FRAME_RESPONSE, b"CLOSE_WAIT").send(0.04, b"RDY", 5).message(0.3, ID1)
    assert traffic.violations(0.4) == [("P-CLS-02", BROKER)]


# ---- output buffering and sampling -----------------------------------------------------------------------

def test_a_message_filling_the_window_or_unbuffered_late_on_the_wire_is_d40_or_id04():
    def run(delivered_at: float, rdy: int = 1, asked: dict | None = None, second_consumer: bool = False) -> list:
        traffic = Traffic().connect()
        if asked is not None:
            traffic.identify(0.0, asked).ok(0.005)
        traffic.send(0.01, b"SUB", "t", "c").ok(0.02).send(0.03, b"RDY", rdy)
        if second_consumer:
            traffic.connect("B", 0.0).send(0.01, b"SUB", "t", "c", conn="B").ok(0.02, conn="B")
        traffic.connect("P", 0.0).send(0.1, b"PUB", "t", body=b"x", conn="P").ok(0.11, conn="P")
        return traffic.message(delivered_at, ID1, body=b"x").violations(delivered_at + 0.1)
    assert run(0.36) == [("D-40", BROKER)]
    assert run(0.15) == []
    assert run(0.36, rdy=5) == [], "a lone message below RDY waits for the buffer's ticker (D-41)"
    assert run(0.36, rdy=5, asked={"output_buffer_size": -1}) == [("ID-04", BROKER)]
    assert run(0.36, second_consumer=True) == [], "another consumer of the channel may have held it first"


def test_a_sampling_client_sent_a_long_run_of_consecutive_ids_is_d45():
    def run(ids: list[int], rate: int = 10) -> list:
        traffic = Traffic().connect().identify(0.0, {"sample_rate": rate}).ok(0.01).send(0.02, b"SUB", "t", "c")
        traffic.ok(0.03).send(0.04, b"RDY", 100)
        for index, number in enumerate(ids):
            traffic.message(0.1 + index / 1000, b"%016x" % number)
        return traffic.close(1.0, CLIENT).violations(1.0)
    assert run(list(range(100, 130))) == [("D-45", BROKER)]
    assert run(list(range(100, 400, 9))) == [], "about one in nine kept"
    assert run(list(range(100, 130)), rate=0) == [], "no sampling"


def test_a_monitor_that_raises_stops_alone_and_says_so():
    """A monitor's own bug on traffic it did not foresee: it is let go and its items are not judged, while the
    others go on judging (here C-12, a redelivery's attempts not grown)."""

    class Raising(monitors.Monitor):
        ITEMS = ("D-02",)

        def observe(self, judge, connection, event, answered):
            if event.kind == "message":
                raise ValueError("unforeseen")

    traffic = consumer(rdy=2, also=(Raising(),))
    traffic.message(0.1, ID1).send(0.2, b"REQ", ID1.decode(), 0).message(0.3, ID1, attempts=1)
    assert traffic.violations(1.0) == [("C-12", "broker")]
    assert traffic.judge.failures == ["Raising: ValueError('unforeseen')"]
    assert traffic.judge.not_judged["D-02", "its monitor failed (Raising: ValueError('unforeseen'))"] == 1


def test_the_judge_lets_go_of_settled_messages_past_its_bound_and_still_judges_those_in_flight(monkeypatch):
    """Memory stays bounded however long the traffic: past MESSAGES_KEPT the judge and its monitors let go of the
    messages no longer in flight; what needs them is not judged, what is in flight still is."""
    monkeypatch.setattr(monitors.judge, "MESSAGES_KEPT", 10)
    traffic = consumer(rdy=2)
    at = 0.1
    for number in range(40):
        msg_id = b"%016x" % number
        traffic.message(at, msg_id).send(at + 0.001, b"FIN", msg_id.decode())
        at += 0.01
    traffic.message(at, ID3).send(at + 0.01, b"REQ", ID3.decode(), 0).message(at + 0.02, ID3, attempts=1)
    traffic.error(at + 0.03, b"E_FIN_FAILED FIN %s failed ID not in flight" % (b"%016x" % 0))  # an early one
    judge = traffic.judge
    assert judge.let_go_at is not None and len(judge.messages) <= 10
    # in flight: still judged; the refusal of the owner's FIN 0.43 s after it is D-10's
    assert traffic.violations(at + 1) == [("C-12", "broker"), ("D-10", "broker")]
    assert judge.not_judged["P-FIN-04", monitors.events.LET_GO] == 1  # its delivery let go of: not guessed


def test_a_delivery_pickled_as_its_fields_comes_back_equal():
    """`watch` carries the ledger's deliveries from batch to batch pickled (Delivery.__reduce__): every field kept."""
    import pickle

    from nsq_protocol.monitors.judge import Delivery

    delivery = Delivery("A", 1.5, 2, 61.5, 62.0, "REQ", 3.25, 100, True, True, "B")
    assert pickle.loads(pickle.dumps(delivery, protocol=pickle.HIGHEST_PROTOCOL)) == delivery
    assert pickle.loads(pickle.dumps(Delivery("A", 1.5, None, None, None))) == Delivery("A", 1.5, None, None, None)
