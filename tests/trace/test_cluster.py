"""The analysis on a Spark standalone cluster whose processes share no disk: a master and two workers started here,
each worker with private directories; the captures and every output only on an S3-compatible server (moto's, its
own process on loopback); the driver told nothing but URLs. Every Python process of the run records each local
file it opens that names the input or the output (no_local_io/sitecustomize.py): there must be none."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

from object_store import CREDENTIALS, moto_server
from standalone_cluster import standalone_cluster
from trace_helpers import PCAPS, REPO, load_truth, truth_mismatches

HOOK = pathlib.Path(__file__).parent / "no_local_io"
WATCHED = "nsq-captures,nsq-analysis,.pcap,.parquet,summary.json,report.html"


def watching(log: pathlib.Path) -> dict[str, str]:
    return {"NSQ_TRACE_OPEN_LOG": str(log), "NSQ_TRACE_WATCHED": WATCHED, "PYTHONPATH": str(HOOK)}


def test_the_hook_records_a_local_open_of_the_input(tmp_path):
    log = tmp_path / "opens.log"
    code = "open('workload.pcap', 'w').close(); open('other.txt', 'w').close()"
    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={**os.environ, **watching(log)}, check=True)
    lines = log.read_text().splitlines()
    assert len(lines) == 2 and " started in " in lines[0] and lines[1].endswith(" opened workload.pcap")


def test_analysis_on_a_standalone_cluster_sharing_no_disk(tmp_path):
    log = tmp_path / "opens.log"
    with moto_server() as store:
        store.upload(PCAPS / "compressed.pcap", "s3://nsq-captures/minutes/compressed.pcap")
        store.upload(PCAPS / "cluster.pcap", "s3://nsq-captures/elsewhere/cluster.pcap")  # outside the glob
        store.bucket("nsq-analysis")
        with standalone_cluster(tmp_path / "cluster", 2, {**CREDENTIALS, **watching(log)}) as cluster:
            driver = tmp_path / "driver"
            driver.mkdir()
            environment = {**os.environ, **store.environment, **watching(log), "SPARK_LOCAL_IP": "127.0.0.1",
                           "PYTHONPATH": f"{HOOK}:{REPO}", "TMPDIR": str(driver)}
            result = subprocess.run(
                [sys.executable, "-m", "spark_analysis", "analyze", "s3://nsq-captures/minutes/*.pcap",
                 "--out", "s3://nsq-analysis/run1", "--master", cluster.master, "--split-size", "64KiB",
                 "--shuffle-partitions", "2"],
                cwd=driver, env=environment, capture_output=True, text=True, timeout=600)
            assert result.returncode == 0, result.stderr[-3000:]
            summary = json.loads(store.storage.read_text("s3://nsq-analysis/run1/summary.json"))
            written = store.listing("s3://nsq-analysis/run1")
    assert truth_mismatches(summary, load_truth("compressed")) == []
    assert summary["violations"] == {"P-FIN-04": {"client": 2}}
    assert summary["input"]["files"] == ["s3://nsq-captures/minutes/compressed.pcap"]
    assert {"nsq-analysis/run1/report.html", "nsq-analysis/run1/tables/messages/part-00000.parquet"} <= set(written)
    lines = log.read_text().splitlines()
    assert [line for line in lines if " opened " in line] == []
    # the hook ran in the driver and in Python workers of executors on both workers, each in its private directory
    for worker in cluster.worker_dirs:
        assert any(f" started in {worker}/work/app-" in line for line in lines), worker
    assert any(f" started in {driver}:" in line for line in lines)
    leftovers = [path for path in tmp_path.rglob("*")
                 if path.name.endswith((".pcap", ".parquet")) or path.name in ("summary.json", "report.html")]
    assert leftovers == []
