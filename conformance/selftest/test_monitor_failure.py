"""A monitor that raises on a case's traffic is the toolkit's own bug: that case is an ERROR that says so, and the
run goes on to its report. Before, the exception left pytest_runtest_makereport as an INTERNALERROR, which under
pytest-xdist ended the worker and, with it, the whole run (exit status 2, no report): what a hostile broker's
/stats with a list for a topic name did. The monitor here is broken on purpose by a plugin the run loads."""

import json
import os
import subprocess
import sys
from pathlib import Path

BROKEN = '''
from nsq_protocol.monitors.http_answers import HttpAnswersAsNsqd


def http_exchange(self, judge, exchange):
    raise RuntimeError("broken on purpose")


HttpAnswersAsNsqd.http_exchange = http_exchange
'''
OVER_HTTP = ("cases/test_http.py::test_mpub_binary_mode", "cases/test_http.py::test_ping")
OVER_TCP = "cases/test_magic.py::test_magic_then_pipelined_commands"


def test_a_monitor_that_raises_makes_its_case_an_error_and_the_run_goes_on(tmp_path):
    (tmp_path / "broken_monitor.py").write_text(BROKEN)
    reports = tmp_path / "reports"
    completed = subprocess.run(
        [sys.executable, "-m", "conformance", "--workers", "2", "--reports-dir", str(reports), "--",
         "-p", "broken_monitor", "-k", "test_mpub_binary_mode or test_ping or magic_then_pipelined"],
        capture_output=True, text=True, timeout=180, cwd=Path(__file__).parents[2],
        env={**os.environ, "PYTHONPATH": str(tmp_path)})
    output = completed.stdout + completed.stderr
    assert "INTERNALERROR" not in output and "Traceback" not in output, output[-3000:]
    assert completed.returncode == 1, output[-3000:]
    cases = {case["id"]: case for case in json.loads((reports / "report.json").read_text())["cases"]}
    assert {case_id: cases[case_id]["verdict"] for case_id in OVER_HTTP} == dict.fromkeys(OVER_HTTP, "ERROR")
    for case_id in OVER_HTTP:
        assert cases[case_id]["message"].startswith("a monitor raised on the case's traffic (the toolkit's own bug): "
                                                    "HttpAnswersAsNsqd: RuntimeError('broken on purpose')")
    assert cases[OVER_TCP]["verdict"] == "PASS"
