"""The suite catches bugs: run it through a faulty proxy and see the right cases fail (issue 3, done-when 3).

Each run spawns the reference broker (as a subprocess, like the suite does), puts a ``FaultyProxy`` in
front of its TCP port and runs a few cases through ``python -m conformance``.
"""

import json
import re
import shlex
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from conformance.selftest import amnesiac
from conformance.selftest.faults import Fault
from conformance.selftest.proxy import FaultyProxy
from conformance.target import (
    EmbeddedBroker,
    EmbeddedLookupd,
    Profile,
    free_loopback_address,
    parse_address,
    restart_with_command,
)
from nsq_protocol import wire

REDELIVERY = "cases/test_framing.py::test_redelivery_keeps_id_and_timestamp"
FATAL_CLOSE = "cases/test_syntax.py::test_unknown_command_is_fatal"
UNAFFECTED = "cases/test_magic.py::test_magic_then_pipelined_commands"
STATS_COUNTERS = "cases/test_http.py::test_stats_counters"
SELECTION = "redelivery_keeps_id or unknown_command_is_fatal or magic_then_pipelined"


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(Profile.load("nsqd-defaults")) as running:
        yield running


def run_suite(broker, fault, reports: Path, *extra, selection: str = SELECTION) -> tuple[int, dict]:
    proxy = FaultyProxy(broker.tcp_address, fault).start()
    try:
        completed = subprocess.run(
            [sys.executable, "-m", "conformance", "--target", "%s:%d" % proxy.address,
             "--http-target", "%s:%d" % broker.http_address, "--workers", "0", "--reports-dir", str(reports),
             *extra, "--", "-k", selection, "-q"],
            capture_output=True, text=True, timeout=120, cwd=Path(__file__).parents[2])
    finally:
        proxy.stop()
    report = json.loads((reports / "report.json").read_text())
    return completed.returncode, {case["id"]: case for case in report["cases"]}


def test_faithful_proxy_passes(broker, tmp_path):
    code, cases = run_suite(broker, "none", tmp_path)
    assert {case_id: case["verdict"] for case_id, case in cases.items()} == {
        REDELIVERY: "PASS", FATAL_CLOSE: "PASS", UNAFFECTED: "PASS"}
    assert code == 0


def test_stuck_attempts_fail_the_redelivery_case(broker, tmp_path):
    code, cases = run_suite(broker, "attempts-stuck", tmp_path)
    assert cases[REDELIVERY]["verdict"] == "FAIL"
    assert "message attempts (C-12)" in cases[REDELIVERY]["message"]
    assert cases[FATAL_CLOSE]["verdict"] == "PASS"
    assert cases[UNAFFECTED]["verdict"] == "PASS"
    assert code == 1
    pcap = Path(cases[REDELIVERY]["pcap"])
    assert pcap.read_bytes()[:4] == b"\xd4\xc3\xb2\xa1"  # a little-endian pcap Wireshark opens


def test_a_case_that_does_not_check_the_identify_answer_fails_by_the_monitor_that_does(broker, tmp_path):
    """Every case's transcript goes through the catalogue's monitors (conformance/monitoring.py): a /stats case
    that negotiates features fails when the answer lacks a field, naming the item and the monitor's finding."""
    counters = "cases/test_http.py::test_client_counters_add_up"
    code, cases = run_suite(broker, "identify-answer-without-max-msg-timeout", tmp_path,
                            selection="client_counters_add_up")
    assert cases[counters]["verdict"] == "FAIL"
    assert "[MUST ID-20] monitor ID-20 on connection A" in cases[counters]["message"]
    assert "max_msg_timeout missing" in cases[counters]["message"]
    assert [finding["item"] for finding in cases[counters]["monitors"]] == ["ID-20"]
    assert code == 1
    code, cases = run_suite(broker, "none", tmp_path / "faithful", selection="client_counters_add_up")
    assert cases[counters]["verdict"] == "PASS" and cases[counters]["monitors"] == [] and code == 0


def test_missing_close_fails_the_fatal_error_case(broker, tmp_path):
    code, cases = run_suite(broker, "no-close-after-fatal", tmp_path)
    assert cases[FATAL_CLOSE]["verdict"] == "FAIL"
    assert "[MUST C-23] a fatal error is followed by a close" in cases[FATAL_CLOSE]["message"]
    assert cases[REDELIVERY]["verdict"] == "PASS"
    assert code == 1


def test_a_reworded_error_is_non_strict_and_a_fail_under_strict(broker, tmp_path):
    """A soft mismatch raises nothing: under --strict the FAIL must still be reported, not end the run in an
    INTERNALERROR (found against the nsqd v1.3.0 tag, whose lookupd IDENTIFY lacks the topology pair)."""
    code, cases = run_suite(broker, "error-reworded", tmp_path / "lenient")
    assert cases[FATAL_CLOSE]["verdict"] == "NON-STRICT" and code == 0
    code, cases = run_suite(broker, "error-reworded", tmp_path / "strict", "--strict")
    assert cases[FATAL_CLOSE]["verdict"] == "FAIL" and code == 1
    assert "error text as nsqd words it" in cases[FATAL_CLOSE]["message"]
    junit = (tmp_path / "strict" / "junit.xml").read_text()
    assert "<failure" in junit and "reworded:" in junit


def test_baseline_accepts_the_known_failure(broker, tmp_path):
    baseline = tmp_path / "baseline.txt"
    baseline.write_text(f"{FATAL_CLOSE}  # the proxy keeps connections open\n")
    code, cases = run_suite(broker, "no-close-after-fatal", tmp_path / "reports", "--baseline", str(baseline))
    assert cases[FATAL_CLOSE]["verdict"] == "FAIL" and cases[FATAL_CLOSE]["baseline"]
    assert code == 0


def test_a_missing_json_field_is_a_difference_naming_it_not_an_error(broker, tmp_path):
    """Issue 11 item 6: the broker's answer lacks a field a case reads; here client_count, which nsqd's /stats has
    since 1.2.0: a difference that names the field and the release whose answer it is (issue 34), a failure under
    --strict, never an ERROR."""
    proxy = FaultyProxy(broker.http_address, "stats-without-client-count").start()
    try:
        completed = subprocess.run(
            [sys.executable, "-m", "conformance", "--target", "%s:%d" % broker.tcp_address,
             "--http-target", "%s:%d" % proxy.address, "--workers", "0", "--reports-dir", str(tmp_path),
             "--", "-k", "test_stats_counters", "-q"],
            capture_output=True, text=True, timeout=120, cwd=Path(__file__).parents[2])
    finally:
        proxy.stop()
    case = {c["id"]: c for c in json.loads((tmp_path / "report.json").read_text())["cases"]}[STATS_COUNTERS]
    assert case["verdict"] == "NON-STRICT", case
    assert case["message"].startswith("behaves as nsqd v1.1.0"), case["message"]
    assert "'client_count'" in case["message"] and "Error" not in case["message"], case["message"]
    assert completed.returncode == 0  # not --strict


def run_through(broker, fault: str, reports: Path, selection: str, *extra) -> dict:
    """The cases of ``selection`` through a FaultyProxy on the broker's TCP and HTTP ports: their report entries."""
    proxies = [FaultyProxy(address, fault).start() for address in (broker.tcp_address, broker.http_address)]
    try:
        subprocess.run(
            [sys.executable, "-m", "conformance", "--target", "%s:%d" % proxies[0].address,
             "--http-target", "%s:%d" % proxies[1].address, "--workers", "0", "--reports-dir", str(reports), *extra,
             "--", "-k", selection, "-q"], capture_output=True, text=True, timeout=120, cwd=Path(__file__).parents[2])
    finally:
        for proxy in proxies:
            proxy.stop()
    return {case["id"]: case for case in json.loads((reports / "report.json").read_text())["cases"]}


def test_a_broken_must_item_fails_a_should_requirements_case(broker, tmp_path):
    """Issue 34 item 2: the verdict takes the level of the item broken, not of the case's requirement (both SHOULD
    here): /pub?topic=%zz answered 404 breaks H-07 (MUST; the HTTP monitor names /pub's own H-PUB-03 too), an
    E_BAD_BODY for a half-closed PUB body C-08 (MUST)."""
    cases = run_through(broker, "bad-query-as-not-found", tmp_path / "query", "query_string_rules")
    case = cases["cases/test_http.py::test_query_string_rules_and_removed_endpoints"]
    assert case["verdict"] == "FAIL" and case["broken"] == ["H-07 MUST", "H-PUB-03 MUST"], case
    assert case["message"].startswith("[MUST H-07] HTTP status"), case["message"]
    cases = run_through(broker, "bad-message-as-bad-body", tmp_path / "body", "half_close_inside_a_body")
    case = cases["cases/test_pub.py::test_half_close_inside_a_body[pub-body]"]
    assert case["verdict"] == "FAIL" and case["broken"] == ["C-08 MUST"], case
    assert "after PUB" in case["message"] and "E_BAD_BODY" in case["message"], case["message"]
    assert cases["cases/test_pub.py::test_half_close_inside_a_body[identify-body]"]["verdict"] == "PASS"


def test_an_nsqlookupd_that_keeps_connections_open_after_errors_fails_the_v1_error_case(tmp_path):
    """The lookupd section catches its own fault: the proxy in front of nsqlookupd's TCP port keeps the client
    side open after the lookupd closed on an error (breaks L-TCP-21, NSQLOOKUPD-V1-004)."""
    case_id = "cases/test_lookupd_v1.py::test_command_errors_are_fatal[unknown]"
    with EmbeddedLookupd() as lookupd:
        proxy = FaultyProxy(lookupd.tcp_address, "no-close-after-fatal").start()
        try:
            completed = subprocess.run(
                [sys.executable, "-m", "conformance", "--lookupd-target", "%s:%d" % proxy.address,
                 "--lookupd-http-target", "%s:%d" % lookupd.http_address, "--workers", "0",
                 "--reports-dir", str(tmp_path), "--", "-k", "command_errors_are_fatal and unknown", "-q"],
                capture_output=True, text=True, timeout=120, cwd=Path(__file__).parents[2])
        finally:
            proxy.stop()
    case = {c["id"]: c for c in json.loads((tmp_path / "report.json").read_text())["cases"]}[case_id]
    assert case["verdict"] == "FAIL", case
    assert "the connection closes after the error (L-TCP-21)" in case["message"], case["message"]
    assert completed.returncode == 1


def _lookupd_without_debug_and_tombstone(request, session):
    if request.path in ("/debug", "/topic/tombstone"):
        return (b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 9\r\nConnection: close\r\n"
                b"\r\nnot found")
    return None


FOREIGN_LOOKUPD = Fault(  # not in the catalogue: a broker like the foreign nsqlookupd of issue 34
    "foreign-lookupd", "http", "no /debug, no /topic/tombstone, /lookup producers without the topology pair",
    "GET /debug 404; /lookup producers lack topology_region and topology_zone", ("NSQLOOKUPD-V1-009",),
    request=_lookupd_without_debug_and_tombstone,
    response=lambda head, body, session: (head, re.sub(rb',"topology_(region|zone)":"[^"]*"', b"", body)))


def test_a_case_reports_every_difference_strongest_first(tmp_path):
    """Issue 34 item 2: NSQLOOKUPD-V1-009 against an nsqlookupd without /topic/tombstone (L-HTTP-12, MUST) and /debug
    (L-HTTP-13, SHOULD): the case goes on past each and lists them all, the MUST first. Issue 34 item 3: the
    topology pair its /lookup leaves out (what the v1.3.0 tag does) is master's (L-HTTP-19): not judged as v1.3.0,
    where its case is UNSUPPORTED saying so, never PASS; a named SHOULD, NON-STRICT, with --nsq-version master."""
    case_id = "cases/test_lookupd_producers.py::test_answers_name_only_the_topic_asked_about"
    with EmbeddedLookupd() as lookupd:
        proxy = FaultyProxy(lookupd.http_address, FOREIGN_LOOKUPD).start()
        try:
            _, cases, _ = run_cases(tmp_path, "--lookupd-target", "%s:%d" % lookupd.tcp_address,
                                    "--lookupd-http-target", "%s:%d" % proxy.address,
                                    selection="answers_name_only_the_topic_asked_about")
        finally:
            proxy.stop()
    case = cases[case_id]
    assert case["verdict"] == "FAIL" and case["level"] == "MUST" and case["cause_items"] == ["L-HTTP-12"], case
    headlines = [line for line in case["message"].splitlines() if line.startswith("[")]
    assert headlines[0].startswith("[MUST L-HTTP-12] POST /topic/tombstone"), headlines
    assert any(line.startswith("[SHOULD L-HTTP-13] the HTTP body is JSON") for line in headlines), headlines
    assert not any("topology" in line for line in headlines), headlines
    assert case["broken"][0] == "L-HTTP-12 MUST" and "L-HTTP-13 SHOULD" in case["broken"], case["broken"]
    only_topology = replace(FOREIGN_LOOKUPD, request=None)
    topology_id = "cases/test_lookupd_producers.py::test_names_each_producers_topology"
    verdicts = {}
    with EmbeddedLookupd() as lookupd:
        proxy = FaultyProxy(lookupd.http_address, only_topology).start()
        try:
            for version in ("1.3.0", "master"):
                _, cases, report = run_cases(
                    tmp_path / version, "--lookupd-target", "%s:%d" % lookupd.tcp_address, "--lookupd-http-target",
                    "%s:%d" % proxy.address, "--nsq-version", version,
                    selection="answers_name_only_the_topic_asked_about or names_each_producers_topology")
                verdicts[version] = (cases[case_id]["verdict"], cases[topology_id], report["nsq_version"])
        finally:
            proxy.stop()
    assert verdicts["1.3.0"][0] == verdicts["master"][0] == "PASS", verdicts
    tag, master = verdicts["1.3.0"][1], verdicts["master"][1]
    assert tag["verdict"] == "UNSUPPORTED" and tag["message"].startswith("not in nsqd v1.3.0: L-HTTP-19"), tag
    assert master["verdict"] == "NON-STRICT" and master["broken"] == ["L-HTTP-19 SHOULD"], master
    assert (verdicts["1.3.0"][2], verdicts["master"][2]) == ("1.3.0", "master")


def run_cases(reports: Path, *options: str, selection: str) -> tuple[int, dict, dict]:
    """python -m conformance with these options and a -k selection: exit code, cases by id, the report."""
    completed = subprocess.run(
        [sys.executable, "-m", "conformance", "--workers", "0", "--reports-dir", str(reports), *options,
         "--", "-k", selection, "-q"],
        capture_output=True, text=True, timeout=180, cwd=Path(__file__).parents[2])
    report = json.loads((reports / "report.json").read_text())
    return completed.returncode, {case["id"]: case for case in report["cases"]}, report


def test_a_broker_that_says_no_tls_but_upgrades_fails_the_tls_upgrade_case(tmp_path):
    """The TLS section catches its fault: the IDENTIFY response hides tls_v1 (breaks T-01, NSQ-TLS-002)."""
    case_id = "cases/test_tls.py::test_tls_then_snappy_inside_it"
    with EmbeddedBroker(Profile.load("nsqd-tls")) as broker:
        proxy = FaultyProxy(broker.tcp_address, "tls-not-offered").start()
        try:
            code, cases, _ = run_cases(tmp_path, "--target", "%s:%d" % proxy.address, "--http-target",
                                       "%s:%d" % broker.http_address, "--profile", "nsqd-tls",
                                       selection="tls_then_snappy or does_not_ask")
        finally:
            proxy.stop()
    # the client, told no TLS, waits for the OK the broker would send after a handshake that never starts
    assert cases[case_id]["verdict"] == "FAIL", cases[case_id]
    # the silence names the command sent and the answer expected (issue 34 item 2)
    assert "RESPONSE OK after IDENTIFY" in cases[case_id]["message"], cases[case_id]["message"]
    assert cases["cases/test_tls.py::test_a_client_that_does_not_ask_stays_plaintext"]["verdict"] == "PASS"
    assert code == 1


def test_a_broker_that_ignores_its_new_lookupd_address_fails_the_registration_cases(broker, tmp_path):
    """The registration section catches its fault: PUT /config/nsqlookupd_tcp_addresses answered but without
    effect (breaks R-11, NSQ-REG-001)."""
    case_id = "cases/test_registration.py::test_the_broker_identifies_itself"
    proxy = FaultyProxy(broker.http_address, "lookupd-config-ignored").start()
    try:
        code, cases, _ = run_cases(tmp_path, "--target", "%s:%d" % broker.tcp_address, "--http-target",
                                   "%s:%d" % proxy.address, selection="broker_identifies_itself")
    finally:
        proxy.stop()
    assert cases[case_id]["verdict"] == "FAIL", cases[case_id]
    assert code == 1


def test_a_broker_that_forgets_its_queues_on_restart_fails_the_restart_cases(tmp_path):
    """The restart section catches its fault: a restart that comes back with an empty data path (breaks P-RST-01,
    NSQ-RST-001), given as --restart-command (conformance/selftest/amnesiac.py)."""
    case_id = "cases/test_restart.py::test_queued_messages_survive_a_restart"
    pidfile, addresses = tmp_path / "broker.pid", [free_loopback_address(), free_loopback_address()]
    command = shlex.join([sys.executable, "-m", "conformance.selftest.amnesiac", str(pidfile),
                          str(tmp_path / "data"), *addresses])
    restart_with_command(command, [parse_address(address, "broker") for address in addresses])
    try:
        code, cases, _ = run_cases(tmp_path / "reports", "--target", addresses[0], "--http-target", addresses[1],
                                   "--restart-command", command, selection="queued_messages_survive")
    finally:
        amnesiac.stop(pidfile)
    assert cases[case_id]["verdict"] == "FAIL", cases[case_id]
    assert code == 1


def test_compare_with_the_same_broker_finds_no_difference(broker, tmp_path):
    """Differential mode: the reference broker against itself (through a faithful proxy) differs nowhere."""
    proxy = FaultyProxy(broker.tcp_address, "none").start()
    try:
        code, cases, report = run_cases(tmp_path, "--target", "%s:%d" % broker.tcp_address, "--http-target",
                                        "%s:%d" % broker.http_address, "--compare", "%s:%d" % proxy.address,
                                        "--compare-http", "%s:%d" % broker.http_address,
                                        selection=SELECTION + " or stats_counters")
    finally:
        proxy.stop()
    compared = report["summary"]["compare"]
    assert (compared["same"], compared["different"]) == (4, []), [case["compare"] for case in cases.values()]
    assert code == 0


def test_compare_names_the_case_where_a_faulty_broker_differs(broker, tmp_path):
    """Differential mode: against the attempts-stuck proxy, the redelivery case differs (attempts 2 vs 1) and the
    exit status is 3 though every case passes on the target."""
    proxy = FaultyProxy(broker.tcp_address, "attempts-stuck").start()
    try:
        code, cases, report = run_cases(tmp_path, "--target", "%s:%d" % broker.tcp_address, "--http-target",
                                        "%s:%d" % broker.http_address, "--compare", "%s:%d" % proxy.address,
                                        "--compare-http", "%s:%d" % broker.http_address, selection=SELECTION)
    finally:
        proxy.stop()
    assert report["summary"]["compare"]["different"] == [REDELIVERY]
    compared = cases[REDELIVERY]["compare"]
    assert compared["verdict"] == "FAIL" and cases[REDELIVERY]["verdict"] == "PASS"
    assert any(line.startswith("-") and "attempts=2" in line for line in compared["diff"]), compared["diff"]
    assert any(line.startswith("+") and "attempts=1" in line for line in compared["diff"]), compared["diff"]
    assert code == 3


def _identify_answer_changed(frame, session):
    """Past the 120 bytes a transcript line shows: one limit changed, and the build's version."""
    if frame.frame_type != wire.FRAME_RESPONSE or not frame.data.startswith(b"{"):
        return None
    data = frame.data.replace(b'"output_buffer_timeout":250', b'"output_buffer_timeout":100')
    return wire.encode_frame(wire.FRAME_RESPONSE, re.sub(rb'"version":"[^"]*"', b'"version":"9.9.9-other"', data))


def test_compare_names_the_json_key_that_differs_and_masks_the_version(broker, tmp_path):
    """--compare reads JSON answers key by key and whole: a limit at the end of the IDENTIFY answer is named by its
    key; the build's version is not a difference."""
    fault = Fault("identify-answer-changed", "-", "another output_buffer_timeout default, another version",
                  "output_buffer_timeout 100 in the IDENTIFY answer", (), frame=_identify_answer_changed)
    proxy = FaultyProxy(broker.tcp_address, fault).start()
    case_id = "cases/test_identify.py::test_deflate_level_is_clamped[9-True]"
    try:
        _, cases, _ = run_cases(tmp_path, "--target", "%s:%d" % broker.tcp_address, "--http-target",
                                "%s:%d" % broker.http_address, "--compare", "%s:%d" % proxy.address,
                                selection="deflate_level_is_clamped and 9")
    finally:
        proxy.stop()
    diff = cases[case_id]["compare"]["diff"]
    assert "-A < RESPONSE .output_buffer_timeout = 250" in diff and "+A < RESPONSE .output_buffer_timeout = 100" in diff
    assert not any("version" in line for line in diff if line[:1] in "+-" and not line.startswith(("+++", "---")))
    assert not any("bytes)" in line for line in diff)


def test_the_delivery_history_headlines_the_violation_not_the_allowed_duplicates(broker, tmp_path):
    """Issue 34 item 2: attempts stuck at 1 on redeliveries (which are duplicates, allowed: at least once) make the
    workload case's headline "attempts not increasing", C-12, not "duplicates N"."""
    cases = run_through(broker, "attempts-stuck", tmp_path, "concurrent_workloads_lose_nothing")
    case = cases["cases/test_semantics.py::test_concurrent_workloads_lose_nothing"]
    assert case["verdict"] == "FAIL" and "C-12" in case["cause_items"], case
    actual = case["message"].split("actual:", 1)[1].strip()
    assert actual.startswith("attempts not increasing"), case["message"]
