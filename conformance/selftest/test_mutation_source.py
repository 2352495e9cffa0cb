"""The source-level mutation harness cannot rot: its keys and sample are stable, its equivalent list names code that
exists, and one mutant really runs in a scratch copy and is killed (the full run is ``tox -e mutation-source``)."""

import hashlib
import json
import re
import subprocess
import sys

from conformance.selftest.mutation_source import (
    BY_NAME,
    ROOT,
    _enclosing_functions,
    load_equivalents,
    mutants_at,
    sample,
    sites_of,
)


def test_the_sample_is_seeded_and_keys_name_function_and_mutation():
    sites, in_logging = sites_of(BY_NAME["tls.py"])
    first = [mutant.key for mutant in mutants_at(sample(sites, 5, 23, "tls.py"))]
    assert first == [mutant.key for mutant in mutants_at(sample(sites, 5, 23, "tls.py"))]
    assert first != [mutant.key for mutant in mutants_at(sample(sites, 5, 24, "tls.py"))]
    assert len(sites) > 100 and in_logging == 0
    assert all(re.fullmatch(r"reference_broker/tls\.py::[\w.<>]+::.+ => .*", key) for key in first), first


def test_every_equivalent_entry_names_code_that_is_still_there():
    entries = load_equivalents()
    assert entries, "conformance/selftest/equivalent_mutants.toml lists no mutant"
    for key, reason in entries.items():
        path, function, mutation = key.split("::", 2)
        source = (ROOT / path).read_text()
        original = mutation.split(" => ")[0]
        assert reason.strip(), f"{key}: no reason"
        assert function == "<module>" or function in set(_enclosing_functions(source).values()), key
        flat = " ".join(line.strip() for line in source.splitlines())
        assert original.split(" #")[0] in flat, f"{key}: the original text is no longer in {path}"


def test_a_mutant_runs_in_a_scratch_copy_and_is_killed(tmp_path):
    tls = ROOT / "reference_broker" / "tls.py"
    before = hashlib.sha256(tls.read_bytes()).hexdigest()
    completed = subprocess.run(
        [sys.executable, "-m", "conformance.selftest.mutation_source", "--module", "tls.py", "--sample", "0",
         "--mutant", "self._incoming = ssl.MemoryBIO() => self._incoming = None", "--reports-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=240, cwd=ROOT)
    document = json.loads((tmp_path / "mutation-source.json").read_text())
    assert [result["status"] for result in document["results"]] == ["killed"], completed.stdout
    assert document["results"][0]["by"].startswith("nsqd-tls: cases/test_tls.py::"), document["results"][0]
    assert document["modules"]["tls.py"]["score"] == 100.0 and completed.returncode == 0
    assert hashlib.sha256(tls.read_bytes()).hexdigest() == before  # the working tree is never touched
    assert "| tls.py |" in (tmp_path / "mutation-source.md").read_text()
