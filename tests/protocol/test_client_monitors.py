"""The client-side monitors (CLIENT_MONITORS) on hand-made traffic: each rule fires on the client bug it names and
stays silent on a good client's traffic (the helpers build what a good client and nsqd exchange)."""

from __future__ import annotations

import json

import pytest

from nsq_protocol import monitors, wire
from nsq_protocol.monitors import CLIENT
from nsq_protocol.monitors.connection import IDENTIFY_ANSWER_FIELDS
from nsq_protocol.monitors.events import MAGIC, STREAM, UNREADABLE, Observed
from tests.protocol.test_monitors import T0, Traffic

ID1, ID2 = "0000000000000001", "0000000000000002"
NAMES = {"client_id": "c", "hostname": "h", "user_agent": "test/1.0", "feature_negotiation": True}


class Client(Traffic):
    """A client library's traffic: judged by the client-side monitors too."""

    def __init__(self, timing: bool = True):
        self.judge = monitors.new_judge(timing=timing, http_seen=False, client_library=True)

    def answer(self, at: float, conn: str = "A", **fields) -> Client:
        answer = {name: False for name in IDENTIFY_ANSWER_FIELDS} | {"max_rdy_count": 2500, "msg_timeout": 60_000,
                                                                     "max_msg_timeout": 900_000} | fields
        return self.receive(at, wire.FRAME_RESPONSE, json.dumps(answer).encode(), conn)

    def unreadable(self, at: float, where: str, why: str, conn: str = "A") -> Client:
        self.judge.observe(conn, Observed(T0 + at, UNREADABLE, where, why))
        return self

    def client_items(self, end: float) -> list[str]:
        return [violation.item for violation in self.judge.finish(T0 + end) if violation.side == CLIENT]


def identified(conn: str = "A", at: float = 0.0, fields: dict | None = None, traffic: Client | None = None,
               **answer) -> Client:
    traffic = (traffic or Client()).connect(conn, at)
    return traffic.identify(at, {**NAMES, "heartbeat_interval": 1000, **(fields or {})}, conn=conn) \
        .answer(at + 0.001, conn, **answer)


def subscribed(conn: str = "A", at: float = 0.0, rdy: int = 1, traffic: Client | None = None) -> Client:
    return identified(conn, at, traffic=traffic).send(at + 0.01, b"SUB", "t", "c", conn=conn) \
        .ok(at + 0.011, conn).send(at + 0.02, b"RDY", rdy, conn=conn)


def test_a_good_consumer_breaks_nothing():
    traffic = subscribed().message(0.1, ID1.encode()).send(0.11, b"FIN", ID1).heartbeat(0.5).send(0.6, b"NOP")
    traffic.send(1.0, b"CLS").receive(1.01, wire.FRAME_RESPONSE, b"CLOSE_WAIT").close(1.02, CLIENT)
    assert traffic.client_items(5.0) == []


# ---- bytes, IDENTIFY, commands ---------------------------------------------------------------------------

def test_unreadable_bytes_name_the_magic_the_stream_or_the_layer_asked_for():
    traffic = Client().connect("A", started=False).unreadable(0.0, MAGIC, "magic b'  V1'")
    assert traffic.client_items(1.0) == ["NSQC-CONN-001"]
    assert subscribed().unreadable(0.1, STREAM, "PUB body size -1 out of range").client_items(1.0) == ["C-18"]
    snappy = identified(fields={"snappy": True}, snappy=True).unreadable(0.1, "snappy", "checksum mismatch")
    assert snappy.client_items(1.0) == ["NSQC-NEG-003"]
    forced = identified(snappy=True).unreadable(0.1, "snappy", "bad stream identifier")
    assert forced.client_items(1.0) == [], "a layer the client did not ask for is the broker's doing"


def test_a_command_through_a_layer_not_asked_for_is_neg_002():
    assert identified(snappy=True).send(0.1, b"NOP").client_items(1.0) == ["NSQC-NEG-002"]
    assert identified(fields={"snappy": True}, snappy=True).send(0.1, b"NOP").client_items(1.0) == []


def test_identify_after_sub_not_json_or_anonymous():
    traffic = Client().connect().send(0.0, b"SUB", "t", "c")
    assert traffic.client_items(1.0) == ["NSQC-CONN-002"]
    not_json = Client().connect().send(0.0, b"IDENTIFY", body=b"client_id=x")
    assert not_json.client_items(1.0) == ["NSQC-CONN-002"]
    anonymous = Client().connect().identify(0.0, {"feature_negotiation": True}).ok(0.01)
    assert anonymous.client_items(1.0) == ["NSQC-CONN-003"]
    unnegotiated = Client().connect().identify(0.0, {**NAMES, "feature_negotiation": False}).ok(0.01)
    assert unnegotiated.client_items(1.0) == ["NSQC-CONN-003"]


def test_an_identify_value_nsqd_refuses_is_conn_006():
    refused = Client().connect().identify(0.0, {**NAMES, "heartbeat_interval": 1})
    refused.error(0.01, b"E_BAD_BODY IDENTIFY heartbeat interval (1) is invalid")
    assert refused.client_items(1.0) == ["NSQC-CONN-006"]
    taken = identified(fields={"heartbeat_interval": 90_000})
    assert taken.client_items(1.0) == [], "a broker that took it runs with a wider --max-heartbeat-interval"


@pytest.mark.parametrize("command, item", [
    ((b"RDY", "abc"), "P-RDY-03"), ((b"RDY", 2501), "P-RDY-04"), ((b"FIN",), "P-FIN-02"), ((b"FIN", "abc"), "P-FIN-03"),
    ((b"REQ", ID1), "P-REQ-02"), ((b"REQ", ID1, "-5"), "P-REQ-04"), ((b"REQ", "abc", 0), "P-REQ-03"),
    ((b"TOUCH", "abc"), "P-TOUCH-02"), ((b"ASDF",), "C-21")])
def test_a_command_nsqd_cannot_parse_names_its_rule(command, item):
    traffic = subscribed(rdy=0).message(0.05, ID1.encode())
    assert traffic.send(0.1, *command).client_items(1.0) == [item]


def test_an_rdy_count_is_judged_against_the_negotiated_max_only():
    assert subscribed(rdy=2500).client_items(1.0) == []
    unnegotiated = Client().connect().identify(0.0, {**NAMES, "feature_negotiation": False}).ok(0.001)
    unnegotiated.send(0.01, b"SUB", "t", "c").ok(0.011).send(0.02, b"RDY", 5000)
    assert unnegotiated.client_items(1.0) == ["NSQC-CONN-003"], "max_rdy_count is the broker's flag there"


def test_an_mpub_its_count_and_sizes_do_not_read_is_pub_002():
    body = (3).to_bytes(4, "big") + wire.mpub_body([b"a", b"b"])[4:]
    assert identified().send(0.1, b"MPUB", "t", body=body).client_items(1.0) == ["NSQC-PUB-002"]
    assert identified().send(0.1, b"MPUB", "t", body=wire.mpub_body([b"a"])).client_items(1.0) == []


def test_commands_in_a_state_nsqd_refuses():
    assert identified().send(0.1, b"RDY", 1).client_items(1.0) == ["P-RDY-02"]
    assert subscribed().send(0.1, b"SUB", "t", "c").client_items(1.0) == ["P-SUB-01"]
    assert subscribed().send(0.1, b"CLS").send(0.2, b"SUB", "t", "c").client_items(1.0) == ["P-SUB-01"]
    assert Client().connect().send(0.0, b"PUB", "t", body=b"x").client_items(1.0) == ["NSQC-PUB-001"]


def test_auth_asked_for_comes_at_once_and_before_sub():
    def asked(*then) -> Client:
        traffic = identified(auth_required=True)
        for at, command in then:
            traffic.send(at, *command)
        return traffic
    assert asked((0.1, (b"AUTH",))).receive(0.2, wire.FRAME_RESPONSE, b'{"identity":"x"}') \
        .send(0.3, b"SUB", "t", "c").client_items(5.0) == []
    assert asked((0.1, (b"SUB", "t", "c"))).client_items(5.0) == ["NSQC-NEG-006"]
    assert asked((4.5, (b"NOP",))).client_items(5.0) == ["NSQC-NEG-006"], "no AUTH within 4 s"
    assert asked().client_items(3.0) == [], "the traffic ends before the 4 s are up"


# ---- messages, heartbeats ---------------------------------------------------------------------------------

@pytest.mark.parametrize("verb, item", [(b"FIN", "NSQC-MSG-001"), (b"REQ", "NSQC-MSG-002"), (b"TOUCH", "NSQC-MSG-003")])
def test_a_settlement_of_a_message_never_delivered_or_already_let_go(verb, item):
    args = (0,) if verb == b"REQ" else ()
    never = subscribed().message(0.1, ID1.encode()).send(0.2, verb, ID2, *args)
    assert item in never.client_items(1.0)
    twice = subscribed().message(0.1, ID1.encode()).send(0.2, b"FIN", ID1).send(0.3, verb, ID1, *args)
    assert twice.client_items(1.0) == [item]
    again = subscribed().message(0.1, ID1.encode()).send(0.2, b"REQ", ID1, 0).message(0.3, ID1.encode(), attempts=2)
    assert again.send(0.4, verb, ID1, *args).client_items(1.0) == [], "delivered again: the client's again"


def test_a_heartbeat_answered_late_or_never():
    assert subscribed().heartbeat(1.0).send(1.5, b"NOP").client_items(3.0) == []
    assert subscribed().heartbeat(1.0).send(2.5, b"NOP").client_items(3.0) == ["NSQC-HB-001"]
    assert subscribed().heartbeat(1.0).send(2.5, b"RDY", 1).client_items(3.0) == ["NSQC-HB-001"]
    assert identified().heartbeat(1.0).client_items(3.0) == ["NSQC-HB-002"], "a publisher's connection"
    assert subscribed().heartbeat(1.0).close(1.2, CLIENT).client_items(3.0) == ["NSQC-CLS-001"]
    unseen = subscribed(traffic=Client(timing=False)).heartbeat(1.0)
    assert unseen.client_items(3.0) == [], "read times say nothing of the wire"


# ---- errors, reconnects, CLS ------------------------------------------------------------------------------

def test_a_connection_dropped_on_a_non_fatal_error():
    traffic = subscribed().message(0.1, ID1.encode()).send(0.2, b"FIN", ID1).error(0.21, b"E_FIN_FAILED FIN failed")
    assert traffic.close(0.3, CLIENT).client_items(1.0) == ["NSQC-ERR-001", "NSQC-CLS-001"]
    kept = subscribed().message(0.1, ID1.encode()).send(0.2, b"REQ", ID1, 0).error(0.21, b"E_REQ_FAILED REQ failed")
    assert kept.send(2.0, b"CLS").receive(2.01, wire.FRAME_RESPONSE, b"CLOSE_WAIT").close(2.02, CLIENT) \
        .client_items(3.0) == []


def test_no_reconnect_within_20_s_of_a_fatal_close():
    def run(reconnect_at: float | None, end: float = 30.0) -> list[str]:
        traffic = subscribed().error(1.0, b"E_INVALID cannot SUB in current state").close(1.0, monitors.BROKER)
        if reconnect_at is not None:
            subscribed("B", reconnect_at, traffic=traffic)
        return traffic.client_items(end)
    assert run(None) == ["NSQC-ERR-004"]
    assert run(5.0) == []
    assert run(None, end=15.0) == [], "the traffic ends before the 20 s are up"


def test_reconnects_to_an_nsqd_closing_them_at_once_are_spaced():
    def run(count: int, every: float) -> list[str]:
        traffic = Client()
        for number in range(count):
            name, at = f"R{number}", 1.0 + number * every
            traffic.connect(name, at).close(at, monitors.BROKER, conn=name)
        return traffic.client_items(count * every + 2.0)
    assert run(17, 0.01) == ["NSQC-ERR-005"]
    assert run(17, 0.6) == []


def test_a_consumer_closing_without_cls_or_before_close_wait():
    assert subscribed().close(1.0, CLIENT).client_items(2.0) == ["NSQC-CLS-001"]
    assert subscribed().send(1.0, b"CLS").close(1.01, CLIENT).client_items(2.0) == ["NSQC-CLS-001"]
    assert identified().close(1.0, CLIENT).client_items(2.0) == [], "a publisher has no CLS"


# ---- backoff ----------------------------------------------------------------------------------------------

def failed(traffic: Client, at: float, msg_id: str, ends_after: float | None, resume: int = 1) -> Client:
    """A failed message at ``at``: REQ, RDY 0, and ``ends_after`` seconds later RDY ``resume`` (None: never)."""
    traffic.message(at, msg_id.encode()).send(at + 0.01, b"REQ", msg_id, 1000).send(at + 0.02, b"RDY", 0)
    return traffic if ends_after is None else traffic.send(at + 0.02 + ends_after, b"RDY", resume)


def test_a_backoff_that_ends_with_more_than_rdy_1_or_never_ends():
    assert failed(subscribed(rdy=3), 1.0, ID1, 0.5).client_items(30.0) == []
    assert failed(subscribed(rdy=3), 1.0, ID1, 0.5, resume=3).client_items(30.0) == ["NSQC-RDY-005"]
    assert failed(subscribed(rdy=3), 1.0, ID1, None).client_items(30.0) == ["NSQC-RDY-006"]
    assert failed(subscribed(rdy=3), 1.0, ID1, None).client_items(15.0) == [], "the 20 s are not up"
    requeued = subscribed().message(1.0, ID1.encode()).send(1.01, b"REQ", ID1, 1000)
    assert requeued.client_items(30.0) == [], "a REQ without an RDY 0 is no backoff"


def test_backoffs_in_a_row_that_do_not_grow():
    def run(lengths: list[float]) -> list[str]:
        traffic, at = subscribed(), 1.0
        for number, length in enumerate(lengths):
            failed(traffic, at, f"{number:016x}", length)
            at += length + 0.5
        return traffic.client_items(at + 1.0)
    assert run([0.5, 1.0, 2.0, 4.0]) == []
    assert run([6.0, 1.0, 2.0, 4.0]) == ["NSQC-RDY-007"]
    assert run([6.0, 1.0, 2.0]) == [], "judged over four"


def test_every_client_monitor_judges_catalogue_items():
    from conformance.spec import behaviours
    cited = {item for monitor in monitors.CLIENT_MONITORS for item in monitor.ITEMS}
    assert cited <= behaviours().keys(), sorted(cited - behaviours().keys())
    assert all(monitor.__doc__ and monitor.ITEMS for monitor in monitors.CLIENT_MONITORS)
