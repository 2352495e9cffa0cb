"""A consumer with room is fed what its channel holds (ReadyConsumerFed: D-02, D-05, D-41, D-42), and what is
published reaches every channel however it was published (PublishedIsDelivered: P-DPUB-03, H-MPUB-06, D-30, D-38),
each kept, broken and left unjudged where the traffic lacks what the rule needs."""

from __future__ import annotations

import json

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from nsq_protocol import monitors, wire
from nsq_protocol.http import HttpExchange, Request, Response
from nsq_protocol.monitors import BROKER, http_action
from nsq_protocol.monitors.fed import INFINITY, Backlog
from tests.protocol.test_monitors import ID1, ID2, ID3, T0, Traffic, consumer
from tests.protocol.test_monitors_delivery_http import not_judged

FED = ("D-02", "D-05", "D-41", "D-42")


def post(traffic: Traffic, at: float, target: str, body: bytes = b"") -> Traffic:
    """An HTTP request to the nsqd answered 200, fed as a capture's feeder feeds it."""
    request = Request("POST", target, body)
    traffic.judge.http_exchange(HttpExchange(T0 + at, request, Response(200, b"OK"), T0 + at + 0.002))
    action = http_action(T0 + at, request, 200)
    if action is not None:
        traffic.judge.http(action)
    return traffic


def subscribed(rdy: int, timing: bool = True) -> Traffic:
    """Consumer A (msg_timeout 2 s, output_buffer_timeout 250 ms) on t/c, and a publisher P."""
    return consumer(rdy=rdy, timing=timing).connect("P", at=0.0)


def publish(traffic: Traffic, at: float, *bodies: bytes) -> Traffic:
    for offset, body in enumerate(bodies):
        traffic.send(at + offset * 0.001, b"PUB", "t", body=body, conn="P").ok(at + offset * 0.001 + 0.0005, conn="P")
    return traffic


def fed(traffic: Traffic, end: float = 5.0) -> list:
    return [item for item, side in traffic.violations(end) if item in FED and side == BROKER]


# ---- D-02: a window, not a budget ---------------------------------------------------------------------------

def test_a_window_above_what_is_in_flight_sent_at_once_keeps_d02():
    traffic = publish(subscribed(rdy=3), 0.1, b"a", b"b", b"c")
    traffic.message(0.11, ID1, body=b"a").message(0.11, ID2, body=b"b").message(0.11, ID3, body=b"c")
    assert fed(traffic) == []


def test_one_message_at_a_time_under_rdy_3_breaks_d02():
    traffic = publish(subscribed(rdy=3), 0.1, b"a", b"b", b"c").message(0.11, ID1, body=b"a")
    assert fed(traffic.send(2.0, b"NOP")) == ["D-02"]


def test_a_fin_that_lets_nothing_through_breaks_d02_and_one_that_does_keeps_it():
    traffic = publish(subscribed(rdy=1), 0.1, b"a", b"b").message(0.11, ID1, body=b"a")
    traffic.send(0.2, b"FIN", ID1.decode())
    assert fed(traffic.send(2.0, b"NOP")) == ["D-02"]
    kept = publish(subscribed(rdy=1), 0.1, b"a", b"b").message(0.11, ID1, body=b"a")
    kept.send(0.2, b"FIN", ID1.decode()).message(0.21, ID2, body=b"b").send(0.3, b"FIN", ID2.decode())
    assert fed(kept.send(2.0, b"NOP")) == []


def test_another_consumer_may_take_what_the_channel_holds():
    traffic = subscribed(rdy=1).connect("B", 0.0).send(0.01, b"SUB", "t", "c", conn="B").ok(0.011, conn="B")
    traffic.send(0.02, b"RDY", 5, conn="B")
    publish(traffic, 0.1, b"a", b"b").message(0.11, ID1, body=b"a").message(0.11, ID2, body=b"b", conn="B")
    assert fed(traffic.send(2.0, b"NOP")) == []


def test_a_message_delivered_before_its_publish_was_answered_or_a_refused_publish_holds_nothing():
    early = subscribed(rdy=3).send(0.1, b"PUB", "t", body=b"a", conn="P").message(0.101, ID1, body=b"a")
    assert fed(early.ok(0.102, conn="P").send(2.0, b"NOP")) == [], "the broker delivered it before its OK crossed"
    refused = subscribed(rdy=3).send(0.1, b"PUB", "t", body=b"a", conn="P")
    refused.error(0.101, b"E_PUB_FAILED PUB failed exiting", conn="P").close(0.102, BROKER, conn="P")
    assert fed(refused.send(2.0, b"NOP")) == []


# ---- D-05: a REQ makes room, and REQ 0 puts the message back ------------------------------------------------

def test_req_0_that_does_not_bring_the_message_back_breaks_d05():
    traffic = publish(subscribed(rdy=1), 0.1, b"a").message(0.11, ID1, body=b"a")
    traffic.send(0.2, b"REQ", ID1.decode(), 0)
    assert fed(traffic.send(2.0, b"NOP")) == ["D-05"]
    kept = publish(subscribed(rdy=1), 0.1, b"a").message(0.11, ID1, body=b"a")
    kept.send(0.2, b"REQ", ID1.decode(), 0).message(0.21, ID1, attempts=2, body=b"a")
    assert fed(kept.send(2.0, b"NOP")) == []


def test_a_req_with_a_delay_holds_the_message_back():
    traffic = publish(subscribed(rdy=1), 0.1, b"a").message(0.11, ID1, body=b"a")
    traffic.send(0.2, b"REQ", ID1.decode(), 5000)
    assert fed(traffic.send(2.0, b"NOP")) == []


# ---- D-41, D-42: the output buffer's flush ----------------------------------------------------------------------

def test_a_lone_message_held_past_the_buffer_timeout_breaks_d41():
    traffic = publish(subscribed(rdy=10), 0.1, b"a")
    assert fed(traffic.message(1.5, ID1, body=b"a")) == ["D-41"]
    kept = publish(subscribed(rdy=10), 0.1, b"a")
    assert fed(kept.message(0.35, ID1, body=b"a")) == []


def without_timed_flush(rdy: int = 10) -> Traffic:
    """Consumer A after IDENTIFY output_buffer_timeout -1, heartbeats every 2 s."""
    answer = {name: 0 for name in monitors.connection.IDENTIFY_ANSWER_FIELDS} | {
        "msg_timeout": 60_000, "max_msg_timeout": 900_000, "output_buffer_timeout": 0, "output_buffer_size": 16_384,
        "tls_v1": False, "snappy": False, "deflate": False}
    traffic = Traffic().connect().identify(0.0, {"feature_negotiation": True, "output_buffer_timeout": -1,
                                                 "heartbeat_interval": 2000})
    traffic.receive(0.001, wire.FRAME_RESPONSE, json.dumps(answer).encode())
    return traffic.send(0.01, b"SUB", "t", "c").ok(0.011).send(0.02, b"RDY", rdy).connect("P", 0.0)


def test_without_the_timed_flush_a_lone_message_waits_at_most_for_the_next_heartbeat_d42():
    kept = publish(without_timed_flush(), 0.1, b"a")
    assert fed(kept.heartbeat(2.0).message(2.0, ID1, body=b"a")) == []
    late = publish(without_timed_flush(), 0.1, b"a")
    assert fed(late.message(3.5, ID1, body=b"a")) == ["D-42"]


# ---- not judged ---------------------------------------------------------------------------------------------

def test_a_paused_channel_an_ephemeral_one_or_an_unseen_broker_is_not_judged():
    paused = post(subscribed(rdy=3), 0.05, "/channel/pause?topic=t&channel=c")
    assert fed(publish(paused, 0.1, b"a").send(2.0, b"NOP")) == []
    ephemeral = Traffic().connect().send(0.0, b"SUB", "t", "c#ephemeral").ok(0.01).send(0.02, b"RDY", 3)
    assert fed(publish(ephemeral.connect("P", 0.0), 0.1, b"a").send(2.0, b"NOP")) == []
    unseen = publish(subscribed(rdy=3), 0.1, b"a")
    unseen.judge.http_seen = False
    assert fed(unseen.send(2.0, b"NOP")) == [] and not_judged(unseen, "D-41")
    untimed = publish(subscribed(rdy=3, timing=False), 0.1, b"a")
    assert fed(untimed.send(2.0, b"NOP")) == [] and not_judged(untimed, "D-02")


def test_a_consumer_that_closed_while_it_had_room_may_have_taken_what_is_missing():
    traffic = subscribed(rdy=1).connect("B", 0.0).send(0.01, b"SUB", "t", "c", conn="B").ok(0.011, conn="B")
    traffic.send(0.02, b"RDY", 5, conn="B")
    publish(traffic, 0.1, b"a", b"b").message(0.11, ID1, body=b"a").close(0.12, monitors.CLIENT, conn="B")
    assert fed(traffic.send(2.0, b"NOP")) == []


# ---- PublishedIsDelivered: DPUB without delay, /mpub's defer, a deferred publish ----------------------------

def published_items(traffic: Traffic, end: float) -> list:
    return sorted(item for item, side in traffic.violations(end)
                  if item in ("D-35", "D-38", "P-DPUB-03", "H-MPUB-06", "D-30"))


def test_a_dpub_without_delay_never_delivered_breaks_p_dpub_03():
    for delay in (0, ""):
        traffic = subscribed(rdy=5).send(0.1, b"DPUB", "t", delay, body=b"now", conn="P").ok(0.11, conn="P")
        assert published_items(traffic.send(4.0, b"NOP"), 4.0) == ["P-DPUB-03"]
    kept = subscribed(rdy=5).send(0.1, b"DPUB", "t", 0, body=b"now", conn="P").ok(0.11, conn="P")
    assert published_items(kept.message(0.12, ID1, body=b"now").send(4.0, b"NOP"), 4.0) == []


def test_an_mpub_over_http_with_a_defer_is_published_at_once_h_mpub_06():
    body = wire.mpub_body([b"one"])
    traffic = post(subscribed(rdy=5), 0.1, "/mpub?topic=t&binary=true&defer=5000", body=body)
    assert published_items(traffic.send(4.0, b"NOP"), 4.0) == ["H-MPUB-06"]
    kept = post(subscribed(rdy=5), 0.1, "/mpub?topic=t&binary=true&defer=5000", body=body)
    assert published_items(kept.message(0.12, ID1, body=b"one").send(4.0, b"NOP"), 4.0) == []


def test_a_deferred_publish_is_delivered_once_its_delay_and_the_scan_are_past_d30():
    traffic = subscribed(rdy=5).send(0.1, b"DPUB", "t", 1000, body=b"later", conn="P").ok(0.11, conn="P")
    assert published_items(traffic.send(6.0, b"NOP"), 6.0) == [], "the channel may not be on the scan's list yet"
    assert published_items(traffic.send(9.0, b"NOP"), 9.0) == ["D-30"]
    kept = subscribed(rdy=5).send(0.1, b"DPUB", "t", 1000, body=b"later", conn="P").ok(0.11, conn="P")
    assert published_items(kept.message(1.2, ID1, body=b"later").send(9.0, b"NOP"), 9.0) == []


# ---- DeferredWaits: D-34, DeliveredAsPublished: P-MPUB-03 ---------------------------------------------------------

def test_a_deferred_message_stamped_at_its_release_breaks_d34():
    def run(stamped: float, delay: int = 3000) -> list:
        traffic = subscribed(rdy=5).send(0.1, b"DPUB", "t", delay, body=b"later", conn="P").ok(0.11, conn="P")
        traffic.message(0.1 + delay / 1000 + 0.05, ID1, body=b"later", published=stamped)
        return [item for item, _ in traffic.violations(delay / 1000 + 1) if item == "D-34"]
    assert run(stamped=3.1) == ["D-34"]
    assert run(stamped=0.1) == []
    assert run(stamped=1.1, delay=1000) == [], "a delay within the clocks' slack is not judged"


def test_a_body_only_a_refused_mpub_carried_delivered_breaks_p_mpub_03():
    def run(also_published: bool) -> list:
        traffic = subscribed(rdy=5).send(0.1, b"MPUB", "t", body=wire.mpub_body([b"ok", b"x" * 10]), conn="P")
        traffic.error(0.11, b"E_BAD_MESSAGE MPUB message too big 10 > 5", conn="P").close(0.12, BROKER, conn="P")
        if also_published:
            traffic.connect("Q", 1.4).send(1.4, b"PUB", "t", body=b"ok", conn="Q").ok(1.41, conn="Q")
        traffic.message(1.6, ID1, body=b"ok", published=1.5)  # stamped well into the traffic: published in it
        return [item for item, _ in traffic.violations(2.0) if item in ("P-MPUB-03", "C-09")]
    assert run(also_published=False) == ["P-MPUB-03"]
    assert run(also_published=True) == []



def test_a_body_published_twice_is_not_judged_by_p_dpub_04():
    """Either publish may be the one delivered: a body a PUB and then a DPUB carried is not held to the DPUB's delay."""
    def run(pub_too: bool) -> list:
        traffic = subscribed(rdy=5)
        if pub_too:
            traffic.send(0.1, b"PUB", "t", body=b"twice", conn="P").ok(0.105, conn="P")
        traffic.send(0.2, b"DPUB", "t", 5000, body=b"twice", conn="P").ok(0.21, conn="P")
        traffic.message(0.3, ID1, body=b"twice")
        return [item for item, _ in traffic.violations(1.0) if item == "P-DPUB-04"]
    assert run(pub_too=False) == ["P-DPUB-04"]
    assert run(pub_too=True) == []


def test_a_body_twice_in_a_refused_mpub_then_published_once_is_a_copy_not_refused():
    """P-MPUB-03: a refused MPUB that carried a body twice, then a PUB of it: one copy was not refused."""
    def run(published_after: bool) -> list:
        traffic = subscribed(rdy=5).send(0.1, b"MPUB", "t", body=wire.mpub_body([b"ok", b"ok", b"x" * 10]),
                                         conn="P")
        traffic.error(0.11, b"E_BAD_MESSAGE MPUB message too big 10 > 5", conn="P").close(0.12, BROKER, conn="P")
        if published_after:
            traffic.connect("Q", 1.4).send(1.4, b"PUB", "t", body=b"ok", conn="Q").ok(1.41, conn="Q")
        traffic.message(1.6, ID1, body=b"ok", published=1.5)
        return [item for item, _ in traffic.violations(2.0) if item in ("P-MPUB-03", "C-09")]
    assert run(published_after=False) == ["P-MPUB-03"]
    assert run(published_after=True) == []


def test_publishes_let_go_of_before_they_are_due_are_each_not_judged(monkeypatch):
    """PublishedIsDelivered: an MPUB's messages not yet due when the judge lets go of its messages (MESSAGES_KEPT)
    are each counted as not judged."""
    monkeypatch.setattr(monitors.judge, "MESSAGES_KEPT", 10)
    traffic = subscribed(rdy=2).send(0.05, b"MPUB", "t", body=wire.mpub_body([b"a", b"b", b"c"]), conn="P")
    traffic.ok(0.06, conn="P")
    at = 0.1
    for number in range(40):
        msg_id = b"%016x" % (number + 16)
        traffic.message(at, msg_id).send(at + 0.001, b"FIN", msg_id.decode())
        at += 0.01
    traffic.violations(at)
    assert traffic.judge.let_go_at is not None
    assert traffic.judge.not_judged["P-MPUB-06", monitors.events.LET_GO] == 3

# ---- the backlog: a publish's messages as one block ----------------------------------------------------------------
KEYS = st.one_of(st.integers(0, 5), st.sampled_from(["0000000000000001", "0000000000000002"]))


class BacklogAsMessages(RuleBasedStateMachine):
    """A Backlog holds what a list of its messages, one by one and oldest first, holds: a delivery takes the oldest
    with its key, whatever block it is in and however keys repeat within and across blocks."""

    def __init__(self):
        super().__init__()
        self.backlog = Backlog(("t", "c"))
        self.messages: list[list] = []  # [sequence, when the broker had it, key], oldest first
        self.sequence = 0

    @rule(keys=st.lists(KEYS, min_size=1, max_size=6), answered=st.booleans())
    def add(self, keys, answered):
        self.sequence += 1
        at = float(self.sequence) if answered else INFINITY
        self.backlog.add(self.sequence, at, tuple(keys))
        self.messages += [[self.sequence, at, key] for key in keys]

    @rule(key=KEYS)
    def take(self, key):
        held = next((message for message in self.messages if message[2] == key), None)
        if held is not None:
            self.messages.remove(held)
        assert self.backlog.take(key) is (held is not None)

    @rule(data=st.data())
    def accepted(self, data):
        sequence = data.draw(st.integers(1, self.sequence + 1))
        self.backlog.accepted(sequence, sequence + 0.5)
        for message in self.messages:
            if message[0] == sequence:
                message[1] = sequence + 0.5

    @rule(data=st.data())
    def refused(self, data):
        sequence = data.draw(st.integers(1, self.sequence + 1))
        self.backlog.refused(sequence)
        self.messages = [message for message in self.messages if message[0] != sequence]

    @invariant()
    def holds_the_same(self):
        assert self.backlog.held == len(self.messages)
        assert bool(self.backlog.blocks) == bool(self.messages)
        assert self.backlog.oldest() == next((at for _, at, _ in self.messages if at != INFINITY), None)


TestBacklogAsMessages = BacklogAsMessages.TestCase
TestBacklogAsMessages.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
