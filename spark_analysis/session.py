"""The Spark session an analysis runs on, and the opt-in tuning of the JVM and Python processes.

``spark_session()`` is a plain session: the pipeline (analysis.py) takes any session and knows
nothing of what follows. ``spark_session(tuned=True)``, which ``nsq-trace analyze`` asks for on a
local master, launches its driver JVM and Python processes in ways measured on 2 cores:

- The C1 JIT only (``QUICK_JIT``): an analysis is too short for C2's slower, better code to pay
  off (~10 s of 40 on a 1 GB trace). C1 alone would shrink the code cache to 48 MB, which a long
  session filled ("Out of space in CodeCache for adapters", reported by Spark as an InternalError
  about ``MethodHandle.linkToStatic``), so the usual 240 MB is kept (``FULL_CODE_CACHE``).
- A class-data-sharing archive of Spark's classes, when ``nsq-trace prepare`` built one: the JVM
  maps ~18,000 classes already parsed and verified (session start 5.1-5.6 s -> 2.8-3.2 s). It
  fits one Spark installation and one Java build, and lives under ``$NSQ_TRACE_CACHE`` (default
  ``~/.cache/nsq-trace``). Only plain classes are archived: the JVM generates lambda forms itself.
- Python processes import the installed pyspark instead of Spark's zipped copy: Python caches no
  bytecode for zipped sources, so every worker and each of the three daemons that plan a Python
  data source's read compiled pyspark anew (0.7-0.9 s each). A two-line launcher script drops the
  zips from ``PYTHONPATH``; it is a file on this machine, so it serves local masters only.
- Python workers started at once: a small job of its own (``WARM_UP_JOB``) has one worker per core
  import the analysis while the driver plans the first query (the data source's planning runs
  three Python processes one after another, ~2 s in which one core idles). The workers are
  reused by the analysis's tasks (bench trace ~15.8 -> ~15.0 s; with the changes of the same stop,
  the 9 MB sample's first result ~15 -> ~12.5 s).

Only a JVM that this process launches takes start-up options: under spark-submit they are ignored.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from pyspark import SparkContext
from pyspark.sql import SparkSession

QUICK_JIT = "-XX:TieredStopAtLevel=1"
FULL_CODE_CACHE = "-XX:ReservedCodeCacheSize=240m"
ARCHIVE_LOGS_OFF = "-Xlog:cds=off -Xlog:cds+dynamic=off"
LAUNCHER = """#!/bin/sh
# Spark's zipped pyspark and py4j: the installed copies hold the same code, with cached bytecode.
set -f
kept=
IFS=:
for entry in $PYTHONPATH; do
  case $entry in
    */pyspark.zip|*/py4j-*-src.zip) ;;
    *) kept=${{kept:+$kept:}}$entry ;;
  esac
done
PYTHONPATH=$kept exec {python} "$@"
"""


@contextmanager
def spark_session(
    master: str | None = "local[2]",
    shuffle_partitions: int = 4,
    # The JVM fills its heap before collecting: from object storage the payloads pass through its shuffle, and at 1 GB
    # the JVM alone was 1.3 GB resident; local analyses keep theirs within ~750 MB.
    driver_memory: str = "768m",
    show_progress: bool = True,
    tuned: bool = False,
    driver_java_options: str = "",
) -> Iterator[SparkSession]:
    """A local or cluster session for ``run_analysis``; ``tuned``: see the module's docstring."""
    builder = SparkSession.builder if master is None else SparkSession.builder.master(master)
    launching = SparkContext._gateway is None and "PYSPARK_GATEWAY_PORT" not in os.environ
    if (tuned or driver_java_options) and not launching:
        raise RuntimeError("driver JVM options need a process whose Spark JVM has not started yet")
    options = f"{QUICK_JIT} {FULL_CODE_CACHE} {archive_java_options()}" if tuned else ""
    if options or driver_java_options:
        # defaultJavaOptions, so that a user's extraJavaOptions still apply
        builder = builder.config("spark.driver.defaultJavaOptions", f"{options} {driver_java_options}".strip())
    with ExitStack() as stack:
        # Python workers must run this interpreter (the one with pyarrow and this package), not "python3".
        python = os.environ.get("PYSPARK_PYTHON") or sys.executable
        local = (master or "").startswith("local")
        if tuned and "PYSPARK_PYTHON" not in os.environ and local and spark_is_this_installation():
            python = stack.enter_context(worker_python())
        with _environment_variable("PYSPARK_PYTHON", python):
            session = (
                builder.appName("nsq-trace")
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", str(show_progress).lower())
                .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
                .config("spark.sql.adaptive.enabled", "true")
                .config("spark.driver.memory", driver_memory)
                .config("spark.sql.execution.arrow.maxRecordsPerBatch", "20000")
                .config("spark.sql.session.timeZone", "UTC")
                .getOrCreate()
            )
        warming = None
        try:
            session.sparkContext.setLogLevel("ERROR")
            if tuned:
                warming = threading.Thread(target=_warm_up, args=(session,), name=WARM_UP_JOB, daemon=True)
                warming.start()
            yield session
        finally:
            if warming is not None:
                warming.join()
            session.stop()


WARM_UP_JOB = "nsq-trace: Python workers importing the analysis"


def _warm_up(session: SparkSession):
    context = session.sparkContext
    context.setJobDescription(WARM_UP_JOB)  # the description is this thread's: the analysis's jobs keep theirs
    try:
        parallelism = context.defaultParallelism
        session.range(parallelism, numPartitions=parallelism).mapInArrow(_import_the_analysis, "none INT").collect()
    except Exception:  # noqa: BLE001 - an optimisation only: a failure here is the analysis's to meet and report
        pass


def _import_the_analysis(batches):
    import spark_analysis.analysis  # noqa: F401 - what the tasks of an analysis import first

    for _ in batches:
        pass
    yield from ()


@contextmanager
def _environment_variable(name: str, value: str) -> Iterator[None]:
    """``name`` set to ``value`` while a session starts (the session keeps its own copy)."""
    previous = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            del os.environ[name]
        else:
            os.environ[name] = previous


# -- Python processes -----------------------------------------------------------------------------
def spark_is_this_installation() -> bool:
    """True when Spark's jars and zips come from the pyspark this interpreter imports."""
    import pyspark

    spark_home = os.environ.get("SPARK_HOME")
    installed = os.path.dirname(os.path.abspath(pyspark.__file__))
    return spark_home is None or os.path.realpath(spark_home) == os.path.realpath(installed)


@contextmanager
def worker_python() -> Iterator[str]:
    """The path of a launcher for this interpreter, valid until the context ends."""
    with tempfile.TemporaryDirectory(prefix="nsq-trace-python-") as directory:
        path = os.path.join(directory, "python")
        with open(path, "w") as handle:
            handle.write(LAUNCHER.format(python=shlex.quote(sys.executable)))
        os.chmod(path, 0o755)
        yield path


# -- the class archive -----------------------------------------------------------------------------
def cache_dir() -> str:
    if os.environ.get("NSQ_TRACE_CACHE"):
        return os.environ["NSQ_TRACE_CACHE"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "nsq-trace")


def java_binary() -> str:
    """The java that Spark's launcher scripts run: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    if os.environ.get("JAVA_HOME"):
        return os.path.join(os.environ["JAVA_HOME"], "bin", "java")
    found = shutil.which("java")
    if found is None:
        raise RuntimeError("no java: set JAVA_HOME or put java on PATH (Spark needs Java 17)")
    return found


def archive_path() -> str:
    """An archive fits one Spark installation and one Java build; the name says which."""
    import pyspark

    java = os.path.realpath(java_binary())
    spark_home = os.environ.get("SPARK_HOME") or os.path.dirname(os.path.abspath(pyspark.__file__))
    identity = f"{os.path.realpath(spark_home)}|{pyspark.__version__}|{java}|{os.stat(java).st_mtime_ns}"
    digest = hashlib.sha256(identity.encode()).hexdigest()[:16]
    return os.path.join(cache_dir(), f"spark-{pyspark.__version__}-{digest}.jsa")


def archive_java_options() -> str:
    """Driver JVM options that map the archive, or nothing when there is none yet.

    The JVM checks the archive against its own build and class path, and runs without it (quietly,
    as configured here) when they differ."""
    try:
        archive = archive_path()
    except (OSError, RuntimeError):
        return ""
    return f"-XX:SharedArchiveFile={archive} {ARCHIVE_LOGS_OFF}" if os.path.isfile(archive) else ""


def prepare(step=lambda message: None) -> str:
    """Build the archive for this installation (replacing any old one) and return its path: an
    analysis of a small generated trace records the classes its JVM loads, then ``java
    -Xshare:dump`` archives them (about a minute on 2 cores)."""
    from spark_analysis.analysis import run_analysis
    from spark_analysis.generate import generate

    archive = archive_path()
    os.makedirs(os.path.dirname(archive), exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="nsq-trace-prepare-") as work:
        trace, loaded = os.path.join(work, "sample.pcap"), os.path.join(work, "loaded.classlist")
        generate(trace, 4_000_000, seed=1, drop_fraction=0.001)
        step("recording the classes an analysis loads")
        recording = f"{QUICK_JIT} {FULL_CODE_CACHE} -XX:DumpLoadedClassList={loaded}"
        with spark_session(show_progress=False, driver_java_options=recording) as spark:
            run_analysis(spark, [trace], os.path.join(work, "out"))
            class_path = spark._jvm.java.lang.System.getProperty("java.class.path")
        plain = os.path.join(work, "plain.classlist")
        with open(loaded) as source, open(plain, "w") as target:
            target.writelines(line for line in source if not line.startswith("@"))
        step("archiving them (java -Xshare:dump)")
        partial = os.path.join(os.path.dirname(archive), f".{os.path.basename(archive)}.{os.getpid()}")
        dump = [
            java_binary(),
            "-Xshare:dump",
            f"-XX:SharedClassListFile={plain}",
            f"-XX:SharedArchiveFile={partial}",
            *ARCHIVE_LOGS_OFF.split(),
            "-cp",
            class_path,
        ]
        try:
            subprocess.run(dump, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            os.replace(partial, archive)
        except subprocess.CalledProcessError as exc:
            raise RuntimeError(f"java -Xshare:dump failed: {exc.stderr.strip()[-500:]}") from None
        finally:
            if os.path.exists(partial):
                os.remove(partial)
    return archive
