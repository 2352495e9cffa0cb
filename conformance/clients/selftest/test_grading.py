"""The monitors' findings in a case's verdict (judge.graded): a client-side rule broken counts at its item's level,
a rule the fake nsqd broke or a monitor that raised is the harness's ERROR, and a case that could not judge the client
keeps its verdict."""
from conformance.clients.judge import graded
from conformance.clients.monitoring import Findings
from conformance.verdicts import ERROR, FAIL, NON_STRICT, PASS, UNSUPPORTED
from nsq_protocol.monitors import BROKER, CLIENT, Violation


def _found(item: str, side: str = CLIENT) -> Violation:
    return Violation(item, side, 0.0, "A", "expected", "observed", ())


def test_a_finding_counts_at_its_items_level():
    assert graded(PASS, "", Findings([], [], [])) == (PASS, "")
    verdict, message = graded(PASS, "", Findings([_found("NSQC-CLS-001")], [], []))
    assert verdict == NON_STRICT and message.startswith("monitor: NSQC-CLS-001 [SHOULD]")
    assert graded(NON_STRICT, "the case's own", Findings([_found("NSQC-HB-001")], [], []))[0] == FAIL
    assert graded(FAIL, "", Findings([_found("NSQC-CLS-001")], [], []))[0] == FAIL
    assert graded(PASS, "", Findings([], [_found("NSQC-CLS-001")], []))[0] == PASS, "declared by the case"


def test_the_fake_nsqds_finding_is_an_error_and_an_unjudged_case_keeps_its_verdict():
    verdict, message = graded(PASS, "", Findings([], [], [_found("C-10", BROKER)]))
    assert verdict == ERROR and "the fake nsqd broke C-10" in message
    assert graded(UNSUPPORTED, "lacks it", Findings([_found("NSQC-HB-001")], [], [])) == (UNSUPPORTED, "lacks it")


def test_a_monitor_that_raised_is_an_error_whatever_else_was_found():
    failed = Findings([_found("NSQC-CLS-001")], [], [], ["ClientSettles: TypeError('x')"])
    for verdict in (PASS, FAIL, UNSUPPORTED):
        assert graded(verdict, "the case's own", failed) == (
            ERROR, "a monitor raised on the case's traffic (the toolkit's own bug): ClientSettles: TypeError('x')\n"
                   "the case's own")
