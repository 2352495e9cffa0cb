"""A broker that dies or hangs on one case is named once, in that case; later cases are NOT RUN, or run again once the
suite restarted it, never a cascade of ERRORs (liveness.py). The broker here is the reference broker behind a proxy
that exits or hangs when it sees IDENTIFY deflate_level -5, as an independent broker did."""

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conformance.selftest.proxy import FaultyProxy
from conformance.target import EmbeddedBroker, Profile

KILLER = "cases/test_identify.py::test_deflate_level_is_clamped[-5-True]"
BEFORE = "cases/test_identify.py::test_deflate_level_is_clamped[9-True]"
# after the killer in the suite's order (files alphabetically): the rest of the parametrisation, then test_magic.py
AFTER = ("cases/test_identify.py::test_deflate_level_is_clamped[3-False]",
         "cases/test_identify.py::test_deflate_level_is_clamped[1-True]",
         "cases/test_magic.py::test_magic_then_pipelined_commands")
SELECTION = "deflate_level_is_clamped or magic_then_pipelined"


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(Profile.load("nsqd-defaults")) as running:
        yield running


def run(proxy: FaultyProxy, broker, reports: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    completed = subprocess.run(
        [sys.executable, "-m", "conformance", "--target", "%s:%d" % proxy.address, "--http-target",
         "%s:%d" % broker.http_address, "--workers", "0", "--reports-dir", str(reports), *extra,
         "--", "-k", SELECTION], capture_output=True, text=True, timeout=180, cwd=Path(__file__).parents[2])
    return completed, json.loads((reports / "report.json").read_text())


def verdicts(report: dict) -> dict[str, str]:
    return {case["id"]: case["verdict"] for case in report["cases"]}


def test_a_broker_that_exits_is_named_once_and_later_cases_do_not_run(broker, tmp_path):
    proxy = FaultyProxy(broker.tcp_address, "exits-on-negative-deflate-level").start()
    try:
        completed, report = run(proxy, broker, tmp_path)
    finally:
        proxy.stop()
    seen = verdicts(report)
    assert seen[BEFORE] == "PASS"
    assert seen[KILLER] == "FAIL"
    killer = next(case for case in report["cases"] if case["id"] == KILLER)
    assert killer["message"].startswith(f"TARGET DIED during {KILLER}: TCP ")
    assert "refuses connections" in killer["message"] and "later cases on it are NOT RUN" in killer["message"]
    assert killer["cause"] == "the target died"
    assert {case_id: seen[case_id] for case_id in AFTER} == dict.fromkeys(AFTER, "NOT RUN")
    assert "ERROR" not in seen.values()
    assert [death["case"] for death in report["summary"]["target_deaths"]] == [KILLER]
    assert f"TARGET DIED during {KILLER}" in completed.stdout
    assert "Traceback" not in completed.stdout + completed.stderr
    assert completed.returncode == 1


def test_a_healthy_broker_after_a_dying_one_into_the_same_directory_is_judged_afresh(broker, tmp_path):
    """A run that tested nothing never passes the gate, and a run never reads an earlier run's state: the healthy
    broker's run into the dying one's reports directory runs every case and passes."""
    proxy = FaultyProxy(broker.tcp_address, "exits-on-negative-deflate-level").start()
    try:
        dying, _ = run(proxy, broker, tmp_path)
    finally:
        proxy.stop()
    assert dying.returncode == 1
    assert "GATE NOT PASSED, the run is incomplete: 3 of 5 cases NOT RUN" in dying.stdout
    healthy = FaultyProxy(broker.tcp_address, "none").start()
    try:
        completed, report = run(healthy, broker, tmp_path)
    finally:
        healthy.stop()
    seen = verdicts(report)
    assert len(seen) == 5 and set(seen.values()) == {"PASS"}, seen
    assert report["summary"]["incomplete"] == [] and report["summary"]["target_deaths"] == []
    assert not list((tmp_path / "pcap").glob("*")), "the dying run's pcaps are gone"
    assert completed.returncode == 0, completed.stdout[-2000:]


def test_a_run_where_every_case_is_unsupported_fails_the_gate_saying_why(broker, tmp_path):
    """The restart cases against a broker the suite cannot restart: all UNSUPPORTED, so nothing was tested."""
    completed, report = run_unsupported(broker, tmp_path)
    assert report["cases"] and {case["verdict"] for case in report["cases"]} == {"UNSUPPORTED"}
    assert report["summary"]["incomplete"] == [f"nothing was tested: all {len(report['cases'])} cases were "
                                               "UNSUPPORTED or NOT RUN"]
    assert "GATE NOT PASSED, the run is incomplete: nothing was tested" in completed.stdout
    assert completed.returncode == 1


def run_unsupported(broker, reports: Path) -> tuple[subprocess.CompletedProcess, dict]:
    """The restart cases against a broker the suite cannot restart: each one UNSUPPORTED."""
    completed = subprocess.run(
        [sys.executable, "-m", "conformance", "--target", "%s:%d" % broker.tcp_address, "--http-target",
         "%s:%d" % broker.http_address, "--workers", "0", "--reports-dir", str(reports),
         "--requirement", "NSQ-RST", "--", "-k", "survive"],
        capture_output=True, text=True, timeout=180, cwd=Path(__file__).parents[2])
    return completed, json.loads((reports / "report.json").read_text())


def test_a_hung_broker_is_restarted_by_the_restart_command_and_the_run_goes_on(broker, tmp_path):
    proxy = FaultyProxy(broker.tcp_address, "hangs-on-negative-deflate-level").start()
    revive_request = tmp_path / "revive"
    stop = threading.Event()

    def watch() -> None:  # what a restart script does to a real broker: here, the proxy comes up again
        while not stop.wait(0.05):
            if revive_request.exists():
                proxy.revive()
                revive_request.unlink()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        completed, report = run(proxy, broker, tmp_path / "reports", "--restart-command", f"touch {revive_request}")
    finally:
        stop.set()
        watcher.join()
        proxy.stop()
    seen = verdicts(report)
    killer = next(case for case in report["cases"] if case["id"] == KILLER)
    assert killer["verdict"] == "FAIL"
    assert "answers nothing within 5 s (hung)" in killer["message"]
    assert "It came back: restarted with --restart-command" in killer["message"]
    assert {case_id: seen[case_id] for case_id in (BEFORE, *AFTER)} == dict.fromkeys((BEFORE, *AFTER), "PASS")
    assert len(report["summary"]["target_deaths"]) == 1
    assert completed.returncode == 1


def test_a_restart_waits_for_its_ports_while_another_socket_holds_one(tmp_path):
    """The restart keeps the ports (P-RST-01); a loopback port another socket holds for a moment (the system hands
    it out to outgoing connections too) delays the restart, bounded, rather than failing the run."""
    import socket
    import time

    with EmbeddedBroker(Profile.load("nsqd-defaults"), tmp_path / "broker.log") as running:
        port = running.tcp_address[1]
        running._terminate()
        holder = socket.socket()
        holder.bind(("127.0.0.1", port))
        holder.listen()
        threading.Timer(1.5, holder.close).start()
        started = time.monotonic()
        running.restart(timeout=10)
        assert running.tcp_address == ("127.0.0.1", port)
        assert 1.0 <= time.monotonic() - started < 10  # it waited for the holder (1.5 s), bounded by the timeout
        with pytest.raises(OSError, match="Address already in use"), socket.socket() as taken:
            taken.bind(("127.0.0.1", port))  # the broker listens there again
