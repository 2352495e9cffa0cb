"""The latency histograms of derive/quantiles.py: every quantile a value of the data, within the stated accuracy of the
value of its rank, the same whether the histogram was built at once or merged from parts."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_analysis.derive.quantiles import EMPTY, RELATIVE_ACCURACY, SMALLEST, Histogram

FRACTIONS = [0, 0.001, 0.01, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0]


def ranked(values: np.ndarray, fraction: float) -> float:
    """The value of rank ceil(q * n), at least 1: percentile_approx's definition, exactly."""
    ordered = np.sort(values)
    return float(ordered[max(1, math.ceil(fraction * len(ordered))) - 1])


def assert_close_to_ranks(histogram: Histogram, values: np.ndarray):
    present = set(values.tolist())
    for fraction, got in zip(FRACTIONS, histogram.quantiles(FRACTIONS), strict=True):
        expected = ranked(values, fraction)
        assert got in present, fraction
        # nearer zero than SMALLEST, values share the zero bin
        assert abs(got - expected) <= RELATIVE_ACCURACY * abs(expected) * (1 + 1e-9) + 2 * SMALLEST, (
            fraction, got, expected)


def test_spread_latencies_with_zeros_and_negatives():
    rng = np.random.default_rng(7)
    values = np.concatenate((rng.lognormal(0, 3, 50_000), -rng.lognormal(-2, 1, 500), np.zeros(20)))
    assert_close_to_ranks(Histogram.of(values), values)


def test_the_extremes_are_exact():
    values = np.array([3.0, 1e-9, 7.25, 1e9, -4.5])
    low, high = Histogram.of(values).quantiles([0, 1])
    assert (low, high) == (-4.5, 1e9)


def test_a_steady_latency_is_read_exactly():
    assert Histogram.of(np.full(1_000, 0.06)).quantiles([0.5, 0.9, 0.99, 1.0]) == [0.06] * 4


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-1e7, 1e7, allow_nan=False), min_size=1, max_size=300), st.integers(0, 300))
def test_merged_parts_read_like_the_whole(values, cut):
    values = np.array(values)
    cut = min(cut, len(values))
    whole = Histogram.of(values)
    merged = Histogram.of(values[:cut]).merged(Histogram.of(values[cut:]))
    assert merged.quantiles(FRACTIONS) == whole.quantiles(FRACTIONS)
    assert merged.total == len(values)
    assert_close_to_ranks(merged, values)


def test_an_empty_histogram_has_no_quantiles():
    assert EMPTY.quantiles([0.5]) == []
    assert Histogram.of(np.array([])).merged(EMPTY).quantiles([0.5]) == []


def test_a_histogram_survives_its_arrow_row():
    histogram = Histogram.of(np.array([0.5, 0.5, 2.0, -1.0]))
    back = Histogram.from_row(histogram.as_arrow())
    assert back.quantiles(FRACTIONS) == histogram.quantiles(FRACTIONS)


@pytest.mark.parametrize("values", [np.array([1e-7, 2e-7]), np.array([-1e-7, 0.0])])
def test_values_nearer_zero_than_a_nanosecond_are_one_bin(values):
    assert Histogram.of(values).keys.tolist() == [0]
