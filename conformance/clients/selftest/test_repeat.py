"""--repeat's judgement of stability: a case whose verdict differs in one run of several is reported, with the
verdict of every run; a case absent from a run counts as changed."""
from conformance.clients.repeat import changes


def test_a_verdict_that_flips_once_is_reported_with_every_run():
    runs = [{"gnsq": {"NSQC-RDY-004": "PASS", "NSQC-HB-001": "PASS"}},
            {"gnsq": {"NSQC-RDY-004": "FAIL", "NSQC-HB-001": "PASS"}},
            {"gnsq": {"NSQC-RDY-004": "PASS", "NSQC-HB-001": "PASS"}}]
    assert changes(runs) == {"gnsq": {"NSQC-RDY-004": ["PASS", "FAIL", "PASS"]}}


def test_same_verdicts_are_stable_and_a_missing_case_is_not():
    same = {"pynsq": {"NSQC-CLS-001": "NON-STRICT"}}
    assert changes([same, same]) == {}
    assert changes([same, {"pynsq": {}}]) == {"pynsq": {"NSQC-CLS-001": ["NON-STRICT", "-"]}}
