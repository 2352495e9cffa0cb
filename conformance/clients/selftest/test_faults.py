"""The faulty-client selftest: the model client (drivers/model_driver.py) through each fault of faults.py, judged
without a baseline, must make the fault's cases FAIL (NON-STRICT where the case's requirement is a SHOULD), and
through the faithful proxy must PASS them all."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conformance.clients.catalogue import REQUIREMENTS
from conformance.clients.selftest.faults import FAULTS
from conformance.spec import behaviours
from conformance.verdicts import FAIL, NON_STRICT, PASS


def _run(fault, reports) -> dict[str, dict]:
    selection = fault.selection or fault.kills
    completed = subprocess.run(
        [sys.executable, "-m", "conformance.clients", "model", "--fault", fault.name, "--baseline", "none",
         "--reports-dir", str(reports), "--", "-k", " or ".join(selection), "-p", "no:randomly"],
        capture_output=True, text=True, timeout=120)
    report = reports / "model" / "report.json"
    assert report.is_file(), f"no report from the {fault.name} run:\n{completed.stdout[-2000:]}{completed.stderr}"
    cases = {case["id"]: case for case in json.loads(report.read_text())["cases"]}
    assert set(cases) == set(selection), f"ran {sorted(cases)}, selected {sorted(selection)}"
    return cases


def _must_found(case: dict) -> bool:
    """A client-side rule of level MUST or MAY broken in the case's traffic, as its monitors found it."""
    return any(finding["side"] == "client" and not finding["declared"]
               and behaviours()[finding["item"]].level != "SHOULD" for finding in case["monitors"])


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_fault_is_caught(name, tmp_path):
    fault = FAULTS[name]
    cases = _run(fault, tmp_path)
    if not fault.kills:
        wrong = {identifier: case["verdict"] for identifier, case in cases.items() if case["verdict"] != PASS}
        assert not wrong, f"through the {name} proxy the model client must PASS: {wrong}"
        found = {identifier: case["monitors"] for identifier, case in cases.items() if case["monitors"]}
        assert not found, f"through the {name} proxy the monitors must find nothing: {found}"
        return
    # without a baseline: a broken MUST (or a MAY the library has) FAILs, a broken SHOULD is NON-STRICT, unless the
    # monitors found a MUST broken in the SHOULD case's traffic too (the fault's harm reaches further)
    expected = {identifier: NON_STRICT if REQUIREMENTS[identifier].level == "SHOULD"
                and not _must_found(cases[identifier]) else FAIL for identifier in fault.kills}
    measured = {identifier: cases[identifier]["verdict"] for identifier in fault.kills}
    assert measured == expected, f"fault {name} ({fault.text}): verdicts {measured}, expected {expected}"


def test_catalogue_is_large_enough():
    """The issue's bar: at least 15 client faults, each naming the cases that catch it."""
    faults = [fault for fault in FAULTS.values() if fault.kills]
    assert len(faults) >= 15, len(faults)
    assert {case for fault in faults for case in fault.kills} <= set(REQUIREMENTS)
