"""The tree's citations, checked (``python -m conformance.citations``, run by ``tox -e lint``): every behaviour item
or requirement ID cited resolves to the catalogue; no ID range hides items (``D-01..D-05``, ``NSQ-HB-001/002``:
one grep for ``D-03`` would miss it, and so would ``nsq-conformance explain``); no comment cites a section of a
document that is gone (``§2.13``, ``nsqd-behavior.md``) or points outside the repository (a relative path that
climbs above the repository's root from the file that names it: a user's clone has nothing there).

IDs are looked for in every tracked text file (the fixtures' recordings cite them too); ranges and documents in the
prose: comments and docstrings of Python files, and Markdown, TOML and INI files whole. A plain module: the lint
environment runs it without installing the project.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import sys
import tokenize
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from conformance.catalogue import requirements
from conformance.spec import behaviours, cited_id_pattern

REPO_DIR = Path(__file__).resolve().parent.parent
SELF = "conformance/citations.py"  # its docstrings show what it refuses
PROSE_SUFFIXES = (".md", ".toml", ".ini")
SECTION = re.compile(r"§\s*\d")
# the behaviour documents the catalogue replaced (nsqd-behavior.md, nsqlookupd-behavior.md): gone from the tree
GONE_DOCUMENT = re.compile(r"[\w-]*behaviou?r\.md\b|\bbehaviou?r (?:file|document)\b", re.IGNORECASE)
CLIMB = re.compile(r"(?<![\w./])((?:\.\./)+)[\w.-]+")  # ../x, ../../x: a path relative to its file


def tracked_files() -> list[str]:
    names = subprocess.run(["git", "ls-files", "-z"], capture_output=True, check=True, cwd=REPO_DIR).stdout
    return [name for name in names.decode().split("\0") if name and (REPO_DIR / name).is_file()]


def tracked_texts() -> Iterator[tuple[str, str]]:
    for name in tracked_files():
        try:
            yield name, (REPO_DIR / name).read_text()
        except UnicodeDecodeError:
            continue  # pcaps and other binary golden data


@cache
def range_pattern() -> re.Pattern:
    """An ID followed by ``..`` or a dash and another (``D-01..D-05``, ``P-RST-01..04``), or by ``/`` and a bare
    number (``NSQ-HB-001/002``; ``C-14/C-15`` cites both)."""
    cited = cited_id_pattern().pattern
    return re.compile(rf"(?:{cited})(?:\s*(?:\.\.\.?|–|—)\s*(?:[A-Z]+(?:-[A-Z]+)*-)?\d+|/\d+\b)")


def prose_lines(name: str, text: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of a file's prose: a Python file's comments and docstrings, the other prose files whole."""
    if name.endswith(PROSE_SUFFIXES):
        yield from enumerate(text.splitlines(), 1)
    elif name.endswith(".py"):
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT:
                yield token.start[0], token.string
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
                first = node.body[0]
                if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and \
                        isinstance(first.value.value, str):
                    for offset, line in enumerate(first.value.value.splitlines()):
                        yield first.lineno + offset, line


def unknown_ids() -> tuple[list[str], set[str]]:
    """``path:line: ID`` of every cited ID in neither the catalogue nor the requirements, and every ID cited."""
    pattern = cited_id_pattern()
    known = behaviours().keys() | requirements().keys()
    cited, unknown = set(), []
    for name, text in tracked_texts():
        for number, line in enumerate(text.splitlines(), 1):
            for identifier in pattern.findall(line):
                cited.add(identifier)
                if identifier not in known:
                    unknown.append(f"{name}:{number}: {identifier} is in neither conformance/spec/ nor "
                                   "requirements.toml")
    return unknown, cited


def prose_problems() -> list[str]:
    """``path:line: what`` of every ID range, section citation, gone document and pointer outside the repository in
    the tree's prose (the fixtures' recordings are data: their labels are test_spec.py's ``FIXTURE_LABELS``)."""
    return [problem for name, text in tracked_texts()
            if name.endswith((*PROSE_SUFFIXES, ".py")) and not name.startswith("fixtures/") and name != SELF
            for problem in problems_in(name, text)]


def problems_in(name: str, text: str) -> list[str]:
    """``prose_problems`` of one file."""
    ranges = range_pattern()
    problems = []
    for number, line in prose_lines(name, text):
        where = f"{name}:{number}"
        problems += [f"{where}: the range {match.group(0)!r} hides items: list each ID"
                     for match in ranges.finditer(line)]
        problems += [f"{where}: {match.group(0)!r} cites a section of a document: cite the catalogue's IDs"
                     for match in SECTION.finditer(line)]
        problems += [f"{where}: {match.group(0)!r} is gone: cite the catalogue's IDs"
                     for match in GONE_DOCUMENT.finditer(line)]
        problems += [f"{where}: {match.group(0)!r} points outside the repository" for match in CLIMB.finditer(line)
                     if match.group(1).count("../") > name.count("/")]
    return problems


def main() -> int:
    unknown, _ = unknown_ids()
    problems = unknown + prose_problems()
    for problem in problems:
        print(problem)
    print(f"citations: {len(problems)} problem(s)", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
