"""The table look-up as a Numba kernel, for callers that are themselves compiled.

The same arithmetic as `PhaseTable.predict_s` (bisection, then geometric interpolation in
log B and log T) over plain arrays, so a Numba scheduler loop can price a batch without
returning to Python. Outside the grid it returns NaN: kernels do not raise.
"""

from __future__ import annotations

import math

import numpy as np

from refimpl._numba import kernel
from refimpl.costmodel.table import PhaseTable

__all__ = ["lookup_arrays", "lookup_time_s"]


def lookup_arrays(table: PhaseTable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(log B grid (nB,), log T grid (nT,), fastest time (nB, nT)) of `table` as float64."""
    # math.log, as the Python look-up uses: grid points then give the same weights, bit for bit.
    return (np.array([math.log(b) for b in table.batches]),
            np.array([math.log(t) for t in table.seq_lens]),
            np.array(table.best_time_s, np.float64))


@kernel
def _bracket(grid_log, x_log):
    """(lower, upper, weight of upper) with grid_log[lower] <= x_log, inside the grid."""
    i = np.searchsorted(grid_log, x_log, side="right") - 1
    if i >= grid_log.shape[0] - 1:
        return i, i, 0.0
    return i, i + 1, (x_log - grid_log[i]) / (grid_log[i + 1] - grid_log[i])


@kernel
def _geo(a, b, w):
    return a if w == 0.0 else a * (b / a) ** w


@kernel
def lookup_time_s(log_b, log_t, best_time_s, batch, seq_len):
    """Interpolated fastest time at (B, T); NaN outside the grid."""
    if batch <= 0 or seq_len <= 0:
        return np.nan
    lb = math.log(batch)
    lt = math.log(seq_len)
    if lb < log_b[0] or lb > log_b[-1] or lt < log_t[0] or lt > log_t[-1]:
        return np.nan
    i0, i1, u = _bracket(log_b, lb)
    j0, j1, v = _bracket(log_t, lt)
    t = best_time_s
    return _geo(_geo(t[i0, j0], t[i0, j1], v), _geo(t[i1, j0], t[i1, j1], v), u)
