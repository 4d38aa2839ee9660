"""The vectorizable float32 exp of the softmax: accuracy, special values, its coefficients."""

from __future__ import annotations

import numpy as np
import pytest

from refimpl._numba import kernel
from refimpl.kernels._exp import EXP_MIN, EXP_POLY, fast_exp


@kernel(fast_float=True)
def _exp_all(x, out):
    for i in range(x.shape[0]):
        out[i] = fast_exp(x[i])


def _fast_exp(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x, np.float32)
    out = np.empty_like(x)
    _exp_all(x, out)
    return out


@pytest.mark.numba
def test_relative_error_is_near_float32_rounding_over_the_softmax_range():
    x = np.linspace(-87.0, 10.0, 1_000_003).astype(np.float32)
    ref = np.exp(x.astype(np.float64))
    normal = ref >= np.finfo(np.float32).tiny
    err = np.abs(_fast_exp(x)[normal] - ref[normal]) / ref[normal]
    assert err.max() <= 2e-7  # libm's expf: 6e-8; the kernels' bound: 1e-4 on the output


@pytest.mark.numba
def test_masked_scores_give_probability_zero():
    x = np.array([0.0, -np.inf, np.nan, -87.5, -1e30, EXP_MIN], np.float32)
    got = _fast_exp(x)
    assert got[0] == 1.0
    assert (got[1:5] == 0.0).all()  # -inf, NaN (-inf minus -inf) and underflow
    assert got[5] > 0.0


def test_the_coefficients_are_the_documented_least_squares_fit():
    half_ln2 = np.log(2.0) / 2
    nodes = half_ln2 * np.cos(np.pi * (np.arange(2000) + 0.5) / 2000)  # Chebyshev nodes
    vander = np.vander(nodes, 7, increasing=True) / np.exp(nodes)[:, None]  # relative error
    fit, *_ = np.linalg.lstsq(vander, np.ones_like(nodes), rcond=None)
    np.testing.assert_allclose(EXP_POLY, fit, rtol=0, atol=5e-9)
