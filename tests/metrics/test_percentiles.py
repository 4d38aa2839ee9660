"""The shared percentile helper against a brute-force definition and NumPy, over random samples."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from refimpl.metrics import PERCENTILES, describe, percentile

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)
samples = st.lists(st.one_of(finite, st.just(math.nan)), max_size=40)
quantiles = st.floats(min_value=0.0, max_value=100.0)


def brute_force(values: list[float], q: float) -> float | None:
    """Linear interpolation between the order statistics around rank q/100 * (n - 1)."""
    sample = sorted(v for v in values if not math.isnan(v))
    if not sample:
        return None
    rank = q / 100 * (len(sample) - 1)
    lo, hi = math.floor(rank), math.ceil(rank)
    return sample[lo] + (rank - lo) * (sample[hi] - sample[lo])


@given(samples, quantiles)
def test_percentile_matches_brute_force_and_numpy(values, q):
    got = percentile(np.array(values), q)
    want = brute_force(values, q)
    if want is None:
        assert got is None
        return
    scale = max(1.0, *(abs(v) for v in values if not math.isnan(v)))
    assert math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9 * scale)
    defined = [v for v in values if not math.isnan(v)]
    assert math.isclose(got, float(np.percentile(defined, q)), rel_tol=1e-12,
                        abs_tol=1e-12 * scale)


@given(samples)
def test_describe_agrees_with_percentile_and_has_no_nan(values):
    figures = describe(np.array(values), "x")
    assert list(figures) == [f"x_p{q}_s" for q in PERCENTILES] + ["x_mean_s"]
    for q in PERCENTILES:
        assert figures[f"x_p{q}_s"] == percentile(np.array(values), q)
    assert all(v is None or not math.isnan(v) for v in figures.values())
    defined = [v for v in values if not math.isnan(v)]
    assert (figures["x_mean_s"] is None) == (not defined)
