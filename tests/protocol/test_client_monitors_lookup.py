"""The client monitors of a consumer on nsqlookupd (client_lookup.py, NSQC-LOOKUP): each rule kept by a good client,
broken by the client bug it names, and "not judged" where the traffic or the judge lacks what it needs."""

from __future__ import annotations

import json

from nsq_protocol import monitors, wire
from nsq_protocol.http import HttpExchange, Request, Response
from nsq_protocol.monitors import Application
from nsq_protocol.monitors.events import CLIENT
from nsq_protocol.monitors.judge import Judge
from tests.protocol.test_client_monitors import NAMES, Client
from tests.protocol.test_monitors import T0

APP = Application(topic="t", channel="c", heartbeat_interval_ms=-1, layers=frozenset(), max_in_flight=2,
                  lookupds=1, lookupd_poll_interval_ms=1000)
TWO = Application(topic="t", channel="c", lookupds=2, lookupd_poll_interval_ms=1000)
P1, P2 = "127.0.0.1:4150", "127.0.0.1:4250"


class Consumer(Client):
    def __init__(self, application: Application | None = APP, timing: bool = True):
        super().__init__(timing)
        self.judge = monitors.new_judge(timing=timing, http_seen=False, client_library=True, application=application)

    def query(self, at: float, *producers: str, lookupd: str = "L1", target: str = "/lookup?topic=t",
              method: str = "GET") -> Consumer:
        body = json.dumps({"channels": [], "producers": [
            {"broadcast_address": address.split(":")[0], "tcp_port": int(address.split(":")[1])}
            for address in producers]}).encode()
        exchange = HttpExchange(T0 + at, Request(method, target, b""), Response(200, body), T0 + at + 0.002)
        self.judge.lookupd_query(lookupd, T0 + at + 0.002, exchange)
        return self

    def down(self, at: float, lookupd: str = "L1") -> Consumer:
        self.judge.lookupd_query(lookupd, T0 + at, None)
        return self

    def polls(self, start: float, end: float, *producers: str, every: float = 1.0, lookupd: str = "L1") -> Consumer:
        at = start
        while at < end:
            self.query(at, *producers, lookupd=lookupd)
            at += every
        return self

    def joins(self, conn: str, at: float, server: str | None) -> Consumer:
        """A connection to ``server`` that identifies (no heartbeats) and subscribes."""
        self.judge.open(conn, T0 + at, True, server=server)
        self.identify(at + 0.001, {**NAMES, "heartbeat_interval": -1}, conn=conn).answer(at + 0.002, conn=conn)
        self.send(at + 0.003, b"SUB", "t", "c", conn=conn).ok(at + 0.004, conn=conn)
        return self.send(at + 0.005, b"RDY", 1, conn=conn)

    def items(self, end: float) -> list[str]:
        return sorted(violation.item for violation in self.judge.finish(T0 + end) if violation.side == CLIENT)


def not_judged(judge: Judge, item: str) -> bool:
    return any(key[0] == item for key in judge.not_judged)


# ---- the query and its polling --------------------------------------------------------------------------------

def test_a_good_consumer_breaks_nothing():
    assert Consumer().query(0.0, P1).joins("A", 0.1, P1).polls(1.0, 9.5, P1).items(10.0) == []


def test_a_query_for_another_topic_or_not_get_is_lookup_001():
    assert Consumer().query(0.0, target="/lookup?topic=elsewhere").items(0.5) == ["NSQC-LOOKUP-001"]
    assert Consumer().query(0.0, method="POST").items(0.5) == ["NSQC-LOOKUP-001"]
    assert Consumer().query(0.0, target="/ping").items(0.5) == [], "/ping is no query for producers"
    unknown = Consumer(Application()).query(0.0, target="/lookup?topic=elsewhere")
    assert unknown.items(0.5) == [] and not_judged(unknown.judge, "NSQC-LOOKUP-001")


def test_polls_too_fast_or_stopping_are_lookup_002():
    hammered = Consumer().query(0.0, P1).joins("A", 0.1, P1).polls(1.0, 2.5, P1).query(2.2, P1).polls(3.0, 5.0, P1)
    assert hammered.items(5.5) == ["NSQC-LOOKUP-002"]
    stopped = Consumer().query(0.0, P1).joins("A", 0.1, P1).query(1.0, P1)
    assert stopped.items(6.0) == ["NSQC-LOOKUP-002"], "no query in the 5 s after the second"
    jittered = Consumer().query(0.0, P1).joins("A", 0.1, P1).polls(1.3, 9.0, P1, every=1.3)
    assert jittered.items(9.5) == []
    late = Consumer().query(0.0, P1).joins("A", 0.1, P1).query(1.0, P1).polls(4.9, 9.0, P1)
    assert late.items(9.5) == [], "one poll 3.9 intervals late (a stalled process on a loaded machine) is no finding"
    missed = Consumer().query(0.0, P1).joins("A", 0.1, P1).query(1.0, P1).polls(5.1, 9.0, P1)
    assert missed.items(9.5) == ["NSQC-LOOKUP-002"], "a silence of 4.1 intervals is a poll missed"
    rechecked = Consumer().query(0.0, P1, P2).joins("A", 0.1, P1).joins("B", 0.1, P2).query(1.0, P1, P2)
    rechecked.close(1.05, monitors.BROKER, conn="B").query(1.1, P1).polls(2.1, 5.0, P1)
    assert rechecked.items(5.5) == [], "go-nsq queries again at once when an nsqd connection closes"
    retried = Consumer().down(0.0).down(0.001).down(0.005).query(1.0, P1).joins("A", 1.1, P1).polls(2.0, 5.0, P1)
    assert retried.items(5.5) == [], "an HTTP client's retries of a query reset are no polls"


def test_a_client_that_stopped_or_a_poll_interval_not_told_is_not_judged():
    stopped = Consumer().query(0.0, P1).joins("A", 0.1, P1).query(1.0, P1).send(2.5, b"CLS")
    stopped.receive(2.51, wire.FRAME_RESPONSE, b"CLOSE_WAIT").close(2.6, monitors.CLIENT)
    assert stopped.items(8.0) == [] and not_judged(stopped.judge, "NSQC-LOOKUP-002")
    unknown = Consumer(Application(topic="t")).query(0.0, P1).joins("A", 0.1, P1).polls(0.2, 5.0, P1, every=0.1)
    assert unknown.items(5.5) == [] and not_judged(unknown.judge, "NSQC-LOOKUP-002")
    read_times = Consumer(timing=False).query(0.0, P1).joins("A", 0.1, P1).polls(0.2, 5.0, P1, every=0.1)
    assert read_times.items(5.5) == [] and not_judged(read_times.judge, "NSQC-LOOKUP-002")


def test_polling_that_stops_after_a_lookupd_was_down_is_lookup_006():
    kept = Consumer().down(0.0).down(1.0).query(2.0, P1).joins("A", 2.1, P1).polls(3.0, 9.5, P1)
    assert kept.items(10.0) == []
    assert Consumer().down(0.0).down(1.0).items(8.0) == ["NSQC-LOOKUP-006"]


def test_a_lookupd_given_never_asked_is_lookup_005():
    both = Consumer(TWO).down(0.0, "L1").query(1.0, P1, lookupd="L2").joins("A", 1.1, P1)
    for at in range(2, 10):
        both.down(float(at), "L1") if at % 2 == 0 else both.query(float(at), P1, lookupd="L2")
    assert both.items(10.0) == []
    first_only = Consumer(TWO)
    for at in range(8):
        first_only.down(float(at), "L1")
    assert first_only.items(8.5) == ["NSQC-LOOKUP-005"]
    short = Consumer(TWO).down(0.0, "L1")
    assert short.items(1.0) == [] and not_judged(short.judge, "NSQC-LOOKUP-005")


# ---- joining what /lookup lists --------------------------------------------------------------------------------

def test_a_listed_producer_never_joined_is_lookup_001_and_a_new_one_lookup_003():
    assert Consumer().query(0.0, P1, P2).joins("A", 0.1, P1).polls(1.0, 11.5, P1, P2).items(12.0) == \
        ["NSQC-LOOKUP-001"]
    late = Consumer().query(0.0, P1).joins("A", 0.1, P1).polls(1.0, 3.0, P1).polls(3.0, 11.5, P1, P2)
    assert late.items(12.0) == ["NSQC-LOOKUP-003"]
    joined = Consumer().query(0.0, P1).joins("A", 0.1, P1).polls(1.0, 3.0, P1).polls(3.0, 4.0, P1, P2)
    assert joined.joins("B", 4.0, P2).polls(4.1, 11.5, P1, P2).items(12.0) == []


def test_a_producer_listed_once_a_lookupd_is_back_is_lookup_006_or_005_beside_one_down():
    back = Consumer().down(0.0).down(1.0).polls(2.0, 9.5, P1)
    assert back.items(10.0) == ["NSQC-LOOKUP-006"]
    beside = Consumer(TWO)
    for at in range(10):
        beside.down(float(at), "L2") if at % 2 == 0 else beside.query(float(at), P1, lookupd="L1") \
            if at > 2 else beside.down(float(at), "L1")
    assert beside.items(10.0) == ["NSQC-LOOKUP-005"]


def test_joins_not_judged_without_addresses_clock_or_time():
    unknown = Consumer().query(0.0, P1).joins("A", 0.1, None).polls(1.0, 11.5, P1)
    assert unknown.items(12.0) == [] and not_judged(unknown.judge, "NSQC-LOOKUP-001")
    ends = Consumer().polls(0.0, 2.5, P1)
    assert ends.items(3.0) == [] and not_judged(ends.judge, "NSQC-LOOKUP-001")
    dropped = Consumer().query(0.0, P1, P2).joins("A", 0.1, P1).query(1.0, P1, P2).polls(2.0, 11.5, P1)
    assert dropped.items(12.0) == [], "a producer no longer listed is not awaited"


# ---- leaving what /lookup drops --------------------------------------------------------------------------------

def test_a_reconnect_to_a_producer_left_out_is_lookup_004():
    def left(reconnect_at: float | None) -> Consumer:
        traffic = Consumer().query(0.0, P1, P2).joins("A", 0.1, P1).joins("B", 0.2, P2).query(1.0, P1, P2)
        traffic.query(2.0, P1).close(2.5, monitors.BROKER, conn="B").polls(3.0, 7.5, P1)
        return traffic if reconnect_at is None else traffic.joins("C", reconnect_at, P2)

    assert left(None).items(8.0) == []
    assert left(7.6).items(8.0) == ["NSQC-LOOKUP-004"]
    again = Consumer().query(0.0, P1, P2).joins("A", 0.1, P1).joins("B", 0.2, P2).query(1.0, P1, P2)
    again.query(2.0, P1).close(2.5, monitors.BROKER, conn="B").query(3.0, P1, P2).joins("C", 3.1, P2)
    assert again.polls(4.0, 7.5, P1, P2).items(8.0) == [], "listed again: joined again"
    closed_while_listed = Consumer().query(0.0, P1, P2).joins("A", 0.1, P1).joins("B", 0.2, P2)
    closed_while_listed.close(0.5, monitors.BROKER, conn="B").query(1.0, P1, P2).joins("C", 1.1, P2)
    assert closed_while_listed.polls(2.0, 7.5, P1, P2).items(8.0) == []
