"""Start-up options for the driver JVM that pyspark launches: quick JIT and a class-data-sharing archive.

A local analysis runs on a driver JVM that starts cold. On traces of a few GB, loading and
compiling Spark's classes costs more than the work itself: measured on 2 cores, the session took
6-9 s to start and the first jobs ran several times slower than the same jobs run again. Two stock
HotSpot features cut that cost:

- ``-XX:TieredStopAtLevel=1``: only the quick C1 compiler. C2's slower, better code does not pay
  off within one analysis.
- Application class-data sharing (JDK 13+ dynamic archives): the first session records the classes
  it loaded into an archive when its JVM exits. Later JVMs map that archive instead of loading and
  verifying the classes again. The archive is keyed by the Spark and Java installations. It is
  written under a temporary name and renamed only after the JVM has exited cleanly, and a JVM that
  cannot use it runs without it.

Under spark-submit the driver JVM is already running, so nothing here applies.
``NSQ_TRACE_JVM_CACHE`` names the archive directory (default ``~/.cache/nsq-trace``); ``off``
disables the archive.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess

QUICK_JIT = "-XX:TieredStopAtLevel=1"
# The JVM warns about every class it cannot archive (old bytecode, signed jars); nothing to act on.
QUIET_CDS = "-Xlog:cds=off -Xlog:cds+dynamic=off"
EXIT_TIMEOUT_SECONDS = 120


class DriverJvm:
    """The options for one driver JVM launch and, after it stops, the archive it recorded."""

    def __init__(self, cache_dir: str | None = None):
        setting = cache_dir or os.environ.get("NSQ_TRACE_JVM_CACHE") or _default_cache_dir()
        self.archive = None if setting == "off" else os.path.join(setting, _archive_name())
        self.recording = None  # the temporary archive this JVM writes at exit

    def java_options(self) -> str:
        if self.archive is None:
            return QUICK_JIT
        if os.path.isfile(self.archive):
            return f"{QUICK_JIT} {QUIET_CDS} -XX:SharedArchiveFile={self.archive}"
        os.makedirs(os.path.dirname(self.archive), exist_ok=True)
        self.recording = f"{self.archive}.{os.getpid()}.partial"
        return f"{QUICK_JIT} {QUIET_CDS} -XX:ArchiveClassesAtExit={self.recording}"

    def stop(self, spark) -> None:
        """Stop ``spark``; when this JVM records an archive, let it exit and keep the archive."""
        spark.stop()
        if self.recording is None:
            return
        from pyspark import SparkContext

        gateway, recording, self.recording = SparkContext._gateway, self.recording, None
        try:
            # The gateway JVM exits when its stdin closes, and writes the archive as it exits.
            gateway.proc.stdin.close()
            clean_exit = gateway.proc.wait(EXIT_TIMEOUT_SECONDS) == 0
            if clean_exit and os.path.isfile(recording):
                os.replace(recording, self.archive)
        except subprocess.TimeoutExpired:
            pass  # a JVM still writing after two minutes: the next session records again
        finally:
            # The next session in this process must launch a JVM of its own.
            SparkContext._gateway = SparkContext._jvm = None
            if os.path.exists(recording):
                os.remove(recording)


def _default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "nsq-trace")


def _archive_name() -> str:
    """An archive fits exactly one Spark installation and one Java binary."""
    import pyspark

    java_home = os.environ.get("JAVA_HOME")
    java = os.path.realpath(os.path.join(java_home, "bin", "java") if java_home else shutil.which("java") or "java")
    java_stat = os.stat(java) if os.path.exists(java) else None
    identity = [
        pyspark.__version__,
        os.path.dirname(os.path.realpath(pyspark.__file__)),
        java,
        str(java_stat and (java_stat.st_size, java_stat.st_mtime_ns)),
    ]
    digest = hashlib.sha256("\0".join(identity).encode()).hexdigest()[:16]
    return f"spark-{pyspark.__version__}-{digest}.jsa"
