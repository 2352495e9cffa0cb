"""The Python executable that a local Spark session starts its Python processes with.

Spark starts every Python process with its zipped copy of pyspark first on ``PYTHONPATH``: the
task workers, and the daemons that look up, create and plan a Python data source's reads (one
daemon per step, each started cold). Python caches no bytecode for zipped sources, so each of
them compiled pyspark's modules anew: on 2 cores 0.7-0.9 s per daemon, several seconds of every
analysis. Where Spark runs from the pyspark installed in this interpreter, the zips hold the same
code as that installation, and a process that skips them imports it with cached bytecode.

The launcher is a two-line shell script in a temporary directory that drops the zips from
``PYTHONPATH`` and execs this interpreter. It is a file on this machine, so it serves only
sessions whose JVM this process launches with a local master; elsewhere workers run as Spark
starts them.
"""

from __future__ import annotations

import os
import shlex
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

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
