"""The client report: report.json (the whole run) and report.html (one page: the verdict bar, the cases by section,
each with its transcript), in the broker suite's style (conformance.report.html)."""
from __future__ import annotations

import json
from collections import Counter
from html import escape
from pathlib import Path

from conformance.clients.catalogue import SECTIONS
from conformance.report.html import ORDER, STYLE, _bar, badge
from conformance.verdicts import VERDICTS


def write_reports(directory: Path, document: dict) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    counts = Counter(case["verdict"] for case in document["cases"])
    document = {**document, "counts": {verdict: counts.get(verdict, 0) for verdict in VERDICTS}}
    (directory / "report.json").write_text(json.dumps(document, indent=1))
    (directory / "report.html").write_text(render_html(document))
    return directory


def _transcript(events: list[dict]) -> str:
    classes = {">": "dir-c", "<": "dir-s", "#": "dir-n"}
    rows = "".join(
        f"<tr class='{classes.get(event['direction'], '')}'><td class='n'>{event['at_ms']:.1f} ms</td>"
        f"<td class='n'>{escape(event['connection'])}</td><td class='n'>{escape(event['direction'])}</td>"
        f"<td>{escape(' | '.join(event['lines']))}</td></tr>" for event in events)
    return f"<table class='tx'>{rows}</table>"


def _monitors(findings: list[dict]) -> str:
    """What the catalogue's monitors found in the case's traffic (conformance/clients/monitoring.py)."""
    if not findings:
        return ""
    rows = "".join(
        f"<li><b>{escape(finding['item'])}</b> by the {escape(finding['side'])} on {escape(finding['connection'])}"
        + (" <i>(provoked by the case on purpose)</i>" if finding["declared"] else "")
        + (" <b style='color:#c62828'>(the fake nsqd's: a harness bug)</b>" if finding["side"] == "broker" else "")
        + f": expected {escape(finding['expected'])}; observed {escape(finding['observed'])}</li>"
        for finding in findings)
    return f"<p><b>Monitors</b> (the case's traffic through the catalogue's rules):</p><ul>{rows}</ul>"


def _case(case: dict) -> str:
    expected = case["baseline"]
    differs = expected is not None and expected != case["verdict"]
    return (f"<details id='{escape(case['id'])}'{' open' if differs else ''}><summary>{badge(case['verdict'])} "
            f"<b>{escape(case['id'])}</b> "
            f"<span class='req'>{escape(case['level'])}</span> {escape(case['text'])}"
            + (f" <b style='color:#c62828'>(baseline: {escape(expected)})</b>" if differs else "")
            + "</summary><div class='body'>"
            + f"<p class='req'>observable: {escape(case['observable'])}</p>"
            + f"<p class='req'>source: {escape(case['source'])} · {case['duration_s']} s · case "
            f"<code>{escape(case['test'])}</code></p>"
            + (f"<p><b>Why:</b> {escape(case['why'])}</p>" if case["why"] else "")
            + (f"<pre>{escape(case['message'])}</pre>" if case["message"] else "")
            + _monitors(case["monitors"])
            + (f"<p>pcap: <code>{escape(case['pcap'])}</code></p>" if case["pcap"] else "")
            + "".join(f"<p>driver log: <code>{escape(log)}</code></p>" for log in case["driver_logs"])
            + _transcript(case["transcript"]) + "</div></details>")


def render_html(document: dict) -> str:
    counts = document["counts"]
    sections = []
    for section, title in SECTIONS.items():
        cases = sorted((case for case in document["cases"] if case["section"] == section),
                       key=lambda case: (ORDER.get(case["verdict"], 9), case["id"]))
        if cases:
            sections.append(f"<h2>{escape(section)}: {escape(title)}</h2>" + "".join(map(_case, cases)))
    differences = document["differences"]
    gate = (f"<p><b style='color:#c62828'>{len(differences)} verdict(s) differ from the baseline:</b> "
            + ", ".join(f"<code>{escape(case)}</code>" for case in differences) + "</p>") if differences \
        else "<p><b style='color:#2e7d32'>Every verdict is the baseline's.</b></p>" if document["baseline"] else ""
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>NSQ client conformance: "
            f"{escape(document['library'])}</title><style>{STYLE}</style></head><body>"
            f"<h1>NSQ client conformance: {escape(document['library'])}</h1>"
            f"<p class='meta'>driver <code>{escape(document['driver'])}</code> ({escape(document['language'])}) · "
            f"{len(document['cases'])} cases in {document['wall_time_s']} s · baseline "
            f"<code>{escape(document['baseline'] or 'none')}</code>"
            + (f" · <b>selftest fault {escape(document['fault'])}</b>" if document["fault"] else "") + "</p>"
            f"<div class='bar'>{_bar(counts)}</div><p>"
            + " · ".join(f"{badge(verdict)} {count}" for verdict, count in counts.items() if count) + "</p>"
            + gate + "<p class='meta'>The toolkit played nsqd; each case's transcript is what crossed the wire "
            "(&gt; client to broker, &lt; broker to client, # notes and the driver's reports).</p>"
            + "".join(sections) + "</body></html>")
