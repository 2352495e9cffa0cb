"""The verdicts a case gets, and the cause that groups failures across cases: many failures of a broker under test
come from a few causes (it does not create topics on PUB, it has no DPUB), and a report that says "PUB does not create
topics (E_TOPIC_NOT_EXIST): 67 cases" is read; one that lists 67 failures is not. A difference's level is the strongest
of the behaviour items its check judges."""

from __future__ import annotations

import re

from conformance.spec import behaviours

PASS, FAIL, NON_STRICT, PRECONDITION = "PASS", "FAIL", "NON-STRICT", "PRECONDITION"
UNSUPPORTED, NOT_RUN, ERROR = "UNSUPPORTED", "NOT RUN", "ERROR"
VERDICTS = (PASS, FAIL, NON_STRICT, PRECONDITION, UNSUPPORTED, NOT_RUN, ERROR)
FAILING = (FAIL, PRECONDITION, ERROR)  # the gate fails on these unless the baseline lists the case
TARGET_DIED = "the target died"
MONITOR_RAISED = "a monitor raised on the case's traffic (the toolkit's own bug)"  # an ERROR in both suites
LEVEL_ORDER = ("MUST", "MAY", "SHOULD")  # strongest first: a broken MUST, or a MAY capability offered but wrong, FAILs

_CASE_TOPIC = re.compile(r"(?:cf|lk)\d+-\d+-\d+-[A-Za-z0-9_.#-]*")  # case.NAME_PREFIX and the rest of the name
_MESSAGE_ID = re.compile(r"\b[0-9a-fA-F]{16}\b")
_VERSION = re.compile(r"\bv?\d+\.\d+\.\d+[\w.+-]*")
_DECIMAL = re.compile(r"\d+\.\d+")
_PORT = re.compile(r"\b(127\.0\.0\.1|localhost|\[::1\]):\d+")


def items_of(judges: str) -> tuple[str, ...]:
    """``"C-08, C-23"`` -> ``("C-08", "C-23")``: the behaviour items a check judges, written as a requirement's
    ``source`` is."""
    return tuple(part.strip() for part in judges.split(",") if part.strip())


def level_of(judges: str, otherwise: str) -> str:
    """The strongest level among the items a check judges; ``otherwise`` for a check that names none."""
    levels = [behaviours()[item].level for item in items_of(judges)]
    return min(levels, key=LEVEL_ORDER.index) if levels else otherwise


def verdict_of(level: str, strict: bool) -> str:
    """A difference's verdict: a SHOULD is NON-STRICT (FAIL under --strict), anything stronger FAIL."""
    return NON_STRICT if level == "SHOULD" and not strict else FAIL


def masked(text: str) -> str:
    """What differs from case to case taken out: topic names, message IDs, measured seconds, ports."""
    text = _CASE_TOPIC.sub("<topic>", text)
    text = _MESSAGE_ID.sub("<id>", text)
    text = _PORT.sub(r"\1:<port>", text)
    text = _VERSION.sub("<version>", text)
    return _DECIMAL.sub("<n>", text)


def cause_of(error: BaseException | None, message: str) -> str:
    """The first unexpected thing the broker did, as a group key: a Mismatch's or a failed setup step's own cause
    ("E_TOPIC_NOT_EXIST on PUB"), else its requirement and actual value, masked; else the message's first line."""
    cause = getattr(error, "cause", None)
    if cause:
        return masked(cause)
    what, actual = getattr(error, "what", None), getattr(error, "actual", None)
    if what is not None:
        return masked(f"{what}: {actual}")
    first = message.strip().splitlines()[0] if message.strip() else (type(error).__name__ if error else "")
    return masked(first)
