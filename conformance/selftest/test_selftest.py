"""The suite catches bugs: run it through a faulty proxy and see the right cases fail (issue 3, done-when 3).

Each run spawns the reference broker (as a subprocess, like the suite does), puts a ``FaultyProxy`` in
front of its TCP port and runs a few cases through ``python -m conformance``.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.selftest.proxy import FaultyProxy
from conformance.target import EmbeddedBroker, EmbeddedLookupd, Profile

REDELIVERY = "cases/test_framing.py::test_redelivery_keeps_id_and_timestamp"
FATAL_CLOSE = "cases/test_syntax.py::test_unknown_command_is_fatal"
UNAFFECTED = "cases/test_magic.py::test_magic_then_pipelined_commands"
STATS_COUNTERS = "cases/test_http.py::test_stats_counters"
SELECTION = "redelivery_keeps_id or unknown_command_is_fatal or magic_then_pipelined"


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(Profile.load("nsqd-defaults")) as running:
        yield running


def run_suite(broker, fault, reports: Path, *extra) -> tuple[int, dict]:
    proxy = FaultyProxy(broker.tcp_address, fault).start()
    try:
        completed = subprocess.run(
            [sys.executable, "-m", "conformance", "--target", "%s:%d" % proxy.address,
             "--http-target", "%s:%d" % broker.http_address, "--workers", "0", "--reports-dir", str(reports),
             *extra, "--", "-k", SELECTION, "-q"],
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


def test_missing_close_fails_the_fatal_error_case(broker, tmp_path):
    code, cases = run_suite(broker, "no-close-after-fatal", tmp_path)
    assert cases[FATAL_CLOSE]["verdict"] == "FAIL"
    assert "a fatal error is followed by a close (C-23)" in cases[FATAL_CLOSE]["message"]
    assert cases[REDELIVERY]["verdict"] == "PASS"
    assert code == 1


def test_baseline_accepts_the_known_failure(broker, tmp_path):
    baseline = tmp_path / "baseline.txt"
    baseline.write_text(f"{FATAL_CLOSE}  # the proxy keeps connections open\n")
    code, cases = run_suite(broker, "no-close-after-fatal", tmp_path / "reports", "--baseline", str(baseline))
    assert cases[FATAL_CLOSE]["verdict"] == "FAIL" and cases[FATAL_CLOSE]["baseline"]
    assert code == 0


def test_a_missing_json_field_is_a_fail_naming_it_not_an_error(broker, tmp_path):
    """Issue 11 item 6: the broker's answer lacks a field a case reads."""
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
    assert case["verdict"] == "FAIL", case
    assert "'client_count'" in case["message"] and "Error" not in case["message"], case["message"]
    assert completed.returncode == 1


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
