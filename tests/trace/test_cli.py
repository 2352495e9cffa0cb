"""nsq-trace on the command line: flags, errors, the report."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from trace_helpers import PCAPS, REPO

from spark_analysis.analysis import run_analysis
from spark_analysis.report.summary import message_events


def nsq_trace(*args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "spark_analysis", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    "args,message",
    [
        (["analyze", "pcaps/compressed.pcap"], "the following arguments are required: --out"),
        (["analyze", "pcaps/compressed.pcap", "--out", "x", "--nsq-port", "99999"], "invalid port '99999'"),
        (["generate", "--size", "lots", "-o", "x.pcap"], "invalid size 'lots'"),
        (["generate", "--size", "1MB", "-o", "x/out.pcap"], "-o x/out.pcap: no such directory x"),
        (["analyze", "nowhere.pcap", "--out", "x"], "no such capture file: nowhere.pcap"),
        (["analyze", "pcaps/compressed.pcap", "--out", "x", "--storage-option", "region"],
         "storage option 'region' is not key=value"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_bad_flags_give_one_line_and_exit_status_2(args, message):
    result = nsq_trace(*args, timeout=60)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and message in result.stderr
    assert not (REPO / "x").exists()  # nothing made of a command refused


def test_a_missing_output_place_is_one_line_before_spark_starts(tmp_path):
    (tmp_path / "file").write_text("")
    result = nsq_trace("analyze", "pcaps/compressed.pcap", "--out", str(tmp_path / "file" / "out"), timeout=60)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and str(tmp_path / "file") in result.stderr


def test_analyze_end_to_end_with_a_corrupt_file_among_good_ones(tmp_path):
    cut = tmp_path / "cut.pcap"
    cut.write_bytes((PCAPS / "compressed.pcap").read_bytes()[:150_000])
    out = tmp_path / "out"
    result = nsq_trace("analyze", str(cut), str(PCAPS / "workload-small.pcap"), "--out", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    assert re.search(r"done: \d+ NSQ connections", result.stderr)
    summary = (out / "summary.json").read_text()
    assert '"pcap_truncated_record": 1' in summary
    html = (out / "report.html").read_text()
    assert html.count('<img src="data:image/png;base64,') == 7
    assert "<td><b>P-FIN-04</b></td><td>client</td>" in html
    events = message_events(json.loads(summary)["totals"])
    header = html[html.index("<h1>"):html.index("<h2>")]  # the inputs and figures, as a table
    assert f"<code>{cut}</code><br><code>{PCAPS / 'workload-small.pcap'}</code>" in header
    assert f"<tr><th>message events</th><td>{events:,} (" in header and events > 0


def test_report_names_violations_by_item_and_side(spark, tmp_path):
    """The workload FINs two IDs it never got, on purpose: the monitors name the client, with the frames."""
    summary = run_analysis(spark, [str(PCAPS / "compressed.pcap")], str(tmp_path), report=True)
    html = (tmp_path / "report.html").read_text()
    assert summary["violations"] == {"P-FIN-04": {"client": 2}}
    assert re.search(r"<td><b>P-FIN-04</b></td><td>client</td><td>2</td><td>MUST: FIN of an ID that is not in "
                     r"flight.*nsq-conformance explain P-FIN-04", html)
    examples = html[html.index("with the frames that show them"):]
    assert examples.count("<pre>&lt; E_FIN_FAILED id=") == 2, examples[:2000]
    violations = pq.read_table(tmp_path / "tables" / "violations")
    assert violations.num_rows == 2 and set(violations["item"].to_pylist()) == {"P-FIN-04"}


def _step_output(stderr_is_terminal: bool) -> bytes:
    """What `nsq-trace`'s step line writes on stderr, a terminal's or a pipe's."""
    code = "from spark_analysis.cli import _progress; _progress()('judging: 1 of 2 rows')"
    if not stderr_is_terminal:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, cwd=REPO, timeout=60).stderr
    main, terminal = pty.openpty()
    with subprocess.Popen([sys.executable, "-c", code], stderr=terminal, cwd=REPO) as child:
        os.close(terminal)
        assert child.wait(timeout=60) == 0
    written = b""
    while True:
        try:
            chunk = os.read(main, 4096)
        except OSError:  # the terminal's other end closed: all read
            break
        if not chunk:
            break
        written += chunk
    os.close(main)
    return written


def test_a_step_line_on_a_terminal_starts_over_sparks_progress_bar():
    """Spark's progress bar stays on its line (no newline) while a job runs; a judging progress line printed then
    erases it first, and Spark draws it again below."""
    on_terminal, on_pipe = _step_output(True), _step_output(False)
    assert on_terminal.startswith(b"\r\x1b[2K") and b"judging: " in on_terminal  # the numbers in colour
    assert not on_pipe.startswith(b"\r") and b"judging: 1 of 2 rows" in on_pipe
