"""Delivery semantics under generated workloads (D-* in conformance/spec/delivery.toml), judged from the clients'
history by ``conformance.checker``; plus a state machine of one channel against a model.

Examples are derandomized (the same workloads every run: no flaky reruns) and bounded in size and time.
"""

import threading
import time
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, Phase, given, note, settings
from hypothesis import strategies as st
from hypothesis.errors import Flaky
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from conformance.checker import History, check
from conformance.client import Mismatch
from nsq_protocol import wire

requirement = pytest.mark.requirement
# Consumers negotiate a short msg_timeout so messages abandoned by a disconnect come back within the run
# (D-15); FIN/REQ are sent at once, far inside it.
CONSUMER_FIELDS = {"msg_timeout": 3000, "heartbeat_interval": 1000}
# A failing example is reported as generated: shrinking would re-run timing-bound examples for minutes.
NO_SHRINKING = (Phase.explicit, Phase.reuse, Phase.generate)
ACTIONS = ("fin", "req0", "req_delay", "touch_fin", "disconnect")


@contextmanager
def judged_by_the_first_failure():
    """The case's verdict is its first failure's. A broker that answers otherwise when hypothesis replays a failing
    example makes hypothesis raise FlakyFailure (an ExceptionGroup, as several failures are) or, when the answers
    steered which steps the example took, FlakyStrategyDefinition: none of them is harness trouble."""
    try:
        yield
    except ExceptionGroup as group:
        raise group.exceptions[0] from None
    except Flaky as flaky:
        raise Mismatch("the broker answers the replay of an example as it answered the example", "the same answers",
                       f"other answers ({type(flaky).__name__})", "other answers on the replay of an example") \
            from flaky


workloads = st.fixed_dictionaries({
    "producers": st.lists(st.tuples(st.integers(3, 12), st.booleans()), min_size=1, max_size=3),
    "consumers": st.lists(st.tuples(st.integers(1, 5), st.lists(st.sampled_from(ACTIONS), min_size=1,
                                                                  max_size=6)), min_size=1, max_size=3),
})


class Consumer(threading.Thread):
    """Subscribes, then acts on each delivery by its action cycle until told to stop."""

    def __init__(self, nsq, topic, name, ready, actions, history, stop):
        super().__init__(daemon=True, name=name)
        self.nsq, self.topic, self.ready, self.actions = nsq, topic, ready, actions
        self.history, self.stop = history, stop
        self.label, self.generation, self.seen, self.error = name, 0, 0, None

    def connect(self):
        self.generation += 1
        self.connection_name = f"{self.label}.{self.generation}"
        conn = self.nsq.connect()
        conn.identify(CONSUMER_FIELDS)
        conn.subscribe(self.topic, "c", ready=self.ready)
        self.history.add("rdy", connection=self.connection_name, value=self.ready)
        return conn

    def run(self):
        try:
            conn = self.connect()
            disconnected = False
            while not self.stop.is_set():
                for frame in conn.poll(0.1):
                    if frame.frame_type == wire.FRAME_ERROR:
                        if frame.error_code == "E_FIN_FAILED":  # a FIN that raced a timeout (D-12)
                            self.history.add("fin_failed", connection=self.connection_name,
                                             message_id=frame.data.split(b" ")[2])
                            continue
                        raise Mismatch("no unexpected error frames", "messages only", frame.describe())
                    if frame.frame_type != wire.FRAME_MESSAGE:
                        continue
                    self.history.add("deliver", connection=self.connection_name, message_id=frame.message_id,
                                     body=frame.body, attempts=frame.attempts)
                    action = self.actions[self.seen % len(self.actions)]
                    self.seen += 1
                    if action == "disconnect" and disconnected:
                        action = "fin"  # one disconnect per consumer keeps the run short
                    message_id = frame.id_text
                    if action == "disconnect":
                        disconnected = True
                        conn.close()
                        self.history.add("disconnect", connection=self.connection_name)
                        conn = self.connect()
                        break
                    if action == "touch_fin":
                        conn.command("TOUCH", message_id)
                        self.history.add("touch", connection=self.connection_name, message_id=frame.message_id)
                    if action in ("fin", "touch_fin"):
                        conn.command("FIN", message_id)
                        self.history.add("fin", connection=self.connection_name, message_id=frame.message_id)
                    else:
                        delay = 0 if action == "req0" else 200
                        conn.command("REQ", message_id, delay)
                        self.history.add("req", connection=self.connection_name, message_id=frame.message_id,
                                         value=delay)
        except BaseException as exc:  # re-raised by the case in the main thread
            self.error = exc


@pytest.mark.long_wait(18)
@pytest.mark.transcript_varies("concurrent producers and consumers: which consumer gets which message, and "
                                "in which order connections open, changes from run to run")
@requirement("NSQ-SEM-001", "NSQ-SEM-002")
def test_concurrent_workloads_lose_nothing(nsq):
    """Several producers (PUB/MPUB) and consumers (FIN, REQ 0, REQ 200 ms, TOUCH+FIN, one disconnect each)
    on one channel: every acknowledged message is eventually FINed, attempts strictly increase, RDY is
    never exceeded; duplicates are reported (D-38, D-15, C-12, D-01)."""
    topic = nsq.topic()
    nsq.fresh_channel(topic, "c")  # timeouts after disconnects then fire on time (D-14)
    reports = []

    @settings(max_examples=4, deadline=None, derandomize=True, database=None, phases=NO_SHRINKING,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(workload=workloads)
    def run(workload):
        history, stop = History(), threading.Event()
        tag = f"w{len(reports)}"
        consumers = [Consumer(nsq, topic, f"{tag}c{index}", ready, actions, history, stop)
                     for index, (ready, actions) in enumerate(workload["consumers"])]
        for consumer in consumers:
            consumer.start()
        for index, (count, batch) in enumerate(workload["producers"]):
            producer = nsq.connect()
            bodies = [f"{tag}-p{index}-{number}".encode() for number in range(count)]
            if batch:
                producer.command("MPUB", topic, body=wire.mpub_body(bodies))
                producer.expect_response(b"OK")
            else:
                for body in bodies:
                    producer.publish(topic, body)
            for body in bodies:
                history.add("publish", body=body)
        deadline = time.monotonic() + nsq.seconds(20)
        while time.monotonic() < deadline and not check(history).ok and not any(c.error for c in consumers):
            time.sleep(0.1)
        stop.set()
        for consumer in consumers:
            consumer.join(5)
        for consumer in consumers:
            if consumer.error:
                raise consumer.error
        report = check(history)
        note(report.describe())
        reports.append(report.describe())
        nsq.transcript.note(f"workload {tag}: {workload} -> {report.describe()}")
        nsq.verify.that("delivery history (NSQ-SEM-001/002)", report.ok, "no lost message, attempts "
                        "increasing, RDY respected, nothing after FIN", report.describe(), report.judges())

    with judged_by_the_first_failure():
        run()


class ChannelMachine(RuleBasedStateMachine):
    """One consumer on one channel against a model: pending (published, not in flight), in flight,
    finished. Output buffering is off (D-42) so a short read window sees every frame."""

    def __init__(self, nsq, topic):
        super().__init__()
        self.nsq = nsq
        self.producer = nsq.connect()
        self.consumer = nsq.connect()
        self.consumer.identify({"output_buffer_size": -1})
        self.consumer.subscribe(topic, "c")
        self.topic = topic
        self.ready = self.previous_ready = 0
        self.pending: dict[bytes, int] = {}  # body -> attempts so far
        self.in_flight: dict[str, tuple[bytes, int]] = {}  # id (as FIN carries it) -> (body, attempts)
        self.finished: set[bytes] = set()
        self.counter = 0

    def receive(self, seconds=0.15):
        for frame in self.consumer.poll(seconds):
            note(f"frame {frame.describe()}")
            self.nsq.verify.that("only message frames arrive", frame.frame_type == wire.FRAME_MESSAGE,
                                 "MESSAGE", frame)
            body = frame.body
            self.nsq.verify.that("a delivered message is pending in the model (not finished, not in flight)",
                                 body in self.pending, f"one of {sorted(self.pending)[:5]}", body)
            self.nsq.verify.equal(f"attempts of {body!r} (C-12)", self.pending.pop(body) + 1, frame.attempts)
            self.in_flight[frame.id_text] = (body, frame.attempts)
            allowed = max(self.ready, self.previous_ready)
            self.nsq.verify.that("in flight <= RDY (D-01)", len(self.in_flight) <= allowed,
                                 f"<= {allowed}", len(self.in_flight))
        self.previous_ready = self.ready

    @rule(count=st.integers(1, 3))
    def publish(self, count):
        bodies = []
        for _ in range(count):
            self.counter += 1
            bodies.append(b"m%d" % self.counter)
        self.producer.command("MPUB", self.topic, body=wire.mpub_body(bodies))
        self.producer.expect_response(b"OK")
        for body in bodies:
            self.pending[body] = 0
        self.receive()

    @rule(ready=st.integers(0, 4))
    def set_ready(self, ready):
        self.previous_ready, self.ready = self.ready, ready
        self.consumer.command("RDY", ready)
        self.receive()

    @precondition(lambda self: self.in_flight)
    @rule(data=st.data(), verb=st.sampled_from(["FIN", "REQ", "TOUCH"]))
    def settle(self, data, verb):
        message_id = data.draw(st.sampled_from(sorted(self.in_flight)))
        body, attempts = self.in_flight[message_id]
        self.consumer.command(verb, message_id, *([0] if verb == "REQ" else []))
        if verb == "FIN":
            del self.in_flight[message_id]
            self.finished.add(body)
        elif verb == "REQ":
            del self.in_flight[message_id]
            self.pending[body] = attempts
        self.receive()

    @invariant()
    def nothing_lost(self):
        known = set(self.pending) | {body for body, _ in self.in_flight.values()} | self.finished
        self.nsq.verify.equal("every published message is pending, in flight or finished",
                              self.counter, len(known))

    def teardown(self):
        """Drain: FIN whatever is in flight, then RDY high until every pending message arrived."""
        try:
            for message_id in list(self.in_flight):
                self.consumer.command("FIN", message_id)
                self.finished.add(self.in_flight.pop(message_id)[0])
            self.previous_ready = self.ready = 10
            self.consumer.command("RDY", 10)
            deadline = time.monotonic() + self.nsq.seconds(3)
            while self.pending and time.monotonic() < deadline:
                self.receive(0.2)
                for message_id in list(self.in_flight):
                    self.consumer.command("FIN", message_id)
                    self.finished.add(self.in_flight.pop(message_id)[0])
            self.nsq.verify.equal("messages never delivered (lost)", [], sorted(self.pending))
        finally:
            self.consumer.close()
            self.producer.close()


@pytest.mark.long_wait(10)
@pytest.mark.transcript_varies("which read window a message arrives in depends on timing, and with it when the "
                                "machine settles it")
@requirement("NSQ-SEM-001", "NSQ-SEM-002", "NSQ-RDY-004", "NSQ-REQ-001")
def test_channel_state_machine(nsq):
    """Random PUB/RDY/FIN/REQ 0/TOUCH sequences on one channel match the model: each delivery is a pending
    message with attempts + 1, in flight never exceeds RDY, and nothing is lost (D-01, D-02, D-20, C-12)."""
    # A topic per example: the previous example's consumer may still hold RDY on the broker's side for a moment
    # after its close, and a message published then goes to it (in flight until msg_timeout, as on nsqd).
    with judged_by_the_first_failure():
        run_state_machine_as_test(lambda: ChannelMachine(nsq, nsq.topic()), settings=settings(
            max_examples=6, stateful_step_count=12, deadline=None, derandomize=True, database=None,
            phases=NO_SHRINKING, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]))


@requirement("NSQ-SEM-003", "NSQ-MPUB-001")
def test_a_ready_consumer_gets_every_message_at_once(nsq):
    """300 PUBs in one write and an MPUB of 300 to a consumer with RDY 600 that FINs each message as it comes:
    all 600 arrive within 5 s (msg_timeout is 60 s, so a message whose first delivery went missing cannot come
    back in time), each once, with attempts 1, and nothing follows (D-01, D-02, D-05, C-12). Hundreds per
    connection, so that a fault hitting 1 % of the messages shows; fewer where the profile's max-rdy-count or
    max-body-size (8-byte messages) does not allow them."""
    topic = nsq.topic()
    count = min(300, nsq.limits["max_rdy_count"] // 2, (nsq.limits["max_body_size"] - 4) // 12)
    consumer = nsq.connect()
    consumer.subscribe(topic, "c", ready=2 * count)
    producer = nsq.connect()
    singles = [b"pub-%03d" % number for number in range(count)]
    producer.send(b"".join(wire.encode_command("PUB", topic, body=body) for body in singles))
    for _ in singles:
        producer.expect_response(b"OK")
    batch = [b"mpub-%03d" % number for number in range(count)]
    producer.command("MPUB", topic, body=wire.mpub_body(batch))
    producer.expect_response(b"OK")
    deliveries = []
    deadline = time.monotonic() + nsq.seconds(5)
    while len(deliveries) < 2 * count and time.monotonic() < deadline:
        for frame in consumer.poll(deadline - time.monotonic()):
            nsq.verify.that("only message frames arrive", frame.frame_type == wire.FRAME_MESSAGE, "MESSAGE",
                            frame.describe())
            deliveries.append(frame)
            consumer.command("FIN", frame.id_text)
    consumer.expect_silence(0.3, what="nothing after the last message: no duplicate, no late delivery")
    bodies = [frame.body for frame in deliveries]
    missing = sorted(set(singles + batch) - set(bodies))
    nsq.verify.that(f"every one of the {2 * count} messages within 5 s", not missing, "none missing",
                    f"{len(missing)} missing: {missing[:5]}")
    nsq.verify.that("each message once", len(bodies) == len(set(bodies)), "no duplicates",
                    sorted({body for body in bodies if bodies.count(body) > 1})[:5])
    nsq.verify.equal("attempts of every delivery (C-12)", {1}, {frame.attempts for frame in deliveries})
