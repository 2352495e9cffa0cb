"""The mutation harness cannot rot: CI runs it on a handful of faults with a bounded case selection (the full run,
every fault against the whole suite, is ``tox -e mutation``)."""

import json
import subprocess
import sys
from pathlib import Path

from conformance.selftest.mutation import render_markdown, summarize

# One fault per kind of rewrite: a lost frame, a dropped parameter on TCP and on HTTP, a connection left open, a
# drifted /stats counter, a restart that forgets; and the cases that should kill them.
SUBSET = ("lose-1-in-100", "dpub-defer-ignored", "http-defer-ignored", "no-close-after-fatal", "stats-in-flight-zero",
          "restart-forgets-pause")
SELECTION = ("ready_consumer_gets_every or dpub_is_deferred or pub_defer_delays or unknown_command_is_fatal or "
             "stats_counters or metadata_survives")


def test_a_subset_of_faults_is_killed_and_the_controls_pass(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "conformance.selftest.mutation", "--reports-dir", str(tmp_path), "--timeout", "120",
         *(argument for fault in SUBSET for argument in ("--fault", fault)), "--", "-k", SELECTION],
        capture_output=True, text=True, timeout=170, cwd=Path(__file__).parents[2])
    document = json.loads((tmp_path / "mutation.json").read_text())
    statuses = {result["fault"]: result["status"] for result in document["faults"]}
    assert statuses == {"none": "control passes", "none-restart": "control passes",
                        **dict.fromkeys(SUBSET, "killed")}, completed.stdout
    assert document["summary"]["score"] == 100.0 and completed.returncode == 0
    killers = {result["fault"]: result["killed_by"] for result in document["faults"]}
    assert killers["lose-1-in-100"] == ["cases/test_semantics.py::test_a_ready_consumer_gets_every_message_at_once"]
    assert "**100.0 %**" in (tmp_path / "mutation.md").read_text()


def test_a_survivor_names_the_requirements_that_should_catch_it():
    results = [{"fault": "none", "section": "-", "bug": "", "wire": "", "requirements": [], "status": "control passes"},
               {"fault": "sample-rate-ignored", "section": "parameters", "bug": "b", "wire": "w",
                "requirements": ["NSQ-SAMPLE-001"], "status": "survived", "killed_by": []}]
    summary = summarize(results, 1.0)
    assert (summary["score"], summary["survivors"], summary["errors"]) == (0.0, ["sample-rate-ignored"], [])
    assert "**survived**; should be caught by NSQ-SAMPLE-001" in render_markdown(summary, results)
