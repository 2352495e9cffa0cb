"""A capture's bulk (events.Run: a connection's consecutive message frames, or FINs) handed to the monitors that take
runs whole judges exactly as the same events one by one: the same violations, the same "not judged", on traffic
hypothesis writes (consumers of one channel and a publisher, with timeouts, requeues, touches and errors among
the bulk)."""

from __future__ import annotations

import json
from dataclasses import astuple

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from nsq_protocol import monitors, wire
from nsq_protocol.monitors.events import COMMAND, FINS, MESSAGE, Run

T0 = 1_800_000_000.0
NS = 1_000_000_000
CONSUMERS = ("A", "B")
ANSWER = {name: 0 for name in monitors.connection.IDENTIFY_ANSWER_FIELDS} | {
    "max_rdy_count": 2500, "version": "1.3.0", "max_msg_timeout": 900_000, "msg_timeout": 1000,
    "output_buffer_timeout": 250, "output_buffer_size": 16_384, "tls_v1": False, "snappy": False, "deflate": False}


def _id(number: int) -> bytes:
    return f"{number:016x}".encode()


def _command(ts: float, name: bytes, *params: bytes, body: bytes | None = None) -> monitors.Observed:
    return monitors.from_command(ts, wire.Command(name, params, body))


def _frame(ts: float, frame_type: int, data: bytes) -> monitors.Observed:
    return monitors.from_frame(ts, wire.Frame(frame_type, data))


gaps = st.one_of(st.floats(0.0, 0.002), st.floats(0.002, 0.3), st.floats(0.5, 3.0))
# a message timed out on A comes to B, A's FIN of it fails (D-12), with bad IDs and stamps among the bulk
TIMED_OUT_ELSEWHERE = [(0.001, "A", "messages", 5, 5), (2.0, "B", "messages", 5, 5), (0.001, "A", "fins", 5, 0),
                       (0.001, "B", "messages", 3, 6), (0.001, "B", "fins", 8, 0)]
steps = st.lists(st.tuples(gaps, st.sampled_from(CONSUMERS), st.sampled_from(
    ("messages", "messages", "fins", "fins", "req", "touch", "rdy", "heartbeat", "nop", "fin_failed", "publish")),
    st.integers(1, 12), st.integers(0, 40)), min_size=1, max_size=40)


def traffic(plan) -> list[tuple[str, monitors.Observed]]:
    """The events of ``plan``'s steps, in time order: each consumer identified (msg_timeout 1 s) and subscribed;
    bursts of message frames with IDs from a pool (so some come again, later attempts; a few with a bad ID or
    stamp) and of FINs of those it holds (or of others); a publisher's MPUBs."""
    ts, events = T0, [("P", _command(T0, b"MPUB", b"t", body=wire.mpub_body([b"first"])))]
    events.append(("P", _frame(T0 + 0.0001, wire.FRAME_RESPONSE, b"OK")))
    for conn in CONSUMERS:
        events += [(conn, _command(ts, b"IDENTIFY", body=json.dumps({"feature_negotiation": True,
                                                                     "msg_timeout": 1000}).encode())),
                   (conn, _frame(ts + 0.0001, wire.FRAME_RESPONSE, json.dumps(ANSWER).encode())),
                   (conn, _command(ts + 0.0002, b"SUB", b"t", b"c")),
                   (conn, _frame(ts + 0.0003, wire.FRAME_RESPONSE, b"OK")),
                   (conn, _command(ts + 0.0004, b"RDY", b"20"))]
    ts += 0.001
    held = {conn: [] for conn in CONSUMERS}
    for gap, conn, action, count, number in plan:
        ts += gap
        if action == "messages":
            for offset in range(count):
                msg_id = _id(number + offset)
                msg_id = _id(number + offset + 0xabc0).upper() if number % 13 == 5 else msg_id  # C-10 broken
                held[conn].append(msg_id)
                stamp = int((T0 - 1) * (NS if number % 13 != 6 else 1_000_000))  # C-09 broken: microseconds
                body = wire.encode_message(stamp, 1 + (number + offset) % 3, msg_id, b"body %d" % number)
                events.append((conn, _frame(ts + offset * 1e-6, wire.FRAME_MESSAGE, body)))
        elif action == "fins":
            ids = held[conn][:count] or [_id(number)]
            del held[conn][:count]
            events += [(conn, _command(ts + offset * 1e-6, b"FIN", msg_id)) for offset, msg_id in enumerate(ids)]
        elif action in ("req", "touch") and held[conn]:
            msg_id = held[conn].pop(0) if action == "req" else held[conn][0]
            params = (msg_id, b"%d" % (number * 10)) if action == "req" else (msg_id,)
            events.append((conn, _command(ts, action.upper().encode(), *params)))
        elif action == "rdy":
            events.append((conn, _command(ts, b"RDY", b"%d" % number)))
        elif action == "heartbeat":
            events.append((conn, _frame(ts, wire.FRAME_RESPONSE, wire.HEARTBEAT)))
        elif action == "nop":
            events.append((conn, _command(ts, b"NOP")))
        elif action == "fin_failed":
            events.append((conn, _frame(ts, wire.FRAME_ERROR,
                                        b"E_FIN_FAILED FIN %s failed ID not in flight" % _id(number))))
        elif action == "publish":
            bodies = [b"body %d" % (number + offset) for offset in range(count)]
            events += [("P", _command(ts, b"MPUB", b"t", body=wire.mpub_body(bodies))),
                       ("P", _frame(ts + 0.0001, wire.FRAME_RESPONSE, b"OK"))]
    return events


class Feeder:
    """Feeds a judge as a capture's analysis does: each connection's consecutive message frames, or FINs of one line
    shape and topic, no ID twice, as one run (events.Run); every other event as it comes."""

    def __init__(self, judge: monitors.Judge):
        self.judge, self.conn, self.pending, self.ids = judge, "", [], set()

    def observe(self, conn: str, event: monitors.Observed) -> None:
        bulk = event.msg_id is not None and (event.kind == MESSAGE or event.kind == COMMAND and event.name == FINS)
        if self.pending and not (bulk and conn == self.conn and event.msg_id not in self.ids and _shape(event) ==
                                 _shape(self.pending[0])):
            self.hand_over()
        if bulk:
            self.conn = conn
            self.pending.append(event)
            self.ids.add(event.msg_id)
        else:
            self.judge.observe(conn, event)

    def hand_over(self) -> None:
        """What the feeder holds goes to the judge: before anything else it is told (an HTTP request, a close)."""
        if self.pending:
            self.judge.observe_run(self.conn, Run.of(self.pending))
            self.pending, self.ids = [], set()


def _shape(event: monitors.Observed) -> tuple:
    return event.kind, event.params, event.crlf, event.topic


def judged(events, runs: bool, chosen: tuple[type[monitors.Monitor], ...] | None = None) -> monitors.Judge:
    """``events`` through a judge (of every monitor, or those ``chosen``): with ``runs``, each connection's
    consecutive message frames or FINs as runs, as a capture's analysis hands them over."""
    judge = monitors.new_judge(timing=True, http_seen=True, release=(1, 3, 0), runs=runs) if chosen is None else \
        monitors.Judge([monitor() for monitor in chosen], timing=True, http_seen=True, release=(1, 3, 0), runs=runs)
    for conn in ("P", *CONSUMERS):
        judge.open(conn, T0 - 0.001, True)
    feeder = Feeder(judge)
    for conn, event in events:
        feeder.observe(conn, event)
    feeder.hand_over()
    judge.finish(events[-1][1].ts + 5.0)
    return judge


def verdicts(judge: monitors.Judge):
    return ([violation.as_dict() for violation in judge.violations], sorted(judge.not_judged.items()), judge.failures)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps)
@example(TIMED_OUT_ELSEWHERE)
def test_runs_are_judged_as_their_events_one_by_one(plan):
    events = traffic(plan)
    assert verdicts(judged(events, runs=True)) == verdicts(judged(events, runs=False))


def ledger(judge: monitors.Judge):
    """What the judge knows of each message, and each connection's messages in flight, in their order."""
    return ([(key, astuple(delivery)) for key, delivery in judge.messages.items()],
            {name: [(msg_id, astuple(delivery)) for msg_id, delivery in connection.in_flight.items()]
             for name, connection in judge.connections.items()},
            {name: connection.last_command_at for name, connection in judge.connections.items()})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps)
@example(TIMED_OUT_ELSEWHERE)
def test_the_ledger_takes_a_run_as_its_events_one_by_one(plan):
    """Where every monitor that reads a run's events takes it whole, the judge's ledger takes it at once too."""
    events = traffic(plan)
    taking = tuple(monitor for monitor in monitors.MONITORS if monitor.RUNS)
    assert ledger(judged(events, True, taking)) == ledger(judged(events, False, taking))


def test_the_monitors_that_take_runs_are_given_them(monkeypatch):
    """The traffic above reaches every monitor that takes runs through its ``observe_run``: the equality is not
    that of two paths that both judge event by event."""
    taking = [monitor for monitor in monitors.MONITORS if monitor.RUNS]
    assert taking, "no monitor takes runs"
    called = set()
    for monitor in taking:
        def spy(self, judge, connection, run, original=monitor.observe_run):
            called.add(type(self))
            return original(self, judge, connection, run)
        monkeypatch.setattr(monitor, "observe_run", spy)
    judged(traffic([(0.001, "A", "messages", 5, 0), (0.001, "A", "fins", 5, 0)]), runs=True)
    assert called == set(taking)
