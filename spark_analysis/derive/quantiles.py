"""Latency quantiles that merge: a log-scale histogram (DDSketch's scheme).

Each lifecycle task histograms the latencies of its bucket's messages per channel; the driver merges
the buckets' histograms and reads quantiles off them. No row leaves its task and no Spark job sorts
a million latencies for a few percentiles.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

RELATIVE_ACCURACY = 0.001
# A bin's values are within a factor of 1 + RELATIVE_ACCURACY of each other: any of them stands for the others.
_LOG_GAMMA = math.log(1 + RELATIVE_ACCURACY)
# Milliseconds; the timestamps count nanoseconds, so anything nearer zero than one is zero.
SMALLEST = 1e-6

HISTOGRAM_TYPE = pa.struct([
    ("keys", pa.list_(pa.int64())),
    ("counts", pa.list_(pa.int64())),
    ("least", pa.list_(pa.float64())),
    ("high", pa.float64()),
])


@dataclass(frozen=True)
class Histogram:
    """``counts[i]`` values fell in bin ``keys[i]`` (sorted, unique), the least of them ``least[i]``; ``high``: the
    greatest value. A quantile is read as the least value of its bin: a value of the data, exact when a bin holds
    one value only (a steady latency), never further than RELATIVE_ACCURACY from the value of its rank."""

    keys: np.ndarray
    counts: np.ndarray
    least: np.ndarray
    high: float

    @classmethod
    def of(cls, values: np.ndarray) -> Histogram:
        values = np.asarray(values, dtype=np.float64)
        if not values.size:
            return EMPTY
        return cls._binned(_keys(values), np.ones(values.size, np.int64), values, float(values.max()))

    @classmethod
    def _binned(cls, keys: np.ndarray, counts: np.ndarray, least: np.ndarray, high: float) -> Histogram:
        order = np.lexsort((least, keys))
        keys, counts, least = keys[order], counts[order], least[order]
        starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
        return cls(keys[starts], np.add.reduceat(counts, starts), least[starts], high)

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    def merged(self, other: Histogram) -> Histogram:
        if not other.total:
            return self
        if not self.total:
            return other
        return Histogram._binned(np.concatenate((self.keys, other.keys)), np.concatenate((self.counts, other.counts)),
                                 np.concatenate((self.least, other.least)), max(self.high, other.high))

    def quantiles(self, fractions: Sequence[float]) -> list[float]:
        """The value of rank ceil(q * n) (at least 1) for each fraction q, as Spark's percentile_approx defines
        it (the last rank: the exact maximum); [] when empty."""
        if not self.total:
            return []
        ranks = np.maximum(1, np.ceil(np.asarray(fractions) * self.total)).astype(np.int64)
        values = self.least[np.searchsorted(np.cumsum(self.counts), ranks)]
        return np.where(ranks == self.total, self.high, values).tolist()

    def as_arrow(self) -> dict:
        return {"keys": self.keys.tolist(), "counts": self.counts.tolist(), "least": self.least.tolist(),
                "high": self.high}

    @classmethod
    def from_row(cls, row) -> Histogram:
        """From a collected Spark row (or dict) of ``HISTOGRAM_TYPE``."""
        if not row["keys"]:
            return EMPTY
        return cls(np.asarray(row["keys"], np.int64), np.asarray(row["counts"], np.int64),
                   np.asarray(row["least"], np.float64), row["high"])


EMPTY = Histogram(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float64), math.nan)


def _keys(values: np.ndarray) -> np.ndarray:
    """Bin keys that order like the values: 0 for zero, +-(i + 1) for magnitudes in (SMALLEST g^(i-1), SMALLEST
    g^i] (g = 1 + RELATIVE_ACCURACY)."""
    magnitude = np.abs(values)
    index = np.ceil(np.log(np.maximum(magnitude, SMALLEST) / SMALLEST) / _LOG_GAMMA).astype(np.int64) + 1
    return np.where(magnitude < SMALLEST, 0, np.sign(values).astype(np.int64) * index)
