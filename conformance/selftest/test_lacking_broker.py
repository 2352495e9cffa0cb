"""A broker without topic auto-creation or DPUB (lacking.py, in front of the reference broker): judged with nsqd's
profile, its failures come grouped by cause, setup failures apart as PRECONDITION; judged with a profile that says
what it lacks (docs/examples/broker-without-autocreate.toml), the whole suite passes but for what it lacks."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.selftest.lacking import WITHOUT_AUTOCREATE_OR_DPUB
from conformance.selftest.proxy import FaultyProxy
from conformance.target import EmbeddedBroker, Profile

ROOT = Path(__file__).parents[2]
PROFILE = ROOT / "docs" / "examples" / "broker-without-autocreate.toml"
SELECTION = "test_pub or test_sub or test_dpub or test_fin_req_touch"


@pytest.fixture(scope="module")
def lacking():
    """The proxies in front of the broker's TCP and HTTP ports, as (tcp, http) addresses."""
    with EmbeddedBroker(Profile.load("nsqd-defaults")) as broker:
        tcp = FaultyProxy(broker.tcp_address, WITHOUT_AUTOCREATE_OR_DPUB).start()
        http = FaultyProxy(broker.http_address, WITHOUT_AUTOCREATE_OR_DPUB).start()
        http.info_ports = {broker.tcp_address[1]: tcp.address[1]}  # /info names the proxy's port, not the broker's
        try:
            yield tcp.address, http.address
        finally:
            tcp.stop()
            http.stop()


def run(addresses, reports: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    tcp, http = addresses
    completed = subprocess.run(
        [sys.executable, "-m", "conformance", "--target", "%s:%d" % tcp, "--http-target", "%s:%d" % http,
         "--workers", "4", "--reports-dir", str(reports), *extra], capture_output=True, text=True, timeout=300,
        cwd=ROOT)
    return completed, json.loads((reports / "report.json").read_text())


def test_judged_as_nsqd_its_failures_come_grouped_by_cause(lacking, tmp_path):
    completed, report = run(lacking, tmp_path, "--", "-k", SELECTION)
    causes = {group["cause"]: group for group in report["summary"]["causes"]}
    largest = max(report["summary"]["causes"], key=lambda group: len(group["cases"]))
    assert largest["cause"] in ("SUB does not create topics (E_TOPIC_NOT_EXIST)",
                                "PUB does not create topics (E_TOPIC_NOT_EXIST)")
    assert set(causes["SUB does not create topics (E_TOPIC_NOT_EXIST)"]["verdicts"]) >= {"PRECONDITION", "FAIL"}
    assert "E_INVALID on DPUB" in causes
    # what to fix first at the top: the causes by level (a MUST broken before a SHOULD), then by count
    ranks = [("MUST", "MAY", "SHOULD").index(group["level"]) for group in report["summary"]["causes"]]
    assert ranks == sorted(ranks)
    # a DPUB case whose SUB fails first could not test DPUB: PRECONDITION, not a FAIL of NSQ-DPUB
    dpub = [case for case in report["cases"] if "test_dpub.py" in case["id"]]
    assert any(case["verdict"] == "PRECONDITION" and "setup step SUB failed" in case["message"] for case in dpub)
    # the totals are the broker's; the embedded nsqlookupd's cases (none selected here) would be apart
    assert list(report["summary"]["targets"]) == ["nsqd %s:%d" % lacking[0]]
    assert "failures by cause" in completed.stdout and "SUB does not create topics" in completed.stdout
    assert completed.returncode == 1


def test_judged_with_a_profile_that_says_what_it_lacks_it_passes(lacking, tmp_path):
    completed, report = run(lacking, tmp_path, "--profile", str(PROFILE))
    broker = report["summary"]["targets"]["nsqd %s:%d" % lacking[0]]
    lookupd = report["summary"]["targets"]["embedded reference nsqlookupd"]
    assert report["summary"]["counts"] == broker  # the broker's totals hold none of the nsqlookupd's cases
    assert lookupd["PASS"] > 0 and lookupd["FAIL"] == lookupd["PRECONDITION"] == lookupd["ERROR"] == 0
    assert broker["FAIL"] == broker["PRECONDITION"] == broker["ERROR"] == 0
    unsupported = {case["id"]: case["message"] for case in report["cases"] if case["verdict"] == "UNSUPPORTED"}
    dpub_cases = [case_id for case_id in unsupported if "test_dpub.py" in case_id]
    assert dpub_cases and all("has no DPUB" in unsupported[case_id] for case_id in dpub_cases)
    assert "profile broker-without-autocreate says the target does not offer topic_autocreate" in \
        unsupported["cases/test_pub.py::test_failed_pub_does_not_create_topic"]
    # the two NON-STRICT: the broker behind the proxy registers its own ports with nsqlookupd, as it should
    assert sorted(case["id"] for case in report["cases"] if case["verdict"] == "NON-STRICT") == [
        "cases/test_registration.py::test_a_real_nsqlookupd_lists_the_broker",
        "cases/test_registration.py::test_the_broker_identifies_itself"]
    assert completed.returncode == 0
