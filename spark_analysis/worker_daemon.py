"""Spark's Python worker daemon (``spark.python.daemon.module``), importing pyspark with cached bytecode.

Spark puts its ``pyspark.zip`` first on the workers' path. Python caches no bytecode for zipped
sources, so every daemon compiled pyspark's modules anew, and every task re-read the zip's
directory (the worker invalidates import caches): together about a third of all Python CPU time
of an analysis. The installed pyspark is the same code; the zips stay only where no pyspark is
installed (a cluster's plain Python).
"""

import importlib.util
import sys

zips = [entry for entry in sys.path if entry.endswith(".zip")]
sys.path[:] = [entry for entry in sys.path if entry not in zips]
for entry in zips:  # a cached zip importer would still re-read its directory on every cache invalidation
    sys.path_importer_cache.pop(entry, None)
if importlib.util.find_spec("pyspark") is None or importlib.util.find_spec("py4j") is None:
    sys.path += zips

from pyspark import daemon  # noqa: E402  (the path must be set first)

if __name__ == "__main__":
    daemon.manager()
