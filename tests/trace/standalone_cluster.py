"""A Spark standalone cluster for the trace tests: a master and workers started by the test on loopback, each worker
with its own private directories (work, local/shuffle, temp, current directory), sharing no disk with the driver."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pyspark
from object_store import free_port


@dataclass(frozen=True)
class Cluster:
    master: str  # spark://127.0.0.1:<port>
    worker_dirs: list[pathlib.Path]


def spark_class(main: str, *args: str, env: dict[str, str], cwd: pathlib.Path, log: pathlib.Path) -> subprocess.Popen:
    spark_home = os.path.dirname(pyspark.__file__)
    with open(log, "wb") as output:
        return subprocess.Popen([os.path.join(spark_home, "bin", "spark-class"), main, *args], cwd=cwd, env=env,
                                stdout=output, stderr=subprocess.STDOUT)


@contextlib.contextmanager
def standalone_cluster(root: pathlib.Path, workers: int, environment: dict[str, str]) -> Iterator[Cluster]:
    """``environment``: what the workers (and so their executors and Python workers) see beyond a plain one."""
    base = {name: os.environ[name] for name in ("PATH", "JAVA_HOME", "LANG") if name in os.environ}
    base.update(SPARK_HOME=os.path.dirname(pyspark.__file__), SPARK_LOCAL_IP="127.0.0.1", **environment)
    port, ui_port = free_port(), free_port()
    processes = []
    try:
        master_dir = root / "master"
        master_dir.mkdir(parents=True)
        processes.append(spark_class("org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                                     str(port), "--webui-port", str(ui_port), env=base, cwd=master_dir,
                                     log=master_dir / "master.log"))
        worker_dirs = []
        for index in range(workers):
            private = root / f"worker-{index}"
            for name in ("work", "local", "tmp"):
                (private / name).mkdir(parents=True)
            env = {**base, "SPARK_LOCAL_DIRS": str(private / "local"), "TMPDIR": str(private / "tmp"),
                   "SPARK_WORKER_DIR": str(private / "work")}
            processes.append(spark_class("org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}",
                                         "--host", "127.0.0.1", "--cores", "1", "--memory", "1g", "--webui-port",
                                         str(free_port()), "--work-dir", str(private / "work"), env=env, cwd=private,
                                         log=private / "worker.log"))
            worker_dirs.append(private)
        deadline = time.monotonic() + 120
        while _alive_workers(ui_port) < workers:
            if time.monotonic() > deadline or any(process.poll() is not None for process in processes):
                raise RuntimeError(f"the standalone cluster did not come up: see {root}/*/*.log")
            time.sleep(0.5)
        yield Cluster(f"spark://127.0.0.1:{port}", worker_dirs)
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()


def _alive_workers(ui_port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as answer:
            return json.load(answer).get("aliveworkers", 0)
    except OSError:
        return 0
