"""``nsq-conformance explain ID [ID ...]``: what a behaviour item (``D-12``) or a suite requirement
(``NSQ-FIN-004``) means, the cases that check it, the reference broker's lines that implement it, the trace
checks and monitors that watch it, whether a capture can judge it, and the recordings of the real nsqd that show it.
``nsq-conformance explain --capture``: how many items of each catalogue section a capture can judge (the tables
docs/monitors.md holds).

Exit status: 0; 2 for an unknown ID or a bad option (one line on stderr).
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

from conformance.catalogue import requirements
from conformance.spec import (
    CANNOT_JUDGE,
    CAPTURE_KINDS,
    MONITOR,
    NEEDS_MONITOR,
    SpecError,
    behaviour_ids_of,
    behaviours,
    cited_id_pattern,
    requirements_of,
)

PACKAGE_DIR = Path(__file__).parent
REPO_DIR = PACKAGE_DIR.parent
BROKER_DIR = REPO_DIR / "reference_broker"
TRACE_DIR = REPO_DIR / "spark_analysis"
TRANSCRIPT_FILES = (REPO_DIR / "fixtures" / "transcripts.jsonl", REPO_DIR / "fixtures" / "transcripts-cluster.jsonl")


@dataclass
class Explanation:
    id: str
    kind: str  # "behaviour" or "requirement"
    level: str
    text: str
    details: list[tuple[str, str]]  # (label, value) lines under the text
    related: list[str]  # "D-12 MUST <text>" or "NSQ-FIN-004 MUST <text>"
    cases: list[str]
    broker_lines: list[str]
    trace_checks: list[str]
    transcripts: list[str]
    monitors: list[str]  # the catalogue's monitors (nsq_protocol.monitors) that judge it in every transcript


def collect_cases(pytest_options: list[str]) -> dict[str, list[str]]:
    """requirement ID -> node IDs of the cases marked with it (pytest collection of conformance/cases, no run)."""
    import pytest

    from conformance.plugin import case_requirements

    cases: dict[str, list[str]] = {}

    class Collector:
        def pytest_collection_finish(self, session):
            for item in session.items:
                for requirement_id in case_requirements(item):
                    cases.setdefault(requirement_id, []).append(item.nodeid)

    code = pytest.main([str(PACKAGE_DIR / "cases"), "-c", str(PACKAGE_DIR / "suite.ini"), "--rootdir",
                        str(PACKAGE_DIR), "-p", "no:cacheprovider", "-p", "conformance.plugin", "--collect-only",
                        "-q", "--nsq-embedded", *pytest_options], plugins=[Collector()])
    if code not in (0, 5):
        raise RuntimeError(f"collecting the cases failed (pytest exit status {code})")
    return cases


@cache
def client_cases() -> dict[str, list[str]]:
    """NSQC item ID -> the client cases marked with it (``@pytest.mark.nsqc``), read from the source: collecting
    them needs a driver."""
    cases: dict[str, list[str]] = {}
    for path in sorted((PACKAGE_DIR / "clients" / "cases").glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef):
                for decorator in node.decorator_list:
                    if isinstance(decorator, ast.Call) and ast.unparse(decorator.func).endswith("mark.nsqc"):
                        identifier = decorator.args[0].value
                        cases.setdefault(identifier, []).append(f"clients/cases/{path.name}::{node.name}")
    return cases


@cache
def _citations(directory: Path) -> dict[str, list[str]]:
    """ID -> ``path:line: text`` of every line of a Python file under ``directory`` that cites it (read once per
    directory: ``explain`` of every ID would read the tree once per ID)."""
    pattern = cited_id_pattern()
    found: dict[str, list[str]] = {}
    for path in sorted(directory.rglob("*.py")):
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for identifier in dict.fromkeys(pattern.findall(line)):
                found.setdefault(identifier, []).append(f"{path.relative_to(REPO_DIR)}:{number}: {line.strip()}")
    return found


def citing_lines(directory: Path, identifiers: tuple[str, ...]) -> list[str]:
    if not directory.is_dir():
        return [f"({directory.name}/ is not next to this conformance package)"]
    citations = _citations(directory)
    return list(dict.fromkeys(line for identifier in identifiers for line in citations.get(identifier, ())))


@cache
def transcript_titles() -> dict[str, str]:
    titles = {}
    for path in TRANSCRIPT_FILES:
        if path.is_file():
            for line in path.read_text().splitlines():
                record = json.loads(line)
                titles[record["id"]] = record["title"]
    return titles


def _transcripts(recordings) -> list[str]:
    titles = transcript_titles()
    return [f"{recording}  {titles.get(recording, '(not in fixtures/)')}" for recording in recordings]


def explain(identifier: str, cases: dict[str, list[str]]) -> Explanation:
    if identifier in behaviours():
        item = behaviours()[identifier]
        mapped = requirements_of(identifier)
        details = [("observable", item.observable), ("capture", item.capture),
                   *((f"capture of {restated}", behaviours()[restated].capture) for restated in item.restates),
                   ("source", item.source), ("catalogue", f"conformance/spec/{item.section}.toml")]
        if item.not_checkable:
            details.append(("not checkable black-box", item.not_checkable))
        return Explanation(
            item.id, "behaviour", item.level, item.text, details,
            [f"{r.id} {r.level} {r.text}" for r in mapped],
            sorted({f"conformance/{case}" for r in mapped for case in cases.get(r.id, ())}
                   | {f"conformance/{case}" for case in cases.get(identifier, ())}),
            citing_lines(BROKER_DIR, (identifier,)), citing_lines(TRACE_DIR, (identifier,)),
            _transcripts(item.recordings), _monitors(identifier))
    if identifier in requirements():
        requirement = requirements()[identifier]
        items = behaviour_ids_of(requirement)
        return Explanation(
            requirement.id, "requirement", requirement.level, requirement.text,
            [("source", requirement.source), ("catalogue", "conformance/requirements.toml")],
            [_summary(i) for i in items],
            sorted(f"conformance/{case}" for case in cases.get(identifier, ())),
            citing_lines(BROKER_DIR, (identifier, *items)), citing_lines(TRACE_DIR, (identifier, *items)),
            _transcripts(requirement.recordings), _monitors(*items))
    raise KeyError(identifier)


def _monitors(*items: str) -> list[str]:
    from nsq_protocol.monitors import CLIENT_MONITORS, LOOKUPD_MONITORS, MONITORS
    return [f"{monitor.__module__}.{monitor.__name__} ({', '.join(monitor.ITEMS)}): "
            f"{' '.join((monitor.__doc__ or '').split()).split('. ')[0]}" for monitor in
            (*MONITORS, *CLIENT_MONITORS, *LOOKUPD_MONITORS) if set(monitor.ITEMS) & set(items)]


def capture_tables() -> str:
    """Per catalogue section, how many items a capture can judge (each ``capture`` kind), then the items a monitor
    judges and which monitors: Markdown, as docs/monitors.md holds it."""
    from nsq_protocol.monitors import CLIENT_MONITORS, LOOKUPD_MONITORS, MONITORS

    sections: dict[str, list] = {}
    for item in behaviours().values():
        sections.setdefault(item.section, []).append(item)
    sections["all"] = list(behaviours().values())
    counts = ["| catalogue section | items | on the wire | with a monitor | needs a monitor | capture cannot judge | "
              "not on the wire | as other items |", "|---|---|---|---|---|---|---|---|"]
    for section, items in sorted(sections.items(), key=lambda entry: (entry[0] == "all", entry[0])):
        kinds = {kind: sum(item.capture_kind == kind for item in items) for kind in CAPTURE_KINDS}
        counts.append(f"| {section} | {len(items)} | {kinds[MONITOR] + kinds[NEEDS_MONITOR] + kinds[CANNOT_JUDGE]} | "
                      + " | ".join(str(kinds[kind]) for kind in CAPTURE_KINDS) + " |")
    judged = ["| catalogue section | items judged by a monitor | monitors |", "|---|---|---|"]
    for section, items in sorted(sections.items()):
        monitored = sorted(item.id for item in items if item.capture_kind == MONITOR)
        if monitored and section != "all":
            names = sorted({monitor.__name__ for monitor in (*MONITORS, *CLIENT_MONITORS, *LOOKUPD_MONITORS)
                            if set(monitor.ITEMS) & set(monitored)})
            judged.append(f"| {section} ({len(items)} items) | {', '.join(monitored)} | {', '.join(names)} |")
    return "\n".join(counts) + "\n\n" + "\n".join(judged)


def _summary(behaviour_id: str) -> str:
    item = behaviours().get(behaviour_id)
    return f"{behaviour_id} {item.level} {item.text}" if item else f"{behaviour_id} (not in the catalogue)"


def render(explanation: Explanation) -> str:
    related = "requirements that judge it" if explanation.kind == "behaviour" else "behaviour items it judges"
    out = [f"{explanation.id}  {explanation.level}  ({explanation.kind})", f"  {explanation.text}"]
    out += [f"  {label}: {value}" for label, value in explanation.details]
    for title, lines in ((related, explanation.related), ("cases", explanation.cases),
                         ("reference broker", explanation.broker_lines), ("trace checks", explanation.trace_checks),
                         ("monitors", explanation.monitors),
                         ("recordings of the real nsqd or nsqlookupd (fixtures/)", explanation.transcripts)):
        out.append(f"{title} ({len(lines)}):")
        out += [f"  {line}" for line in lines] or ["  none"]
    return "\n".join(out)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="nsq-conformance explain", description=__doc__.split("\n\n")[0])
    parser.error = lambda message: parser.exit(2, f"{parser.prog}: error: {message}\n")
    parser.add_argument("ids", nargs="*", metavar="ID", help="a behaviour item (D-12) or a requirement (NSQ-FIN-004)")
    parser.add_argument("--json", action="store_true", help="one JSON object per ID, keyed by ID")
    parser.add_argument("--capture", action="store_true",
                        help="instead of IDs: per catalogue section, the items a capture can judge (Markdown tables)")
    args = parser.parse_args(argv)
    if bool(args.ids) == args.capture:
        parser.error("give IDs or --capture")
    try:
        if args.capture:
            print(capture_tables())
            return 0
        unknown = [i for i in args.ids if i not in behaviours() and i not in requirements()]
    except SpecError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    if unknown:
        print(f"{parser.prog}: error: unknown ID {', '.join(unknown)} (neither a behaviour item of "
              "conformance/spec/ nor a requirement of conformance/requirements.toml)", file=sys.stderr)
        return 2
    try:
        cases = {**_quiet(collect_cases, []), **client_cases()}
    except RuntimeError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    explanations = [explain(identifier, cases) for identifier in args.ids]
    if args.json:
        print(json.dumps({e.id: asdict(e) for e in explanations}, indent=1))
    else:
        print("\n\n".join(render(e) for e in explanations))
    return 0


def _quiet(function, *args):
    """pytest's collection report goes to stdout; explain prints only its own answer."""
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        return function(*args)
