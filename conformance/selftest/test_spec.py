"""The behaviour catalogue (conformance/spec/) against the rest of the tree: every ID the project cites is in it,
every requirement maps onto it, every MUST and SHOULD item is judged by a case (or says why no black-box case can), the
recordings it names are the fixtures' own, an item's ``capture`` says ``monitor`` exactly when a monitor judges it, and
``nsq-conformance explain`` answers for every ID."""

from __future__ import annotations

import ast
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from conformance import spec
from conformance.catalogue import requirements
from conformance.citations import problems_in, prose_problems, unknown_ids
from conformance.explain import REPO_DIR, TRANSCRIPT_FILES, capture_tables
from conformance.spec import MONITOR, SpecError, _behaviour, behaviour_ids_of, behaviours, cited_id_pattern
from nsq_protocol.monitors import CLIENT_MONITORS, LOOKUPD_MONITORS, MONITORS

ALL_MONITORS = (*MONITORS, *CLIENT_MONITORS, *LOOKUPD_MONITORS)

# Labels the recorder put in the fixtures' `catalog` lists that are not behaviour IDs: section numbers it used
# before the catalogue had items for them, and the names of nsqd's own Go tests (whose behaviour items the
# same transcripts also cite).
FIXTURE_LABELS = {
    "§3.1": "ID-14", "§5": "LIM-01", "H-EP:/info": "H-INFO-01", "H-EP:/debug": "H-DEBUG-01",
    "H-EP:/topic/create": "H-TOPIC-01", "H-EP:/topic/delete": "H-TOPIC-02", "H-EP:/topic/empty": "H-TOPIC-03",
    "H-EP:/topic/pause": "H-TOPIC-04", "H-EP:/channel/create": "H-CHANNEL-01",
    "H-EP:/channel/delete": "H-CHANNEL-02", "H-EP:/channel/empty": "H-CHANNEL-03",
    "H-EP:/channel/pause": "H-CHANNEL-04", "T-TestSizeLimits": None, "T-TestMaxRdyCount": None,
}


def explain(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance", "explain", *arguments], capture_output=True,
                          text=True, timeout=120, cwd=REPO_DIR)


@pytest.fixture(scope="module")
def every_explanation() -> dict[str, dict]:
    """``explain --json`` of every behaviour item and every requirement, in one run (one case collection)."""
    answer = explain("--json", *behaviours(), *requirements())
    assert answer.returncode == 0, answer.stderr
    return json.loads(answer.stdout)


def test_every_cited_id_is_in_the_catalogue():
    unknown, cited = unknown_ids()
    assert not unknown, "IDs cited but in neither conformance/spec/ nor requirements.toml:\n" + "\n".join(unknown)
    assert len(cited) > 400  # the tree cites ~330 behaviour items and ~160 requirements: the scan did run


def test_the_trees_prose_has_no_id_range_and_cites_no_gone_document():
    """What ``tox -e lint`` checks (conformance/citations.py), here on the tree and on a file that breaks each rule."""
    assert prose_problems() == []
    planted = ('"""Ranges D-01..D-03 and NSQ-HB-001/002, §2.13 of nsqd-behavior.md, ../elsewhere/x."""\n'
               '# D-01, D-02 and C-14/C-15 are fine\n'
               'TEXT = "D-01..D-03 in a string is data"\n')
    assert [problem.split(": ", 1)[1] for problem in problems_in("planted.py", planted)] == [
        "the range 'D-01..D-03' hides items: list each ID",
        "the range 'NSQ-HB-001/002' hides items: list each ID",
        "'§2' cites a section of a document: cite the catalogue's IDs",
        "'nsqd-behavior.md' is gone: cite the catalogue's IDs",
        "'../elsewhere' points outside the repository",
    ]
    # from a folder one level down, one climb stays inside the repository; two leave it
    assert problems_in("docs/planted.md", "See ../README.md.") == []
    assert problems_in("docs/planted.md", "See ../../elsewhere/x.") == [
        "docs/planted.md:1: '../../elsewhere' points outside the repository"]


def test_requirements_map_onto_catalogue_items():
    unmapped = [f"{r.id}: {i}" for r in requirements().values() for i in behaviour_ids_of(r) if i not in behaviours()]
    assert not unmapped, "requirements.toml sources that are not catalogue items:\n" + "\n".join(unmapped)


def case_functions():
    """(file, test function node, its requirement marks) of every case under conformance/cases/."""
    for path in sorted((REPO_DIR / "conformance" / "cases").glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                marks = [argument.value for decorator in node.decorator_list
                         if isinstance(decorator, ast.Call) and "requirement" in ast.unparse(decorator.func)
                         for argument in decorator.args if isinstance(argument, ast.Constant)]
                yield path.name, node, marks


def marked_cases():
    """(file, test function, its requirement marks, its docstring) of every case under conformance/cases/."""
    for file, node, marks in case_functions():
        yield file, node.name, marks, ast.get_docstring(node) or ""


def test_a_case_citing_an_item_judges_it_through_its_requirements():
    """A case whose docstring cites a behaviour item is marked with a requirement whose source names it, so that
    `explain` of the item finds the case."""
    pattern = cited_id_pattern()
    unmapped = []
    for file, name, marks, docstring in marked_cases():
        mapped = {item for mark in marks if mark in requirements() for item in behaviour_ids_of(requirements()[mark])}
        unmapped += [f"{file}::{name} {marks}: {item}" for item in sorted(set(pattern.findall(docstring)) - mapped)
                     if item in behaviours()]
    assert not unmapped, "add the item to one of the case's requirements' source:\n" + "\n".join(unmapped)


def judged_items(function: ast.FunctionDef) -> set[str]:
    """The behaviour items a case's checks name: ``judges="..."``, ``verify.soft("...")``, and the positional
    ``judges`` of ``equal``/``soft_equal`` (4th) and ``that``/``soft_that``/``within`` (5th)."""
    position = {"equal": 3, "soft_equal": 3, "that": 4, "soft_that": 4, "within": 4, "soft": 0}
    judged = set()
    for call in (node for node in ast.walk(function) if isinstance(node, ast.Call)):
        name = call.func.attr if isinstance(call.func, ast.Attribute) else ""
        arguments = [keyword.value for keyword in call.keywords if keyword.arg == "judges"]
        if name in position and len(call.args) > position[name]:
            arguments.append(call.args[position[name]])
        judged |= {item.strip() for argument in arguments if isinstance(argument, ast.Constant)
                   and isinstance(argument.value, str) for item in argument.value.split(",") if item.strip()}
    return judged


def test_a_check_judges_items_of_its_cases_requirements():
    """The items a check names (its verdict's level) are items its case's requirements judge (issue 34 item 2)."""
    foreign = []
    for file, node, marks in case_functions():
        mapped = {item for mark in marks for item in behaviour_ids_of(requirements()[mark])}
        foreign += [f"{file}::{node.name} {marks}: {item}" for item in sorted(judged_items(node) - mapped)]
    assert not foreign, "a check names an item none of its case's requirements judges:\n" + "\n".join(foreign)


def test_every_must_and_should_item_is_checked_by_a_case_or_says_why_not(every_explanation):
    unchecked = [f"{item.id} {item.level} ({item.section}.toml): {item.text}" for item in behaviours().values()
                 if item.level in ("MUST", "SHOULD") and not item.not_checkable
                 and not every_explanation[item.id]["cases"]]
    assert not unchecked, ("MUST and SHOULD items no case judges (map them in a requirement's source, or give "
                           "not_checkable = \"reason\"):\n" + "\n".join(unchecked))


def test_not_checkable_items_are_really_unjudged(every_explanation):
    """An item that claims no black-box case can judge it while a case does is stale."""
    stale = [item.id for item in behaviours().values() if item.not_checkable and every_explanation[item.id]["cases"]]
    assert not stale


def test_recordings_are_the_fixtures_own():
    shows: dict[str, set[str]] = {}
    for path in TRANSCRIPT_FILES:
        for line in path.read_text().splitlines():
            record = json.loads(line)
            for label in record["catalog"]:
                identifier = FIXTURE_LABELS.get(label, label)
                if identifier is not None:
                    shows.setdefault(identifier, set()).add(record["id"])
    assert shows.keys() <= behaviours().keys(), sorted(shows.keys() - behaviours().keys())
    differing = [f"{i.id}: catalogue {sorted(i.recordings)} fixtures {sorted(shows.get(i.id, ()))}"
                 for i in behaviours().values() if set(i.recordings) != shows.get(i.id, set())]
    assert not differing, "\n".join(differing)


def capture_mismatches(catalogue, monitors) -> list[str]:
    """Where ``capture = "monitor"`` and the monitors' ``ITEMS`` disagree, one line each."""
    judged = {item: monitor.__name__ for monitor in monitors for item in monitor.ITEMS}
    marked = {item.id for item in catalogue.values() if item.capture_kind == MONITOR}
    return ([f"{item}: {judged[item]} judges it; mark it capture = \"monitor\""
             for item in sorted(judged.keys() - marked)]
            + [f"{item}: capture = \"monitor\" but no monitor of nsq_protocol.monitors (MONITORS, CLIENT_MONITORS, "
               "LOOKUPD_MONITORS) lists it in ITEMS (say what it would take: \"needs a monitor: ...\")"
               for item in sorted(marked - judged.keys())])


def test_capture_says_monitor_exactly_for_the_items_a_monitor_judges():
    assert capture_mismatches(behaviours(), ALL_MONITORS) == []


def test_a_monitor_item_unmarked_or_a_marked_item_without_monitor_is_named():
    class Planted:
        ITEMS = ("D-71",)  # not on the wire, in the catalogue
    unmarked = capture_mismatches(behaviours(), (*ALL_MONITORS, Planted))
    assert unmarked == ['D-71: Planted judges it; mark it capture = "monitor"']
    dropped = next(monitor for monitor in MONITORS if monitor.__name__ == "IdentifyAnswer")
    others = [monitor for monitor in ALL_MONITORS if monitor is not dropped]
    alone = sorted(set(dropped.ITEMS) - {item for monitor in others for item in monitor.ITEMS})
    without = capture_mismatches(behaviours(), others)
    assert alone and [line.split(":")[0] for line in without] == alone


def test_docs_monitors_md_holds_the_capture_tables():
    assert capture_tables() in (REPO_DIR / "docs" / "monitors.md").read_text(), (
        "docs/monitors.md is stale: paste `python -m conformance explain --capture` in place of its tables")


def test_an_item_restating_a_missing_or_restating_item_is_named(tmp_path, monkeypatch):
    fields = 'level = "SHOULD"\ntext = "t"\nobservable = "o"\nrecordings = []\nsource = "s"\n'
    monkeypatch.setattr(spec, "SPEC_DIR", tmp_path)
    (tmp_path / "x.toml").write_text(f'[[behaviour]]\nid = "Q-01"\ncapture = "as Q-02"\n{fields}'
                                     f'[[behaviour]]\nid = "Q-02"\ncapture = "monitor"\n{fields}')
    assert behaviours.__wrapped__().keys() == {"Q-01", "Q-02"}
    (tmp_path / "y.toml").write_text(f'[[behaviour]]\nid = "Q-03"\ncapture = "as Q-01"\n{fields}')
    with pytest.raises(SpecError, match="Q-03: capture restates Q-01"):
        behaviours.__wrapped__()
    (tmp_path / "y.toml").write_text(f'[[behaviour]]\nid = "Q-03"\ncapture = "as Q-99"\n{fields}')
    with pytest.raises(SpecError, match="Q-03: capture restates Q-99"):
        behaviours.__wrapped__()


def test_explain_answers_every_id(every_explanation):
    assert every_explanation.keys() == behaviours().keys() | requirements().keys()


RANDOM_IDS = random.Random(25).sample(sorted(behaviours().keys() | requirements().keys()), 20)


@pytest.fixture(scope="module")
def explained() -> str:
    """The text answer for 20 IDs drawn at random (seeded) and one requirement whose answer is known."""
    answer = explain(*RANDOM_IDS, "NSQ-FIN-004")
    assert answer.returncode == 0, answer.stderr
    return answer.stdout


@pytest.mark.parametrize("identifier", RANDOM_IDS)
def test_explain_prints_the_text_and_transcripts_of_random_ids(explained, identifier):
    entry = behaviours().get(identifier) or requirements()[identifier]
    assert f"{identifier}  {entry.level}" in explained
    assert entry.text in explained
    if identifier in behaviours():
        assert f"  capture: {entry.capture}\n" in explained
    for recording in entry.recordings:
        assert recording in explained


def test_explain_of_a_requirement_lists_its_cases_items_and_broker_lines(explained):
    answer = explained[explained.index("NSQ-FIN-004  MUST"):]
    assert "test_settling_another_clients_message[TOUCH]" in answer
    assert behaviours()["P-TOUCH-03"].text in answer
    assert "reference_broker/protocol_v2.py" in answer


@pytest.mark.parametrize("arguments", [("Q-99",), ("D-12", "NSQ-NOPE-0001"), ("d-12",)])
def test_explain_of_an_unknown_id_is_one_line_and_exit_2(arguments):
    answer = explain(*arguments)
    assert answer.returncode == 2
    assert answer.stdout == ""
    assert answer.stderr.count("\n") == 1 and "unknown ID" in answer.stderr


@pytest.mark.parametrize("arguments", [(), ("--capture", "D-12")])
def test_explain_without_ids_or_with_both_is_one_line_and_exit_2(arguments):
    answer = explain(*arguments)
    assert answer.returncode == 2
    assert answer.stderr.count("\n") == 1 and "give IDs or --capture" in answer.stderr


def test_explain_capture_prints_the_tables_without_collecting_cases():
    answer = explain("--capture")
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout == capture_tables() + "\n"
    total = answer.stdout.splitlines()[len({item.section for item in behaviours().values()}) + 2]
    assert total.startswith(f"| all | {len(behaviours())} | ")


def test_a_missing_suite_dependency_is_one_line_and_exit_2():
    """Installed without the [conformance] extra: the command names what is missing, not a traceback."""
    answer = subprocess.run([sys.executable, "-c", "import sys; sys.modules['pytest'] = None; "
                             "from conformance.__main__ import main; sys.exit(main(['--list']))"],
                            capture_output=True, text=True, timeout=60, cwd=REPO_DIR)
    assert answer.returncode == 2
    assert answer.stderr.count("\n") == 1
    assert "pytest not installed" in answer.stderr and "[conformance]" in answer.stderr


GOOD_ENTRY = {"id": "Q-99", "level": "MUST", "text": "t", "observable": "o", "capture": "monitor", "recordings": [],
              "source": "s"}


@pytest.mark.parametrize("changes, complaint", [
    ({"source": None}, "missing source"),
    ({"capture": None}, "missing capture"),
    ({"level": "MAYBE"}, "level"),
    ({"id": "d99"}, "not a behaviour"),
    ({"recordings": ["r1"]}, "rec-NNNN"),
    ({"level": "MAY", "not_checkable": "why"}, "MUST and SHOULD items only"),
    ({"txt": "x"}, "unknown field"),
    ({"capture": "monitored"}, "none of 'monitor'"),
    ({"capture": "needs a monitor"}, "gives no reason"),
    ({"capture": "maybe: on the disk"}, "none of 'monitor'"),
    ({"capture": "needs a monitor:  "}, "gives no reason"),
    ({"capture": "not on the wire: "}, "gives no reason"),
    ({"capture": "capture cannot judge:"}, "none of 'monitor'"),
    ({"capture": "capture cannot judge:  "}, "gives no reason"),
    ({"capture": "as d-12"}, "behaviour IDs"),
    ({"capture": "as D-12 D-13"}, "behaviour IDs"),
])
def test_a_bad_catalogue_entry_is_named(changes, complaint):
    entry = {key: value for key, value in {**GOOD_ENTRY, **changes}.items() if value is not None}
    with pytest.raises(SpecError, match=complaint):
        _behaviour(Path("example.toml"), entry)
