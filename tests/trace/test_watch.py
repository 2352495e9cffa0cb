"""Issue 24 item 3, continuous mode: `nsq-trace watch` takes tcpdump -G-style rotated captures as they appear,
is killed in the middle of a micro-batch's decoding, restarted, killed again in the middle of its lifecycles, and
restarted, and ends with the counts of the batch analysis of all the files and of the truth, its lifecycle tables
the batch analysis's row for row, no file taken twice or missed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from pcap_variants import records, split_by_time, write_pcap
from trace_helpers import PCAPS, REPO, load_truth, truth_mismatches

from spark_analysis.watch.increments import OPEN, batch_of

FILES = 6
# a bound on waiting for what must come, not a time it must take: a watcher (re)started from cold takes its JVM's
# start and a batch or two, which took over 120 s on 2 cores shared with other heavy work
WAIT_SECONDS = 300


@pytest.fixture(scope="module")
def rotated():
    """workload-small.pcap cut at equal time steps: its connections span the files."""
    return split_by_time(records(PCAPS / "workload-small.pcap"), FILES)


def arrive(directory, number, frames):
    """A finished rotation file appears whole, as a rename makes it appear."""
    partial = directory / f".capture-{number:03d}.part"
    write_pcap(partial, frames)
    os.replace(partial, directory / f"capture-{number:03d}.pcap")


def watcher(source, out, log, *extra):
    return subprocess.Popen(
        [sys.executable, "-m", "spark_analysis", "watch", str(source), "--out", str(out), "--settle-seconds", "0",
         "--trigger-seconds", "0.5", *extra],
        cwd=REPO, stdout=log, stderr=subprocess.STDOUT)


def wait_for(condition, process, what):
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        assert process.poll() is None, f"the watcher exited ({process.returncode}) before {what}"
        assert time.monotonic() < deadline, f"no {what} within {WAIT_SECONDS} s"
        time.sleep(0.05)


def published_batch(out):
    latest = out / "latest.json"
    return json.loads(latest.read_text())["batch_id"] if latest.exists() else None


def killed_when(process, condition, what):
    """SIGKILL, as a crash would, once ``condition`` holds."""
    try:
        wait_for(condition, process, what)
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    finally:
        process.kill()


def lifecycle_rows(directory) -> pa.Table:
    """A lifecycle table's rows in one order (a message's consumers as a sorted list: a set)."""
    table = ds.dataset(directory, format="parquet").to_table()
    if "consumers" in table.column_names:
        table = table.set_column(table.schema.get_field_index("consumers"), "consumers", pa.array(
            [sorted(consumers) for consumers in table["consumers"].to_pylist()], table.schema.field("consumers").type))
    return table.sort_by([(name, "ascending") for name in table.column_names if name != "consumers"])


def test_watch_killed_mid_batch_and_restarted_counts_every_file_once(rotated, request, tmp_path):
    source, out = tmp_path / "captures", tmp_path / "live"
    source.mkdir()
    log_path = tmp_path / "watch.log"
    state = out / "watch" / "state" / f"{1:010d}"
    with open(log_path, "w") as log:
        first = watcher(source, out, log, "--no-report")
        arrive(source, 0, rotated[0])
        wait_for(lambda: published_batch(out) == 0, first, "first batch published")
        arrive(source, 1, rotated[1])
        arrive(source, 2, rotated[2])
        # the next batch's decoding tasks have started writing
        killed_when(first, state.exists, "second batch started")
        assert published_batch(out) == 0, "the killed batch must not have been published"

        # the batch replayed: killed once its lifecycle tasks have started carrying messages, before its state's
        # index is written
        second = watcher(source, out, log, "--no-report")
        killed_when(second, (state / "lifecycles").exists, "the replayed batch's lifecycles")
        assert published_batch(out) == 0 and not (state / "index.json").exists()

        arrive(source, 3, rotated[3])
        third = watcher(source, out, log, "--until-idle", "3")
        try:
            wait_for(lambda: (published_batch(out) or 0) >= 2, third, "batches after the restart")
            arrive(source, 4, rotated[4])  # while the restarted watcher runs
            arrive(source, 5, rotated[5])
            assert third.wait(WAIT_SECONDS) == 0, log_path.read_text()[-3000:]
        finally:
            third.kill()

    names = [f"capture-{number:03d}.pcap" for number in range(FILES)]
    latest = json.loads((out / "latest.json").read_text())
    assert [os.path.basename(path) for path in latest["files"]] == names
    taken = []
    for record in sorted((out / "watch" / "batches").iterdir()):
        if int(record.stem) <= latest["batch_id"]:
            taken += [os.path.basename(path) for path in json.loads(record.read_text())["files"]]
    assert sorted(taken) == names, "a file taken twice or never"
    assert latest["new_files"] == [os.path.join(source, names[-1])] or latest["batch_id"] > 2
    parts = {path.name for path in (out / "tables" / "events").iterdir()}
    assert {batch_of(name) for name in parts if name.startswith(OPEN)} == {latest["batch_id"]}
    assert max(batch_of(name) for name in parts) == latest["batch_id"], "a part of a batch never committed"
    assert latest["carried_connections"] > 0, "no connection carried from file to file"

    summary = json.loads((out / "summary.json").read_text())
    truth = load_truth("workload-small")
    assert truth_mismatches(summary, truth) == []
    # the test's own Spark starts only now, beside no watcher
    batch = request.getfixturevalue("analyse")("watch-rotated", [source / name for name in names])
    for key in ("totals", "topics", "violations", "errors", "latency_ms", "connections", "lookupd"):
        assert summary[key] == batch[key], key
    # the files and bytes carried from batch to batch, and read back from the batches' records after each restart
    assert summary["input"]["bytes"] == batch["input"]["bytes"] == sum((source / name).stat().st_size for name in names)
    # every batch's final rows and the last batch's open part: the batch analysis's lifecycle tables
    for name in ("deliveries", "messages"):
        assert lifecycle_rows(out / "tables" / name).equals(
            lifecycle_rows(os.path.join(batch["out_dir"], "tables", name))), name
    written = [path.name for path in (out / "tables" / "messages").iterdir()]
    assert len({batch_of(name) for name in written if not name.startswith(OPEN)}) > 2, "messages never carried"
    assert {batch_of(name) for name in written if name.startswith(OPEN)} == {latest["batch_id"]}

    minutes = json.loads((out / "minutes.json").read_text())
    assert sum(row["published"] for row in minutes) == truth["totals"]["messages_published"]
    assert sum(row["delivered"] for row in minutes) == truth["totals"]["deliveries"]
    assert sum(row["timeouts"] for row in minutes) == truth["totals"]["timeouts_redelivered"]
    first_deliveries = sum(channel["unique_messages_delivered"] for topic in truth["topics"].values()
                           for channel in topic["channels"].values())
    assert sum(row["redelivered"] for row in minutes) == truth["totals"]["deliveries"] - first_deliveries
    violations = {}
    for row in minutes:
        for item, count in row["violations"].items():
            violations[item] = violations.get(item, 0) + count
    assert violations == {item: sum(sides.values()) for item, sides in summary["violations"].items()} and violations
    assert all(row["latency_p50_ms"] <= row["latency_p99_ms"] for row in minutes)

    page = (out / "report.html").read_text()
    assert f"Per minute (batch {latest['batch_id']})" in page and 'http-equiv="refresh"' in page


@pytest.mark.parametrize(("arguments", "error"), [
    (["{tmp}/nowhere", "--out", "{tmp}/o"], "watch: no such directory: {tmp}/nowhere"),
    (["{tmp}", "--out", "{tmp}/o", "--trigger-seconds", "0"],
     "watch: --trigger-seconds must be positive, --settle-seconds and --until-idle not negative"),
    (["{tmp}", "--out", "s3://bucket/live"],
     "watch: --out must be a local directory or a file:// URL (Spark keeps its checkpoint there)"),
])
def test_watch_refuses_bad_arguments_in_one_line(arguments, error, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "spark_analysis", "watch", *(a.format(tmp=tmp_path) for a in arguments)],
        cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"nsq-trace: error: {error.format(tmp=tmp_path)}"]


def test_watch_refuses_in_one_line_to_carry_on_from_another_versions_state(tmp_path):
    """A state pickled by other code may not read back as it was written: its index says which code wrote it
    (state_format), and a watch of other code refuses it, before any batch, and leaves it as it was."""
    source, out = tmp_path / "captures", tmp_path / "live"
    source.mkdir()
    arrive(source, 0, records(PCAPS / "compressed.pcap"))
    state = out / "watch" / "state" / f"{3:010d}"
    state.mkdir(parents=True)
    index = json.dumps({"flows": {}, "last_ts_ns": 0, "previous": 2, "format": "written-by-other-code"})
    (state / "index.json").write_text(index)
    result = subprocess.run(
        [sys.executable, "-m", "spark_analysis", "watch", str(source), "--out", str(out), "--until-idle", "1"],
        cwd=REPO, capture_output=True, text=True, timeout=WAIT_SECONDS)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"nsq-trace watch: {out} holds the state of a watch (batch 3) by another version of nsq-trace, which "
        "cannot carry on from it: watch into a fresh --out")
    assert "Traceback" not in result.stderr
    assert (state / "index.json").read_text() == index and not (out / "latest.json").exists()


def test_watch_stopped_by_sigterm_finishes_its_micro_batch_first(tmp_path):
    source, out = tmp_path / "captures", tmp_path / "live"
    source.mkdir()
    for number, piece in enumerate(split_by_time(records(PCAPS / "compressed.pcap"), 2)):
        arrive(source, number, piece)
    log_path = tmp_path / "watch.log"
    with open(log_path, "w") as log:
        process = watcher(source, out, log, "--no-report")
        try:
            wait_for(lambda: (out / "watch" / "state" / f"{0:010d}").exists(), process, "the first micro-batch")
            process.send_signal(signal.SIGTERM)
            assert process.wait(WAIT_SECONDS) == 0
        finally:
            process.kill()
    output = log_path.read_text()
    assert "finishing the micro-batch under way, then stopping" in output and "Traceback" not in output
    assert published_batch(out) == 0
    assert truth_mismatches(json.loads((out / "summary.json").read_text()), load_truth("compressed")) == []


def test_watch_judges_the_registering_nsqds_across_batches(tmp_path):
    """nsqd's rules of registering in watch as in analyze: the ephemeral channel's consumer leaves in the first
    file, the lookupd connection's last PING comes in the second, and the UNREGISTER never does (R-06)."""
    from test_lookupd_capture import registered_capture

    registered_capture(tmp_path / "whole.pcap", unregistered=False)
    pieces = split_by_time(records(tmp_path / "whole.pcap"), 2)
    source, out = tmp_path / "captures", tmp_path / "live"
    source.mkdir()
    log_path = tmp_path / "watch.log"
    with open(log_path, "w") as log:
        process = watcher(source, out, log, "--no-report", "--http-port", "4151", "--until-idle", "3")
        try:
            arrive(source, 0, pieces[0])
            wait_for(lambda: published_batch(out) == 0, process, "first batch published")
            arrive(source, 1, pieces[1])
            assert process.wait(WAIT_SECONDS) == 0, log_path.read_text()[-3000:]
        finally:
            process.kill()
    assert json.loads((out / "summary.json").read_text())["violations"] == {"R-06": {"broker": 1}}
