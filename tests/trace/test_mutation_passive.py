"""The passive mutation harness cannot rot: CI runs it on a few faults with a bounded case selection (the whole
run is ``tox -e mutation-passive``). Each fault's suite traffic is captured and judged from the capture alone."""

import json
import subprocess
import sys
from pathlib import Path

from conformance.selftest.mutation_passive import render_markdown, summarize

SUBSET = ("attempts-stuck", "errors-as-responses", "identify-answer-without-max-msg-timeout")
SELECTION = "redelivery_keeps_id or unknown_command_is_fatal or client_counters_add_up"


def test_faults_are_named_from_the_capture_and_the_healthy_brokers_capture_is_clean(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "conformance.selftest.mutation_passive", "--reports-dir", str(tmp_path),
         "--timeout", "150", *(argument for fault in SUBSET for argument in ("--fault", fault)),
         "--", "-k", SELECTION], capture_output=True, text=True, timeout=600, cwd=Path(__file__).parents[2])
    document = json.loads((tmp_path / "mutation-passive.json").read_text())
    results = {result["fault"]: result for result in document["faults"]}
    assert {name: result["status"] for name, result in results.items()} == {
        "none": "control clean", **dict.fromkeys(SUBSET, "named")}, completed.stdout + completed.stderr
    assert results["attempts-stuck"]["named_by"] == ["C-12"]
    assert results["errors-as-responses"]["named_by"] == ["C-07"]
    assert results["identify-answer-without-max-msg-timeout"]["named_by"] == ["ID-20"]
    assert document["summary"]["score"] == 100.0 and completed.returncode == 0


def test_a_fault_the_monitors_miss_counts_against_the_score():
    results = [{"fault": "none", "tcp_visible": True, "status": "control clean"},
               {"fault": "a", "tcp_visible": True, "status": "named", "monitors": {"C-12": 2}},
               {"fault": "b", "tcp_visible": True, "status": "missed", "monitors": {}},
               {"fault": "c", "tcp_visible": False, "status": "missed", "monitors": {}}]
    summary = summarize(results, 1.0)
    assert (summary["score"], summary["missed"], summary["tcp_visible_faults"]) == (50.0, ["b"], 2)
    assert "| a | yes | none | C-12 ×2 | named  |" in render_markdown(summary, results)
