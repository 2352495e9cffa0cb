"""How a case's outcome becomes a verdict: the broker suite's names (conformance.verdicts), a client's reasons."""
from __future__ import annotations

from conformance.spec import behaviours
from conformance.verdicts import ERROR, FAIL, MONITOR_RAISED, NON_STRICT, PASS, UNSUPPORTED
from nsq_protocol.wire import ProtocolViolation

MUST, SHOULD, MAY = "MUST", "SHOULD", "MAY"


class ClientFault(AssertionError):
    """The client did what a conformant client does not, or did not do in time what it must."""

    def __init__(self, what: str, expected: str, actual: str):
        super().__init__(f"{what}\n  expected: {expected}\n  actual:   {actual}")
        self.what, self.expected, self.actual = what, expected, actual


class Unsupported(Exception):
    """The library lacks the feature the case needs (its driver's manifest says so)."""


class HarnessError(Exception):
    """The toolkit's side failed: a driver that does not start, a port that does not bind."""


def verdict_of(level: str, error: BaseException | None) -> tuple[str, str]:
    """A case's verdict and message: a fault against a MUST is a FAIL, against a SHOULD a NON-STRICT; a MAY is a
    feature the library may lack (UNSUPPORTED when it does), judged as a MUST when it has it. A frame the client
    sent that cannot be decoded is a FAIL whatever the level: nsqd closes the connection on it."""
    if error is None:
        return PASS, ""
    if isinstance(error, Unsupported):
        return UNSUPPORTED, str(error)
    if isinstance(error, ProtocolViolation):  # the client's frame, not the harness: nsqd refuses it (C-18, P-MPUB-02)
        return FAIL, f"a malformed frame from the client: {error}"
    if isinstance(error, AssertionError):
        return (NON_STRICT if level == SHOULD else FAIL), str(error)
    return ERROR, f"{type(error).__name__}: {error}"


def graded(verdict: str, message: str, findings) -> tuple[str, str]:
    """The case's verdict with what the monitors found in its traffic (conformance/clients/monitoring.py): a rule the
    fake nsqd broke is the harness's bug, an ERROR; a client-side rule broken counts as the case's own difference at
    the rule's level (a MUST, or a MAY the client uses, FAILs; a SHOULD is NON-STRICT). A case that could not judge
    the client (UNSUPPORTED, ERROR) keeps its verdict. A monitor that raised is the toolkit's bug: an ERROR too,
    never a rule quietly not judged."""
    if findings.failures:
        return ERROR, "\n".join([*(f"{MONITOR_RAISED}: {failure}"
                                   for failure in findings.failures), message]).strip()
    if findings.broker:
        return ERROR, "\n".join([*(f"the fake nsqd broke {violation.describe()} (the harness's bug, not the client's)"
                                   for violation in findings.broker), message]).strip()
    if verdict in (UNSUPPORTED, ERROR) or not findings.client:
        return verdict, message
    found = [FAIL if behaviours()[violation.item].level != SHOULD else NON_STRICT for violation in findings.client]
    worst = FAIL if FAIL in (verdict, *found) else NON_STRICT
    lines = [f"monitor: {violation.item} [{behaviours()[violation.item].level}] {violation.describe()}"
             for violation in findings.client]
    return worst, "\n".join([message, *lines]).strip()


def check(holds: bool, what: str, expected: str, actual: str) -> None:
    """The case's judgement of one thing the client did: a ClientFault when it does not hold."""
    if not holds:
        raise ClientFault(what, expected, actual)
