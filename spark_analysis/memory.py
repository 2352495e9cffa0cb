"""How a Python worker's memory is kept: the cycle collector off while a task builds millions of objects none of
which is in a cycle, and what a task freed handed back to the system."""

from __future__ import annotations

import ctypes
import gc
from contextlib import contextmanager

import pyarrow as pa


@contextmanager
def without_cycle_collection():
    """A connection's rows are millions of live objects, none in a reference cycle, and the cycle collector's
    passes over them grow with their number: ~20 % of decoding a 738,618-row connection. Reference counting
    still frees everything; the collector runs again after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def return_freed_memory():
    """A Python worker lives on for the next job's tasks: what decoding freed goes back to the system, not kept by
    Arrow's allocator or C's for a job that will not need it (~700 MB after a long connection)."""
    gc.collect()
    pa.default_memory_pool().release_unused()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc: its allocator returns memory its own way
