"""nsqd's answer to client bytes it cannot read (monitors/unreadable.py): the real nsqd's answers pass, a broker that
answers otherwise or keeps the connection is named, and a close the traffic lacks is "not judged"."""

from __future__ import annotations

import json

from nsq_protocol import monitors, wire
from nsq_protocol.monitors.events import MAGIC, STREAM, UNREADABLE, Observed
from nsq_protocol.monitors.unreadable import UnreadableBytesEnd
from tests.protocol.test_monitors import T0, Traffic

OVERLONG = "command line longer than 16384 bytes"
DEFLATE_ANSWER = {"deflate": True, "deflate_level": 6, "snappy": False, "tls_v1": False, "max_rdy_count": 2500,
                  "msg_timeout": 60000, "max_msg_timeout": 900000, "version": "1.3.0", "sample_rate": 0,
                  "auth_required": False, "output_buffer_size": 16384, "output_buffer_timeout": 250,
                  "max_deflate_level": 6}


def unreadable(traffic: Traffic, at: float, where: str, text: str) -> Traffic:
    traffic.judge.observe("A", Observed(T0 + at, UNREADABLE, where, text))
    return traffic


def named(traffic: Traffic, timing_end: float = 10.0) -> set[tuple[str, str]]:
    """What every monitor named: the broker bugs written here break other rules too (an answer to no command, C-13;
    a fatal error left open, C-23), which those monitors name; this one's own names are ``named_here``'s."""
    traffic.judge.finish(T0 + timing_end)
    return {(v.item, v.side) for v in traffic.judge.violations}


def named_here(traffic: Traffic) -> set[tuple[str, str]]:
    named(traffic)
    [monitor] = [monitor for monitor in traffic.judge.monitors if isinstance(monitor, UnreadableBytesEnd)]
    return {(v.item, v.side) for v in monitor.violations}


def not_judged(traffic: Traffic, item: str) -> bool:
    return any(key[0] == item for key in traffic.judge.not_judged)


# ---- C-02, C-05: a bad magic gets E_BAD_PROTOCOL, then the close ------------------------------------------------
def test_a_bad_magic_answered_as_nsqd_is_kept():
    traffic = unreadable(Traffic().connect(), 0.0, MAGIC, "b'  V1'").error(0.001, b"E_BAD_PROTOCOL")
    assert named(traffic.close(0.002, monitors.BROKER)) == set()


def test_a_bad_magic_answered_otherwise_is_c02():
    traffic = unreadable(Traffic().connect(), 0.0, MAGIC, "b'HTTP'").ok(0.001)
    assert named_here(traffic.close(0.002, monitors.BROKER)) == {("C-02", "broker")}


def test_a_near_miss_of_the_magic_closed_without_its_error_is_c05():
    traffic = unreadable(Traffic().connect(), 0.0, MAGIC, "b'V2  '").close(0.002, monitors.BROKER)
    assert named_here(traffic) == {("C-05", "broker")}


def test_a_bad_magic_left_open_is_named_once_the_client_gives_up():
    traffic = unreadable(Traffic().connect(), 0.0, MAGIC, "b'  V1'").error(0.001, b"E_BAD_PROTOCOL")
    assert named_here(traffic.close(5.0, monitors.CLIENT)) == {("C-02", "broker")}


def test_a_bad_magic_whose_close_the_traffic_lacks_is_not_judged():
    traffic = unreadable(Traffic().connect(), 0.0, MAGIC, "b'  V1'").error(0.001, b"E_BAD_PROTOCOL")
    assert named(traffic.close(0.5, None)) == set()
    assert not_judged(traffic, "C-02")


def test_the_v2_magic_refused_is_c01():
    assert named_here(Traffic().connect().error(0.001, b"E_BAD_PROTOCOL").close(0.002, monitors.BROKER)) == \
        {("C-01", "broker")}


# ---- C-19: a line over the 16 KiB buffer ends the connection, no frame ------------------------------------------
def test_an_overlong_line_closed_silently_is_kept_and_earlier_answers_still_come():
    traffic = Traffic().connect().send(0.0, b"SUB", b"t", b"c")
    traffic = unreadable(traffic, 0.001, STREAM, OVERLONG).ok(0.002)  # SUB's OK
    assert named(traffic.close(0.003, monitors.BROKER)) == set()


def test_an_error_frame_after_an_overlong_line_is_c19():
    traffic = unreadable(Traffic().connect(), 0.001, STREAM, OVERLONG).error(0.002, b"E_INVALID line too long")
    assert named_here(traffic.close(0.003, monitors.BROKER)) == {("C-19", "broker")}


def test_heartbeats_long_after_an_overlong_line_are_c19():
    traffic = unreadable(Traffic().connect(), 0.001, STREAM, OVERLONG).heartbeat(3.0)
    assert named_here(traffic) == {("C-19", "broker")}


def test_an_overlong_line_without_times_judges_the_frames_only():
    traffic = unreadable(Traffic(timing=False).connect(), 0.001, STREAM, OVERLONG).heartbeat(3.0)
    assert named(traffic.close(5.0, monitors.CLIENT)) == set()
    assert not_judged(traffic, "C-19")


def test_a_bad_body_size_is_left_to_the_publishing_rules():
    traffic = unreadable(Traffic().connect(), 0.001, STREAM, "PUB body size -1 out of range")
    assert named(traffic.error(0.002, b"E_BAD_MESSAGE PUB invalid message body size -1")
                 .close(0.003, monitors.BROKER)) == set()


# ---- ID-33, ID-34: what the layer cannot read ends the connection -----------------------------------------------
def deflated() -> Traffic:
    traffic = Traffic().connect().identify(0.0, {"feature_negotiation": True, "deflate": True})
    return traffic.receive(0.001, wire.FRAME_RESPONSE, json.dumps(DEFLATE_ANSWER).encode()).ok(0.002)


def test_a_client_stream_that_does_not_inflate_ends_the_connection():
    traffic = unreadable(deflated(), 0.01, "deflate", "deflate: invalid block type")
    assert named(traffic.close(0.02, monitors.BROKER)) == set()


def test_a_broker_answering_through_a_stream_that_does_not_inflate_is_id33():
    traffic = unreadable(deflated(), 0.01, "deflate", "deflate: incorrect header check").ok(0.02)
    assert named_here(traffic.close(0.03, monitors.BROKER)) == {("ID-33", "broker")}


def test_a_snappy_stream_that_does_not_decode_left_open_is_id34():
    traffic = unreadable(deflated(), 0.01, "snappy", "snappy: bad stream identifier")
    assert named_here(traffic.close(4.0, monitors.CLIENT)) == {("ID-34", "broker")}
