"""--nsq-version and the catalogue's since/until (conformance/versions.py, issue 34 item 3): the releases order, an
item outside the chosen release is not judged (its case UNSUPPORTED, saying so, never PASS), a case whose
expectation differs by release checks the chosen one's, and a broker that does what another release does is
NON-STRICT naming that release, while one that does what no release does FAILs."""

import json
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import pytest

from conformance.selftest.faults import BY_NAME
from conformance.selftest.mutation import _proxied_broker
from conformance.spec import SpecError, _behaviour, behaviours, not_in_version
from conformance.versions import NsqVersion, Span, VersionError, label_of, releases_expecting_otherwise

ROOT = Path(__file__).parents[2]
RELEASES = ("1.0.0-compat", "1.1.0", "1.2.0", "1.2.1", "1.3.0", "master")


def test_releases_order_and_master_comes_after_every_release():
    versions = [NsqVersion.parse(text) for text in RELEASES]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    assert NsqVersion.parse("v1.2.1") == NsqVersion.parse("1.2.1") and str(NsqVersion.parse("v1.2.1")) == "1.2.1"
    assert NsqVersion.parse("99.0.0") < NsqVersion.parse("master")
    assert NsqVersion.parse("1.3.0").label == "nsqd v1.3.0" and NsqVersion.parse("master").label == "nsqd master"
    for bad in ("1.3", "latest", "1.3.0.1", ""):
        with pytest.raises(VersionError):
            NsqVersion.parse(bad)


def test_a_span_has_since_and_not_until():
    span = Span.of("1.2.0", "1.3.0")
    assert [span.has(NsqVersion.parse(text)) for text in RELEASES] == [False, False, True, True, False, False]
    assert Span.of("master", None).has(NsqVersion.parse("master"))
    assert not Span.of("master", None).has(NsqVersion.parse("1.3.0"))
    with pytest.raises(VersionError):
        Span.of("1.3.0", "1.2.0")


def test_the_catalogue_loads_its_spans_and_refuses_a_bad_one():
    spans = {item.id: item.releases for item in behaviours().values() if item.releases != Span()}
    assert spans["R-16"] == Span.of("master", None) and spans["C-35"] == Span.of(None, "1.3.0"), spans
    entry = {"id": "R-16", "level": "MUST", "text": "t", "observable": "o", "capture": "needs a monitor: m",
             "recordings": [], "source": "s"}
    with pytest.raises(SpecError, match="R-16: .*not an nsqd version"):
        _behaviour(Path("x.toml"), {**entry, "since": "one"})
    with pytest.raises(SpecError, match="R-16: since 1.3.0 is not before until 1.2.0"):
        _behaviour(Path("x.toml"), {**entry, "since": "1.3.0", "until": "1.2.0"})


def test_an_item_the_release_lacks_is_named_in_the_reason():
    assert not_in_version(["R-16"], NsqVersion.parse("1.3.0")) == "not in nsqd v1.3.0: R-16 is since master"
    assert not_in_version(["R-16"], NsqVersion.parse("master")) is None
    assert not_in_version(["R-16", "R-02"], NsqVersion.parse("1.3.0")) is None  # R-02 is in every release


def test_the_releases_that_expect_otherwise_are_grouped_nearest_first():
    """C-34 (since 1.3.0) and C-35 (until 1.3.0) part the releases in two; with ID-11 (since 1.1.0) and ID-44 (until
    1.1.0), in three. A case is run again once per group, as the group's release nearest the judged one."""
    spans = [behaviours()[item].releases for item in ("C-34", "C-35")]
    groups = releases_expecting_otherwise(spans, NsqVersion.parse("1.3.0"))
    assert [label_of(group) for group in groups] == ["nsqd v1.2.1 (and v1.2.0, v1.1.0, v1.0.0-compat)"]
    spans += [behaviours()[item].releases for item in ("ID-11", "ID-44")]
    groups = releases_expecting_otherwise(spans, NsqVersion.parse("1.1.0"))
    assert [label_of(group) for group in groups] == ["nsqd v1.0.0-compat", "nsqd v1.3.0 (and master)"]
    assert releases_expecting_otherwise([Span()], NsqVersion.parse("1.3.0")) == []


def run(tmp_path: Path, *options: str, selection: str, strict: bool = True) -> tuple[int, dict, dict]:
    completed = subprocess.run(
        [sys.executable, "-m", "conformance", "--workers", "0", "--reports-dir", str(tmp_path),
         *(("--strict",) if strict else ()), *options, "--", "-k", selection, "-q"],
        capture_output=True, text=True, timeout=180, cwd=ROOT)
    report = json.loads((tmp_path / "report.json").read_text())
    return completed.returncode, {case["id"]: case for case in report["cases"]}, report


def test_a_case_of_a_later_release_is_unsupported_saying_so_and_judged_when_asked(tmp_path):
    """The embedded reference broker counts deliveries by locality (H-STATS-12, master): as v1.3.0 the case is
    UNSUPPORTED with the reason, not PASS; as master it PASSes. The report and its banner name the version."""
    case_id = "cases/test_http.py::test_stats_count_deliveries_by_locality"
    code, cases, report = run(tmp_path / "tag", selection="stats_count_deliveries_by_locality")
    assert cases[case_id]["verdict"] == "UNSUPPORTED", cases[case_id]
    assert cases[case_id]["message"] == "not in nsqd v1.3.0: H-STATS-12 is since master"
    assert report["nsq_version"] == "1.3.0" and "judged as <b>nsqd v1.3.0</b>" in (
        tmp_path / "tag" / "report.html").read_text()
    code, cases, report = run(tmp_path / "master", "--nsq-version", "master",
                              selection="stats_count_deliveries_by_locality")
    assert cases[case_id]["verdict"] == "PASS" and code == 0 and report["nsq_version"] == "master", cases[case_id]


def test_a_case_checks_the_chosen_releases_expectation(tmp_path):
    """The reference broker words a short message ID as v1.3.0 does ('invalid message ID', C-34): judged as 1.2.1,
    whose text was 'Invalid Message ID' (C-35), the same answer is v1.3.0's behaviour: NON-STRICT naming it, a FAIL
    under --strict that names it too."""
    case_id = "cases/test_errors.py::test_short_message_id_is_fatal"
    _, cases, _ = run(tmp_path / "tag", selection="short_message_id_is_fatal")
    assert cases[case_id]["verdict"] == "PASS", cases[case_id]
    code, cases, _ = run(tmp_path / "old", "--nsq-version", "1.2.1", selection="short_message_id_is_fatal",
                         strict=False)
    message = cases[case_id]["message"]
    assert cases[case_id]["verdict"] == "NON-STRICT" and code == 0, cases[case_id]
    assert message.startswith("behaves as nsqd v1.3.0 (and master) (C-34 is since 1.3.0), not as nsqd v1.2.1"), message
    assert "Invalid Message ID" in message and cases[case_id]["cause_items"] == ["C-34"], message
    code, cases, _ = run(tmp_path / "strict", "--nsq-version", "1.2.1", selection="short_message_id_is_fatal")
    assert cases[case_id]["verdict"] == "FAIL" and code == 1, cases[case_id]
    assert cases[case_id]["message"].startswith("behaves as nsqd v1.3.0"), cases[case_id]["message"]


def test_v1_0_0_compat_is_judged_as_itself(tmp_path):
    """The reference broker answers deflate_level min(6, max) without deflate (ID-11, since 1.1.0); judged as
    1.0.0-compat, which answered 0 (ID-44), the difference names ID-44, not ID-11, and the broker behaves as the
    releases since 1.1.0, the nearest of them named first."""
    case_id = "cases/test_identify.py::test_deflate_level_is_clamped[3-False]"
    code, cases, _ = run(tmp_path, "--nsq-version", "1.0.0-compat", selection="deflate_level_is_clamped and 3-False",
                         strict=False)
    assert cases[case_id]["verdict"] == "NON-STRICT" and code == 0, cases[case_id]
    behaves, *differences = cases[case_id]["message"].splitlines()
    assert behaves.startswith("behaves as nsqd v1.1.0 (and v1.2.0, v1.2.1, v1.3.0, master)"), behaves
    assert "ID-44" in differences[0] and "ID-11" not in differences[0], differences


def run_behind_fault(tmp_path: Path, fault: str, selection: str) -> dict:
    """The suite, not --strict, against a reference broker behind the proxies of ``fault`` (selftest/faults.py)."""
    with ExitStack() as stack:
        _, (tcp, http) = _proxied_broker(BY_NAME[fault], tmp_path, stack)
        completed = subprocess.run(
            [sys.executable, "-m", "conformance", "--workers", "0", "--reports-dir", str(tmp_path / "report"),
             "--target", "%s:%d" % tcp.address, "--http-target", "%s:%d" % http.address, "--", "-k", selection, "-q"],
            capture_output=True, text=True, timeout=180, cwd=ROOT)
    report = tmp_path / "report" / "report.json"
    assert report.is_file(), completed.stdout + completed.stderr
    return {case["id"]: case for case in json.loads(report.read_text())["cases"]}


def test_another_releases_behaviour_is_non_strict_naming_it(tmp_path):
    """/stats channels without client_count (H-STATS-14, since 1.2.0) are what v1.1.0 and v1.0.0-compat answer:
    judged as 1.3.0 the case is NON-STRICT naming them, not FAIL."""
    case = run_behind_fault(tmp_path, "stats-without-client-count", "test_stats_counters")[
        "cases/test_http.py::test_stats_counters"]
    assert case["verdict"] == "NON-STRICT", case
    assert case["message"].startswith("behaves as nsqd v1.1.0 (and v1.0.0-compat) (H-STATS-14 is since 1.2.0), not as "
                                     "nsqd v1.3.0"), \
        case["message"]
    assert case["cause_items"] == ["H-STATS-14"] and case["level"] == "SHOULD", case


def test_a_behaviour_of_no_release_fails(tmp_path):
    """/stats channels whose message_count stays 0 are no release's: run again as the releases that expect
    otherwise of its versioned items, the case fails as each, and FAILs, saying nothing of a release."""
    case = run_behind_fault(tmp_path, "stats-message-count-zero", "test_stats_counters")[
        "cases/test_http.py::test_stats_counters"]
    assert case["verdict"] == "FAIL", case
    assert "behaves as" not in case["message"] and "message_count" in case["message"], case["message"]


def test_a_version_that_is_none_is_one_line_and_exit_2():
    completed = subprocess.run([sys.executable, "-m", "conformance", "--nsq-version", "newest"],
                               capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert completed.returncode == 2 and completed.stderr.count("\n") == 1, completed.stderr
    assert "--nsq-version: 'newest' is not an nsqd version" in completed.stderr
