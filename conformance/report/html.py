"""The human report: one self-contained HTML page (no scripts, no external files)."""

from __future__ import annotations

import os
import time
from collections import Counter, defaultdict
from html import escape

from conformance.versions import NsqVersion

COLOURS = {"PASS": "#2e7d32", "FAIL": "#c62828", "NON-STRICT": "#ef6c00", "PRECONDITION": "#ad1457",
           "UNSUPPORTED": "#1565c0", "NOT RUN": "#616161", "ERROR": "#6a1b9a", "exercised": "#2e7d32",
           "skipped": "#1565c0", "not covered": "#757575"}
ORDER = {"FAIL": 0, "ERROR": 1, "PRECONDITION": 2, "NON-STRICT": 3, "NOT RUN": 4, "UNSUPPORTED": 5, "PASS": 6}

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1200px;color:#222;padding:0 16px}
h1{font-size:22px;margin-bottom:4px} h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd}
.meta{color:#555} .bar{display:flex;height:26px;border-radius:4px;overflow:hidden;margin:12px 0}
.bar div{color:#fff;font-size:12px;display:flex;align-items:center;justify-content:center;white-space:nowrap}
.badge{display:inline-block;color:#fff;border-radius:3px;padding:0 6px;font-size:12px;font-weight:600}
table{border-collapse:collapse;width:100%} td,th{border-bottom:1px solid #eee;padding:4px 6px;text-align:left;
vertical-align:top} th{background:#fafafa} details{margin:6px 0;border:1px solid #e5e5e5;border-radius:4px}
summary{cursor:pointer;padding:6px 8px;background:#fafafa} .body{padding:8px 12px}
pre{background:#f6f8fa;padding:8px;overflow-x:auto;font-size:12px;margin:4px 0;white-space:pre-wrap}
.tx td{font-family:ui-monospace,monospace;font-size:12px;border:none;padding:1px 6px;white-space:pre-wrap}
.tx td.n{white-space:nowrap;width:1%}
.dir-c{color:#1565c0} .dir-s{color:#2e7d32} .dir-n{color:#777;font-style:italic}
.req{color:#555} code{background:#f0f0f0;padding:0 3px;border-radius:2px}
.death{background:#ffebee;border:2px solid #c62828;border-radius:4px;padding:8px 12px;margin:12px 0}
"""


def badge(label: str) -> str:
    return f'<span class="badge" style="background:{COLOURS.get(label, "#555")}">{escape(label)}</span>'


def _bar(counts: dict) -> str:
    total = sum(counts.values()) or 1
    return "".join(
        f'<div style="width:{100 * count / total:.2f}%;background:{COLOURS[verdict]}" '
        f'title="{verdict} {count}">{f"{verdict} {count}" if count / total > 0.08 else ""}</div>'
        for verdict, count in counts.items() if count)


def _targets(summary: dict) -> str:
    """One verdict bar per program judged: a broker's totals never include an embedded nsqlookupd's cases."""
    return "".join(f"<p><b>{escape(label)}</b></p><div class='bar'>{_bar(counts)}</div><p>" + " · ".join(
        f"{badge(verdict)} {count}" for verdict, count in counts.items() if count) + "</p>"
        for label, counts in summary["targets"].items())


def _deaths(deaths: list[dict]) -> str:
    return "".join(
        f"<div class='death'><b>TARGET DIED during <code>{escape(death['case'])}</code></b> "
        f"({escape(death['target'])}): {escape(death['reason'])}. "
        + escape(death["revived"] or "It was not restarted: later cases on it are NOT RUN.")
        + " Its transcript is in that case's entry below.</div>" for death in deaths)


def _causes(causes: list[dict], several_targets: bool) -> str:
    """Failures grouped by cause, what to fix first at the top (level, then count), each with the items broken: the
    few things a broker does differently, not a wall of cases."""
    if not causes:
        return ""
    rows = "".join(
        f"<tr><td>{len(group['cases'])}</td><td><b>{group['level']}</b></td><td><code>{escape(group['cause'])}</code>"
        + (f" <span class='req'>{escape(', '.join(group['items']))}</span>" if group["items"] else "")
        + (f" <span class='req'>({escape(group['target'])})</span>" if several_targets else "")
        + "</td><td>" + " ".join(f"{badge(verdict)}×{count}" for verdict, count in group["verdicts"].items())
        + "</td><td><details><summary>cases</summary><div class='body'>" + "<br>".join(
            f"<code>{escape(case)}</code>" for case in group["cases"]) + "</div></details></td></tr>"
        for group in causes)
    return ("<h2>Failures by cause</h2><p class='meta'>Each failing case under the first unexpected thing the "
            "target did (frame, error code, HTTP status, close or silence, and what it answered).</p>"
            f"<table><tr><th>cases</th><th>level</th><th>cause</th><th>verdicts</th><th></th></tr>{rows}</table>")


def render_html(document: dict, catalogue: dict) -> str:
    summary = document["summary"]
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>NSQ conformance report</title>"
             f"<style>{STYLE}</style></head><body>",
             "<h1>NSQ conformance report</h1>",
             f"<div class='meta'>target <b>{escape(document['target'])}</b> · profile "
             f"<b>{escape(document['profile']['name'])}</b> ({escape(document['profile']['description'])}) · "
             f"judged as <b>{escape(NsqVersion.parse(document['nsq_version']).label)}</b> · "
             f"{'strict' if document['strict'] else 'non-strict'} · time scale {document['time_scale']:g} · "
             f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(document['started']))} · "
             f"{document['wall_time_s']} s wall</div>",
             _deaths(summary["target_deaths"]),
             _targets(summary),
             "<p>Requirements: " + " · ".join(
                 f"{sum(row['status'] == status for row in document['coverage'])} {status}"
                 for status in ("exercised", "skipped", "not covered"))
             + f" (of {len(document['coverage'])}; see <a href='#coverage'>coverage</a>)</p>"]
    if summary["unexpected_failures"]:
        parts.append(f"<p><b>{len(summary['unexpected_failures'])} case(s) failed that are not in the "
                     f"baseline</b>: the run's exit status is 1.</p>")
    for why in summary["incomplete"]:
        parts.append(f"<p><b>The gate is not passed, the run is incomplete</b>: {escape(why)}. Exit status 1.</p>")
    if summary["baseline_now_passing"]:
        parts.append("<p>Baseline cases that now pass (remove them from the baseline): " + ", ".join(
            f"<code>{escape(case)}</code>" for case in summary["baseline_now_passing"]) + "</p>")
    parts.append("<p class='meta'>Verdicts: PASS; FAIL = a MUST requirement is broken; NON-STRICT = only a "
                 "SHOULD or nsqd's exact wording differs, or the broker behaves as another nsqd release (FAIL with "
                 "--strict); PRECONDITION = a setup step (a PUB, "
                 "SUB, IDENTIFY or topic the case needed) failed, so the requirement could not be tested; "
                 "UNSUPPORTED = an optional capability the target does not offer; NOT RUN = the target died during "
                 "an earlier case and was not restarted; ERROR = the harness could not reach the target.</p>")
    parts.append(_causes(summary["causes"], len({group["target"] for group in summary["causes"]}) > 1))

    if "compare" in summary:
        parts.append(_differences(summary["compare"], document["cases"]))
    parts.append(_sections(document["cases"]))
    parts.append("<h2>Cases</h2>")
    cases = sorted(document["cases"], key=lambda case: (ORDER[case["verdict"]], case["id"]))
    for case in cases:
        parts.append(_case(case, catalogue, document["started"]))

    parts.append("<h2 id='coverage'>Requirement coverage</h2><table><tr><th>ID</th><th>level</th><th>requirement</th>"
                 "<th>source</th><th>status</th><th>verdicts</th></tr>")
    for row in document["coverage"]:
        verdicts = " ".join(f"{badge(verdict)}×{count}" for verdict, count in sorted(row["verdicts"].items()))
        why = f"<br><span class='req'>{escape(row['why'])}</span>" if row["why"] else ""
        parts.append(f"<tr><td><code>{row['id']}</code></td><td>{row['level']}</td><td>{escape(row['text'])}"
                     f"</td><td>{escape(row['source'])}</td><td>{badge(row['status'])}{why}</td>"
                     f"<td>{verdicts}</td></tr>")
    parts.append("</table></body></html>")
    return "\n".join(parts)


def _case(case: dict, catalogue: dict, started: float) -> str:
    requirement_lines = "".join(
        f"<div class='req'><code>{rid}</code> <b>{catalogue[rid].level}</b> {escape(catalogue[rid].text)} "
        f"<i>(source {escape(catalogue[rid].source)}; {_recordings(catalogue[rid].recordings)})</i></div>"
        for rid in case["requirements"] if rid in catalogue)
    body = [requirement_lines]
    if case["doc"]:
        body.append(f"<p>{escape(case['doc'])}</p>")
    if case.get("cause"):
        body.append(f"<p>cause: <code>{escape(case['cause'])}</code></p>")
    if case.get("broken"):
        body.append(f"<p>items broken: <code>{escape(', '.join(case['broken']))}</code></p>")
    if case["message"]:
        body.append(f"<b>expected vs actual</b><pre>{escape(case['message'][:4000])}</pre>")
    if case["baseline"]:
        body.append("<p><i>listed in the baseline (expected failure)</i></p>")
    if case["pcap"]:
        body.append(f"<p>pcap of the exchange: <a href='{escape(_relative(case['pcap']))}'>"
                    f"{escape(os.path.basename(case['pcap']))}</a></p>")
    compared = case.get("compare")
    if compared and compared["status"] == "different":
        body.append(f"<b>differs from {escape(compared['against'])}</b> (verdict there: {badge(compared['verdict'])})"
                    f"<pre>{escape(chr(10).join(compared['diff'][:400]) or compared['message'][:4000])}</pre>")
    if case["transcript"]:
        rows = []
        for event in case["transcript"]:
            css = {">": "dir-c", "<": "dir-s"}.get(event["direction"], "dir-n")
            arrow = {">": "C → S", "<": "S → C"}.get(event["direction"], "")
            lines = "<br>".join(escape(line) for line in event["lines"])
            rows.append(f"<tr class='{css}'><td class='n'>{event['at_ms']:.1f} ms</td><td class='n'>"
                        f"{escape(event['connection'])}</td><td class='n'>{arrow}</td><td>{lines}</td></tr>")
        body.append("<b>wire transcript</b> (time since the case started; connection A, B, ... or HTTP; "
                    "C → S = client to server; decoded commands and frames)"
                    f"<table class='tx'>{''.join(rows)}</table>")
    opened = " open" if case["verdict"] in ("FAIL", "ERROR", "PRECONDITION") else ""
    return (f"<details{opened}><summary>{badge(case['verdict'])} <code>{escape(case['id'])}</code> "
            f"<span class='req'>{' '.join(case['requirements'])} · {case['duration_s']:.2f} s</span></summary>"
            f"<div class='body'>{''.join(body)}</div></details>")


def _differences(compared: dict, cases: list[dict]) -> str:
    """Differential mode: the cases whose normalised transcripts (or verdicts) differ, each linked to its diff."""
    different = [case for case in cases if (case.get("compare") or {}).get("status") == "different"]
    rows = "".join(
        f"<tr><td><code>{escape(case['id'])}</code></td><td>{badge(case['verdict'])}</td>"
        f"<td>{badge(case['compare']['verdict'])}</td><td>{len(case['compare']['diff'])}</td></tr>"
        for case in sorted(different, key=lambda case: case["id"]))
    table = (f"<table><tr><th>case</th><th>verdict on the target</th><th>verdict on {escape(compared['against'])}"
             f"</th><th>diff lines</th></tr>{rows}</table>" if rows else "")
    return (f"<h2>Differences from {escape(compared['against'])}</h2><p>{compared['same']} case(s) the same, "
            f"{len(compared['different'])} different, {compared['not_compared']} not compared (IDs, timestamps, "
            f"ports and the cases' topic prefixes masked; each case's diff is in its entry below).</p>{table}")


def _sections(cases: list[dict]) -> str:
    """Verdicts per catalogue section (the section of a case's first requirement), as small bars."""
    by_section: dict[str, Counter] = defaultdict(Counter)
    for case in cases:
        by_section[case["requirements"][0].split("-")[1]][case["verdict"]] += 1
    rows = []
    for section, counts in sorted(by_section.items()):
        total = sum(counts.values())
        bar = "".join(f'<div style="width:{100 * counts[verdict] / total:.2f}%;background:{COLOURS[verdict]}" '
                      f'title="{verdict} {counts[verdict]}"></div>' for verdict in ORDER if counts[verdict])
        label = ", ".join(f"{counts[verdict]} {verdict}" for verdict in ORDER if counts[verdict])
        rows.append(f"<tr><td><code>{section}</code></td><td style='width:55%'><div class='bar' "
                    f"style='height:12px;margin:3px 0'>{bar}</div></td><td>{label}</td></tr>")
    return f"<h2>By section</h2><table>{''.join(rows)}</table>"


def _recordings(recordings) -> str:
    return f"nsqd recordings {', '.join(recordings)}" if recordings else "not in the nsqd recordings"


def _relative(path: str) -> str:
    """pcaps live under the reports directory; link relative to report.html."""
    marker = os.sep + "pcap" + os.sep
    return "pcap/" + path.split(marker, 1)[1] if marker in path else path
