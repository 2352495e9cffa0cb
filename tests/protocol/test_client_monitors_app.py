"""The client monitors that judge a library against what its application asked of it (monitors.Application): each
rule kept by a good client, broken by the client bug it names, and "not judged" where the judge was not told."""

from __future__ import annotations

import json

from nsq_protocol import monitors
from nsq_protocol.monitors import Application
from nsq_protocol.monitors.application import Order, Publish
from nsq_protocol.monitors.events import body_hash
from tests.protocol.test_client_monitors import NAMES, Client, failed
from tests.protocol.test_monitors import T0

ID1 = b"0000000000000001"
APP = Application(topic="t", channel="c", heartbeat_interval_ms=1000, layers=frozenset(), max_in_flight=3)


def told(application: Application | None) -> Client:
    traffic = Client()
    traffic.judge = monitors.new_judge(timing=True, http_seen=False, client_library=True, application=application)
    return traffic


def consumer(application: Application | None = APP, fields: dict | None = None, sub=("t", "c"),
             rdy: int = 1) -> Client:
    traffic = told(application).connect()
    traffic.identify(0.0, {**NAMES, "heartbeat_interval": 1000, **(fields or {})}).answer(0.001)
    return traffic.send(0.01, b"SUB", *sub).ok(0.011).send(0.02, b"RDY", rdy)


def not_judged(traffic: Client, item: str) -> bool:
    return any(key[0] == item for key in traffic.judge.not_judged)


# ---- IDENTIFY, SUB, the first RDY ------------------------------------------------------------------------

def test_identify_heartbeat_interval_as_configured_is_conn_004():
    assert consumer().client_items(1.0) == []
    assert consumer(fields={"heartbeat_interval": 30_000}).client_items(1.0) == ["NSQC-CONN-004"]
    unknown = consumer(application=None, fields={"heartbeat_interval": 30_000})
    assert unknown.client_items(1.0) == [] and not_judged(unknown, "NSQC-CONN-004")


def test_a_layer_asked_unless_told_is_neg_001_and_one_told_but_not_asked_neg_003_to_005():
    assert consumer(fields={"deflate": True}).client_items(1.0) == ["NSQC-NEG-001"]
    snappy = Application(layers=frozenset({"snappy"}))
    assert consumer(snappy, fields={"snappy": True}).client_items(1.0) == []
    assert consumer(snappy).client_items(1.0) == ["NSQC-NEG-003"]
    assert consumer(Application(layers=frozenset({"deflate"}))).client_items(1.0) == ["NSQC-NEG-004"]
    assert consumer(Application(layers=frozenset({"tls_v1"}))).client_items(1.0) == ["NSQC-NEG-005"]
    unknown = consumer(Application(), fields={"deflate": True})
    assert unknown.client_items(1.0) == [] and not_judged(unknown, "NSQC-NEG-001")


def test_sub_of_another_channel_is_conn_005():
    assert consumer(sub=("t", "elsewhere")).client_items(1.0) == ["NSQC-CONN-005"]
    unknown = consumer(Application(), sub=("t", "elsewhere"))
    assert unknown.client_items(1.0) == [] and not_judged(unknown, "NSQC-CONN-005")


def test_first_rdy_above_max_in_flight_is_rdy_001():
    assert consumer(rdy=3).client_items(1.0) == []
    assert consumer(rdy=13).client_items(1.0) == ["NSQC-RDY-001"]
    assert consumer(rdy=3).send(0.5, b"RDY", 13).client_items(1.0) == [], "only the first RDY after SUB"
    unknown = consumer(Application(), rdy=13)
    assert unknown.client_items(1.0) == [] and not_judged(unknown, "NSQC-RDY-001")


# ---- the handler's orders ---------------------------------------------------------------------------------

def handled(order: Order, *answers: tuple, attempts: int = 1, **settings) -> Client:
    """A message whose handler's order the judge was told, then the client's ``answers`` to it."""
    body = json.dumps(order._asdict()).encode()
    traffic = consumer(Application(orders={body_hash(body): order}, **settings))
    traffic.message(0.1, ID1, attempts=attempts, body=body)
    for at, answer in enumerate(answers):
        traffic.send(0.2 + at / 10, *answer)
    return traffic


def test_requeue_as_the_handler_asked_is_msg_002():
    req = Order("req", delay_ms=1500)
    assert handled(req, (b"REQ", ID1, 1500)).client_items(1.0) == []
    assert handled(req, (b"REQ", ID1, 1501)).client_items(1.0) == ["NSQC-MSG-002"]
    assert handled(req, (b"FIN", ID1)).client_items(1.0) == ["NSQC-MSG-002"]
    unknown = consumer(Application()).message(0.1, ID1, body=json.dumps(req._asdict()).encode())
    assert unknown.send(0.2, b"FIN", ID1).client_items(1.0) == []


def test_touches_as_the_handler_asked_is_msg_003():
    touch = Order("touch", touches=2)
    assert handled(touch, (b"TOUCH", ID1), (b"TOUCH", ID1), (b"FIN", ID1)).client_items(1.0) == []
    assert handled(touch, (b"FIN", ID1)).client_items(1.0) == ["NSQC-MSG-003"]


def test_failed_handler_requeues_with_the_documented_delay_is_msg_004_and_msg_006():
    fail = Order("fail")
    documented = {"requeue_delay_ms": lambda attempts: 90_000 * attempts}
    assert handled(fail, (b"REQ", ID1, 90_000), **documented).client_items(1.0) == []
    assert handled(fail, (b"FIN", ID1), **documented).client_items(1.0) == ["NSQC-MSG-004"]
    assert handled(fail, (b"REQ", ID1, 90), **documented).client_items(1.0) == ["NSQC-MSG-006"]
    assert handled(fail, (b"REQ", ID1, 180_000), attempts=2, max_attempts=5, **documented).client_items(1.0) == []
    unknown = handled(fail, (b"REQ", ID1, 90), attempts=2, **documented)
    assert unknown.client_items(1.0) == [] and not_judged(unknown, "NSQC-MSG-006")
    undocumented = handled(fail, (b"REQ", ID1, 90))
    assert undocumented.client_items(1.0) == [] and not_judged(undocumented, "NSQC-MSG-006")


def test_a_message_over_max_attempts_finished_is_msg_005():
    req = Order("req", delay_ms=0)
    assert handled(req, (b"FIN", ID1), attempts=4, max_attempts=3).client_items(1.0) == []
    assert handled(req, (b"REQ", ID1, 0), attempts=4, max_attempts=3).client_items(1.0) == ["NSQC-MSG-005"]
    unknown = handled(req, (b"REQ", ID1, 0), attempts=4)
    assert unknown.client_items(1.0) == [] and not_judged(unknown, "NSQC-MSG-002")


# ---- publishes ---------------------------------------------------------------------------------------------

def publisher(application: Application | None) -> Client:
    traffic = told(application).connect()
    return traffic.identify(0.0, {**NAMES, "heartbeat_interval": 1000}).answer(0.001)


PUBLISHES = Application(topic="t", publishes=frozenset({
    Publish("PUB", "t", (body_hash(b"one"),)), Publish("MPUB", "t", (body_hash(b"a"), body_hash(b"b"))),
    Publish("DPUB", "t", (body_hash(b"later"),), 1500)}))


def mpub(*bodies: bytes) -> bytes:
    return len(bodies).to_bytes(4, "big") + b"".join(len(body).to_bytes(4, "big") + body for body in bodies)


def test_publishes_as_the_application_asked_are_pub_001_to_003():
    good = publisher(PUBLISHES).send(0.1, b"PUB", "t", body=b"one").send(0.2, b"MPUB", "t", body=mpub(b"a", b"b"))
    assert good.send(0.3, b"DPUB", "t", 1500, body=b"later").client_items(1.0) == []
    assert publisher(PUBLISHES).send(0.1, b"PUB", "t", body=b"on").client_items(1.0) == ["NSQC-PUB-001"]
    assert publisher(PUBLISHES).send(0.1, b"MPUB", "t", body=mpub(b"a")).client_items(1.0) == ["NSQC-PUB-002"]
    assert publisher(PUBLISHES).send(0.1, b"DPUB", "t", 0, body=b"later").client_items(1.0) == ["NSQC-PUB-003"]
    unknown = publisher(Application()).send(0.1, b"PUB", "t", body=b"on")
    assert unknown.client_items(1.0) == [] and not_judged(unknown, "NSQC-PUB-001")


# ---- backoff ------------------------------------------------------------------------------------------------

def test_no_rdy_0_beside_the_req_of_a_failed_message_is_rdy_003():
    fail = Order("fail")
    assert handled(fail, (b"REQ", ID1, 0), (b"RDY", 0)).client_items(5.0) == []
    assert handled(fail, (b"RDY", 0), (b"REQ", ID1, 0)).client_items(5.0) == [], "RDY 0 first, then the REQ"
    assert handled(fail, (b"REQ", ID1, 0)).client_items(5.0) == ["NSQC-RDY-003"]
    ended = handled(fail, (b"REQ", ID1, 0))
    assert ended.client_items(1.0) == [] and not_judged(ended, "NSQC-RDY-003"), "the traffic ends within 2 s"
    assert handled(Order("req", delay_ms=0), (b"REQ", ID1, 0)).client_items(5.0) == [], "a requeue asked for"


# ---- RDY over several nsqds ---------------------------------------------------------------------------------

def spread(max_in_flight: int, *first_rdys: int) -> Client:
    """A consumer on as many nsqds as ``first_rdys``, subscribed on each at 0.01 s with that first RDY."""
    traffic = told(Application(topic="t", channel="c", max_in_flight=max_in_flight))
    for name, rdy in zip("ABC", first_rdys, strict=False):
        traffic.connect(name).identify(0.0, {**NAMES, "heartbeat_interval": 1000}, conn=name).answer(0.001, name)
        traffic.send(0.01, b"SUB", "t", "c", conn=name).ok(0.011, name).send(0.02, b"RDY", rdy, conn=name)
    return traffic


def test_rdy_counts_above_max_in_flight_are_rdy_002_or_rdy_004_by_the_connections():
    assert spread(4, 2, 2).client_items(5.0) == []
    assert spread(4, 3, 3).client_items(5.0) == ["NSQC-RDY-002"]
    assert spread(2, 1, 1, 0).client_items(5.0) == []
    assert spread(2, 2, 2, 2).client_items(5.0) == ["NSQC-RDY-004"], "once while over"
    moved = spread(4, 4, 0).send(0.5, b"RDY", 0, conn="A").send(0.55, b"RDY", 4, conn="B")
    assert moved.client_items(5.0) == [], "RDY moved from A to B within 0.1 s"
    unknown = told(Application()).connect().identify(0.0, NAMES).answer(0.001).send(0.01, b"SUB", "t", "c")
    assert unknown.send(0.02, b"RDY", 99).client_items(5.0) == [] and not_judged(unknown, "NSQC-RDY-002")


def test_a_connection_left_at_rdy_0_is_rdy_002_with_room_and_rdy_004_without():
    assert spread(4, 2, 0).client_items(9.0) == ["NSQC-RDY-002"]
    assert spread(4, 2, 0).send(5.0, b"RDY", 2, conn="B").client_items(9.0) == []
    assert spread(4, 0, 0).client_items(9.0) == [], "every connection at RDY 0: a backoff"
    assert spread(2, 1, 1, 0).client_items(41.0) == ["NSQC-RDY-004"]
    turned = spread(2, 1, 1, 0).send(20.0, b"RDY", 0, conn="A").send(20.05, b"RDY", 1, conn="C")
    assert turned.send(55.0, b"RDY", 0, conn="B").send(55.05, b"RDY", 1, conn="A").client_items(59.0) == []


# ---- the backoff's cap, the reconnect delay ------------------------------------------------------------------

def test_a_backoff_past_the_longest_configured_is_rdy_008():
    def run(application: Application, lasts: float) -> list[str]:
        return failed(consumer(application), 1.0, ID1.decode(), lasts).client_items(30.0)
    capped = Application(topic="t", channel="c", max_backoff_ms=3000)
    assert run(capped, 4.0) == [], "within the tolerance"
    assert run(capped, 5.0) == ["NSQC-RDY-008"]
    assert run(Application(topic="t", channel="c"), 5.0) == [], "no longest told: the library's own"


def test_backoffs_that_stop_growing_under_the_longest_configured_are_not_rdy_007():
    traffic, at = consumer(Application(topic="t", channel="c", max_backoff_ms=3000)), 1.0
    for number in range(4):
        failed(traffic, at, f"{number:016x}", 2.0)
        at += 2.5
    assert traffic.client_items(at + 1.0) == [] and not_judged(traffic, "NSQC-RDY-007")


def reconnected(application: Application | None, closed_at: float | None, again_at: float) -> Client:
    """A connection to one nsqd from 0 s, closed by the broker at ``closed_at`` (None: left open), and a second
    one to the same nsqd at ``again_at``."""
    traffic = told(application)
    traffic.judge.open("A", T0, True, server="127.0.0.1:4150")
    if closed_at is not None:
        traffic.close(closed_at, monitors.BROKER)
    traffic.judge.open("B", T0 + again_at, True, server="127.0.0.1:4150")
    return traffic


def test_a_reconnect_sooner_than_the_documented_delay_is_err_006():
    after_close = Application(reconnect_min_ms=500)
    assert reconnected(after_close, 1.0, 1.6).client_items(5.0) == []
    assert reconnected(after_close, 1.0, 1.1).client_items(5.0) == ["NSQC-ERR-006"]
    assert reconnected(after_close, None, 0.1).client_items(5.0) == [], "two at once: not a reconnect"
    on_a_ticker = Application(reconnect_min_ms=60_000, reconnect_since="connect")
    assert reconnected(on_a_ticker, 1.0, 30.0).client_items(65.0) == ["NSQC-ERR-006"]
    assert reconnected(on_a_ticker, 1.0, 60.0).client_items(65.0) == []
    assert reconnected(Application(), 1.0, 1.1).client_items(5.0) == [], "no delay told"
    untimed = reconnected(after_close, 1.0, 1.1)
    untimed.judge.timing = False
    assert untimed.client_items(5.0) == [] and not_judged(untimed, "NSQC-ERR-006")
