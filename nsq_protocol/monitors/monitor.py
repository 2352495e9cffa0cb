"""A monitor: one behaviour of the catalogue, judged from the traffic. It says which items it judges (``ITEMS``),
reports a ``Violation`` with the side that broke it and the events that show it, and records, rather than
guesses, what it could not judge and why."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from nsq_protocol.monitors.events import EVERY_KIND, Observed, Run


@dataclass(frozen=True)
class Violation:
    item: str  # the catalogue's behaviour ID
    side: str  # BROKER or CLIENT: who broke it
    ts: float
    connection: str
    expected: str
    observed: str
    evidence: tuple[str, ...]  # the events that show it, described

    def describe(self) -> str:
        return (f"{self.item} broken by the {self.side} on {self.connection}: expected {self.expected}; "
                f"observed {self.observed}")

    def as_dict(self) -> dict:
        return {"item": self.item, "side": self.side, "ts": self.ts, "connection": self.connection,
                "expected": self.expected, "observed": self.observed, "evidence": list(self.evidence)}


class Monitor:
    """The hooks a judge calls (judge.py); a monitor overrides those it needs. ``due`` is the earliest time at which
    it wants ``tick``: a rule about something that must have happened by then. ``KINDS``: the kinds of event its
    ``observe`` reads (events.py); the judge hands it no others, which matters over the millions of a capture.
    ``RUNS``: the runs (events.Run's keys) it takes whole in ``observe_run`` rather than event by event."""

    ITEMS: tuple[str, ...] = ()
    KINDS: frozenset[str] = EVERY_KIND
    RUNS: frozenset[str] = frozenset()
    due: float = float("inf")

    def __init__(self) -> None:
        self.violations: list[Violation] = []
        self.not_judged: Counter = Counter()  # (item, why) -> how many times

    def report(self, item: str, side: str, ts: float, connection: str, expected: str, observed: str,
               *evidence: Observed) -> None:
        self.violations.append(Violation(item, side, ts, _printable(connection), _printable(expected),
                                         _printable(observed),
                                         tuple(_printable(event.describe()) for event in evidence)))

    def skip(self, item: str, why: str, times: int = 1) -> None:
        self.not_judged[item, why] += times

    def observe(self, judge, connection, event: Observed, answered: Observed | None) -> None:
        """``event`` on ``connection``; ``answered``: the command a response or error frame answers (C-13)."""

    def observe_run(self, judge, connection, run: Run) -> None:
        """``run``'s events on ``connection``, judged exactly as ``observe`` would judge them one by one. It comes
        before the judge's ledger takes any of them (``judge.messages``, ``connection.in_flight`` are as before the
        run's first event) and before the monitors that take them one by one. Where its ``due`` falls within the run,
        the judge ticks it there, among the run's events, and its ``tick`` judges what the run held after then."""

    def closed(self, judge, connection) -> None:
        """``connection`` ended (``closed_at``, ``closed_by``)."""

    def http(self, judge, action) -> None:
        """An HTTP request to the broker that changes delivery (judge.HttpAction)."""

    def http_exchange(self, judge, exchange) -> None:
        """Any HTTP request to the broker and its answer (nsq_protocol.http.HttpExchange)."""

    def tls_record(self, judge, connection, ts: float, sender: str, record) -> None:
        """A plaintext record of ``connection``'s TLS handshake (nsq_protocol.tls_records.Record) from ``sender``."""

    def lookupd_query(self, judge, lookupd: str, ts: float, exchange) -> None:
        """The client's query of an nsqlookupd (judge.lookupd_query): the HttpExchange, None where it was down."""

    def nsqd_changed(self, judge, nsqd: str, change) -> None:
        """nsqlookupd's judge: a topic or channel of a registering nsqd changed (nsqd_names.NameChange)."""

    def tick(self, judge, now: float) -> None:
        """``now`` passed ``due``."""

    def finish(self, judge, now: float) -> None:
        """The traffic ends at ``now``; connections still open stay so."""

    def forget(self, judge, now: float) -> None:
        """The judge lets go of the messages no longer in flight (judge.MESSAGES_KEPT: its memory stays bounded
        whatever the traffic's length): what this monitor keeps per message or body goes too, and its rules say
        "not judged" (``LET_GO``) where they would have needed it."""


class Judging:
    """What every judge (nsqd's ``Judge``, nsqlookupd's ``LookupdJudge``) keeps of its monitors: those still judging,
    those that failed, and what they found."""

    def __init__(self, monitors: list[Monitor]):
        self.monitors = monitors
        self._active = list(monitors)  # all but those that failed
        self.failures: list[str] = []  # "<monitor>: <exception>", of the monitors that failed on this traffic

    @property
    def violations(self) -> list[Violation]:
        return sorted((v for monitor in self.monitors for v in monitor.violations), key=lambda v: v.ts)

    @property
    def not_judged(self) -> dict[tuple[str, str], int]:
        counts: dict[tuple[str, str], int] = {}
        for monitor in self.monitors:
            for key, count in monitor.not_judged.items():
                counts[key] = counts.get(key, 0) + count
        return counts

    def _failed(self, monitor: Monitor, exc: Exception) -> None:
        """A monitor that failed stops judging and says so for each of its items; the others go on, and whoever
        runs the judge shows ``failures`` (the suite as its own error, a capture's analysis as an error row)."""
        if monitor not in self._active:
            return
        self._active = [active for active in self._active if active is not monitor]
        monitor.due = float("inf")
        failure = f"{type(monitor).__name__}: {exc!r}"[:300]
        self.failures.append(failure)
        for item in monitor.ITEMS:
            monitor.skip(item, f"its monitor failed ({failure})")


def _printable(text: str) -> str:
    """``text`` as valid UTF-8: a broker's bytes that were not (an ID, an error text) are shown replaced."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
