"""The cross-library report: every driver's report.json of a run, side by side. ``index.html`` is one page, a
library x case matrix coloured per verdict (a cell's title is the case's message or the baseline's explanation;
a click opens the library's own report at the case, a FAIL's pcap link its capture), above it each library's
level of conformance (MUST passed / judged); ``table.md`` is the library x section table of the README."""
from __future__ import annotations

import json
from collections import Counter
from html import escape
from pathlib import Path

from conformance.clients.catalogue import REQUIREMENTS, SECTIONS
from conformance.report.html import COLOURS, ORDER, STYLE, _bar, badge
from conformance.verdicts import FAIL, PASS, UNSUPPORTED, VERDICTS

MATRIX_STYLE = """
.matrix td,.matrix th{border:1px solid #fff;padding:2px 4px;font-size:12px}
.matrix th.lib{writing-mode:vertical-rl;transform:rotate(180deg);height:150px;vertical-align:bottom}
.matrix td.v{width:68px;text-align:center;color:#fff;font-weight:600}
.matrix td.v a{color:#fff;text-decoration:none;display:block}
.matrix td.v a.pcap{font-size:10px;font-weight:400;text-decoration:underline}
.matrix td.differs{outline:3px solid #000;outline-offset:-3px}
.matrix tr.section td{background:#f3f3f3;font-weight:600;padding-top:10px}
.matrix td code{white-space:nowrap}
"""


def load(reports_dir: Path, drivers: list[str]) -> list[dict]:
    """The report.json of each driver that wrote one, in the order given."""
    return [json.loads((reports_dir / driver / "report.json").read_text()) for driver in drivers
            if (reports_dir / driver / "report.json").is_file()]


def write_matrix(reports_dir: Path, documents: list[dict]) -> Path:
    (reports_dir / "index.html").write_text(render_html(documents))
    (reports_dir / "table.md").write_text(render_table(documents))
    return reports_dir / "index.html"


def _cell(document: dict, case: dict | None) -> str:
    if case is None:
        return "<td class='v' style='background:#bdbdbd' title='not run'>-</td>"
    verdict, short = case["verdict"], {"NON-STRICT": "N-STRICT", "UNSUPPORTED": "UNSUPP."}.get(case["verdict"],
                                                                                             case["verdict"])
    differs = case["baseline"] is not None and case["baseline"] != verdict
    title = case["why"] or (case["message"].splitlines()[0] if case["message"] else verdict)
    if case.get("monitors"):
        title += " · monitors: " + ", ".join(sorted({finding["item"] for finding in case["monitors"]}))
    if differs:
        title = f"baseline {case['baseline']}: {title}"
    # a FAIL's capture, beside the report's link: what the client sent, for Wireshark
    pcap = (f"<a class='pcap' href='{escape(document['driver'])}/pcap/{escape(Path(case['pcap']).name)}'>pcap</a>"
            if verdict == FAIL and case.get("pcap") else "")
    return (f"<td class='v{' differs' if differs else ''}' style='background:{COLOURS.get(verdict, '#555')}' "
            f"title='{escape(title, quote=True)}'><a href='{escape(document['driver'])}/report.html#"
            f"{escape(case['id'])}'>{escape(short)}</a>{pcap}</td>")


def conformance_level(document: dict) -> dict[str, tuple[int, int]]:
    """The library's level of conformance: of its MUST cases (the MUSTs, and the MAYs it has, which are judged as
    MUSTs), and of its SHOULD cases, how many PASS: level -> (passed, judged)."""
    levels: dict[str, tuple[int, int]] = {}
    for case in document["cases"]:
        if case["level"] == "MAY" and case["verdict"] == UNSUPPORTED:
            continue
        level = "MUST" if case["level"] in ("MUST", "MAY") else case["level"]
        passed, judged = levels.get(level, (0, 0))
        levels[level] = (passed + (case["verdict"] == PASS), judged + 1)
    return levels


def _level_text(document: dict) -> str:
    levels = conformance_level(document)
    return ", ".join(f"{level} {passed}/{judged}" for level, (passed, judged) in sorted(levels.items()))


def render_html(documents: list[dict]) -> str:
    by_driver = [{case["id"]: case for case in document["cases"]} for document in documents]
    heads = "".join(f"<th class='lib'>{escape(document['library'])}</th>" for document in documents)
    rows = []
    for section, title in SECTIONS.items():
        rows.append(f"<tr class='section'><td colspan='{len(documents) + 2}'>{escape(section)}: "
                    f"{escape(title)}</td></tr>")
        for identifier, requirement in REQUIREMENTS.items():
            if requirement.section == section:
                rows.append(f"<tr><td><code>{escape(identifier)}</code> <span class='req'>{requirement.level}"
                            f"</span></td><td>{escape(requirement.text)}</td>"
                            + "".join(_cell(document, cases.get(identifier))
                                      for document, cases in zip(documents, by_driver, strict=True)) + "</tr>")
    totals = []
    for document in documents:
        counts = Counter(case["verdict"] for case in document["cases"])
        ordered = {verdict: counts.get(verdict, 0) for verdict in VERDICTS}
        differences = document["differences"]
        totals.append(f"<tr><td><b>{escape(document['library'])}</b> <code>{escape(document['driver'])}</code>"
                      f"</td><td><b>{escape(_level_text(document))}</b> passed</td>"
                      f"<td style='width:40%'><div class='bar' style='height:14px;margin:2px 0'>"
                      f"{_bar(ordered)}</div></td><td>"
                      + " ".join(f"{badge(verdict)} {count}" for verdict, count in sorted(
                          counts.items(), key=lambda item: ORDER.get(item[0], 9)))
                      + (f" <b style='color:#c62828'>{len(differences)} differ from the baseline</b>" if differences
                         else "") + "</td></tr>")
    legend = " ".join(badge(verdict) for verdict in ORDER if verdict in COLOURS and verdict not in (
        "PRECONDITION", "NOT RUN"))
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>NSQ client conformance: {len(documents)} "
            f"libraries</title><style>{STYLE}{MATRIX_STYLE}</style></head><body>"
            f"<h1>NSQ client conformance: {len(documents)} libraries x {len(REQUIREMENTS)} cases</h1>"
            "<p class='meta'>The toolkit played nsqd and nsqlookupd; each cell is one library's verdict on one "
            "case (hover: why; click: the library's report with the transcript; a FAIL's pcap link: its capture). "
            "A black frame: the verdict differs from the library's baseline. MUST x/y: of the cases that judge a "
            "MUST (or a MAY the library has, judged as a MUST), how many PASS.</p>"
            f"<p>{legend}</p><table>{''.join(totals)}</table>"
            f"<table class='matrix'><tr><th>case</th><th>requirement</th>{heads}</tr>{''.join(rows)}</table>"
            "</body></html>")


def render_table(documents: list[dict]) -> str:
    """The README's table: a row per section, a column per library, "PASS/cases" then what did not PASS."""
    lines = ["| section | " + " | ".join(document["library"] for document in documents) + " |",
             "|---|" + "---|" * len(documents)]
    for section, title in SECTIONS.items():
        cells = []
        for document in documents:
            cases = [case for case in document["cases"] if case["section"] == section]
            passed = sum(case["verdict"] == PASS for case in cases)
            others = ", ".join(f"{case['id'].removeprefix('NSQC-')} {case['verdict']}" for case in cases
                               if case["verdict"] != PASS)
            cells.append(f"{passed}/{len(cases)}" + (f" ({others})" if others else ""))
        lines.append(f"| {section.removeprefix('NSQC-')}: {title} | " + " | ".join(cells) + " |")
    totals = []
    for document in documents:
        counts = Counter(case["verdict"] for case in document["cases"])
        totals.append(", ".join(f"{counts[verdict]} {verdict}" for verdict in VERDICTS if counts[verdict]))
    lines.append(f"| **all {len(REQUIREMENTS)}** | " + " | ".join(totals) + " |")
    lines.append("| **level: passed/judged** | " + " | ".join(_level_text(document) for document in documents) + " |")
    return "\n".join(lines) + "\n"
