"""Percentiles and means of a sample, as JSON-ready numbers: the one place metrics compute them.

Every latency figure in refimpl (TTFT, TPOT, end-to-end, queueing delay, the policy's decision
time) goes through `percentile`/`describe`, so they all share one interpolation rule: NumPy's
default 'linear' (type 7 of Hyndman and Fan, 1996; what `numpy.percentile` and pandas use).
An empty sample gives None, never NaN, so the result can go straight into strict JSON.
"""

from __future__ import annotations

import numpy as np

__all__ = ["PERCENTILES", "describe", "percentile"]

PERCENTILES = (50, 90, 95, 99)  # the percentiles every latency summary reports


def _defined(values: np.ndarray) -> np.ndarray:
    """The values as float64, NaN (undefined latencies) dropped."""
    sample = np.asarray(values, dtype=np.float64)
    return sample[~np.isnan(sample)]


def percentile(values: np.ndarray, q: float) -> float | None:
    """The `q`-th percentile (0-100, linear interpolation) of the non-NaN values; None if none."""
    sample = _defined(values)
    if sample.size == 0:
        return None
    return float(np.percentile(sample, q, method="linear"))


def describe(values: np.ndarray, name: str, unit: str = "_s") -> dict[str, float | None]:
    """`{name}_p50{unit}`, ..., `{name}_p99{unit}` and `{name}_mean{unit}` of the non-NaN values."""
    sample = _defined(values)
    if sample.size == 0:
        figures: list[float | None] = [None] * len(PERCENTILES)
        mean: float | None = None
    else:
        # One call for all percentiles: a single sort of the sample instead of four.
        figures = [float(x) for x in np.percentile(sample, PERCENTILES, method="linear")]
        mean = float(sample.mean())
    out = {f"{name}_p{q}{unit}": figure for q, figure in zip(PERCENTILES, figures, strict=True)}
    out[f"{name}_mean{unit}"] = mean
    return out
