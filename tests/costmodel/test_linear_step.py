"""`LinearStepModel`: its fitted sum, written as `step_s`'s coefficients, so it runs compiled."""

from __future__ import annotations

import numpy as np
import pytest

from refimpl.costmodel.choose import compiled_coefficients
from refimpl.costmodel.linear_step import FEATURES, ROWS_MOD_4, LinearStepModel, step_features
from refimpl.errors import ConfigError

VALUES = [2e-3, 7e-4, 3e-4, 1e-4, 1e-5, 3e-8, 2e-7, 5e-4, 3e-4]  # every feature its own size


def test_the_compiled_formula_is_the_fitted_sum_of_features():
    model = LinearStepModel(VALUES)
    rng = np.random.default_rng(0)
    counts = [(0, 0, 1, 40), (1, 1, 0, 0), (16, 200, 0, 0), (0, 0, 5, 900), (7, 70, 3, 300)]
    for _ in range(50):
        tokens, done, seqs = (int(rng.integers(0, n)) for n in (300, 500, 20))
        counts.append((tokens, tokens * done + tokens * (tokens + 1) // 2, seqs,
                       seqs * int(rng.integers(1, 500))))  # (context only where decodes)
    counts = [c for c in counts if c[0] + c[2] > 0]
    expected = step_features(np.array(counts)) @ np.array(VALUES)
    np.testing.assert_allclose(model.predict(np.array(counts)), expected, rtol=1e-12)
    assert model.step_time_parts(0, 0, 0, 0) == 0.0
    assert compiled_coefficients(model) is model.coefficients  # the loop runs it compiled
    assert model.as_dict() == dict(zip(FEATURES, VALUES, strict=True))


def test_a_fit_recovers_the_coefficients_it_was_made_from():
    rng = np.random.default_rng(1)
    counts = np.column_stack([rng.integers(0, 256, 60), np.zeros(60), rng.integers(0, 16, 60),
                              rng.integers(1, 400, 60)])
    counts[:, 1] = counts[:, 0] * (counts[:, 0] + 1) // 2
    counts[:, 3] *= counts[:, 2]  # a context only where there are decodes
    counts = counts[counts[:, 0] + counts[:, 2] > 0]
    seconds = LinearStepModel(VALUES).predict(counts)
    fitted = LinearStepModel.fit(counts, seconds)
    np.testing.assert_allclose(fitted.predict(counts), seconds, rtol=1e-6)


def test_negative_coefficients_are_refused_by_name():
    with pytest.raises(ConfigError, match="coefficients"):
        LinearStepModel([1e-3, -1.0, 0, 0, 0, 0, 0, 0, 0])


def test_seven_rows_cost_more_than_eight_when_the_edge_passes_outweigh_a_row():
    # OpenBLAS's (M, 512) x (512, 2816): 530 us at M = 7, 436 us at M = 8 (docs/real_engine.md)
    model = LinearStepModel(VALUES)
    seven, eight, twelve, fifteen = model.predict(
        np.array([(0, 0, b, 32 * b) for b in (7, 8, 12, 15)]))
    assert seven > eight and fifteen > twelve
    assert model.step_time_parts(0, 0, 1, 32) < model.step_time_parts(0, 0, 2, 64)
    # a smooth truth (no edge passes) is fitted with none
    smooth = [*VALUES[:7], 0.0, 0.0]
    counts = np.array([(0, 0, b, 32 * b) for b in range(1, 33)]
                      + [(t, t * (t + 1) // 2, 0, 0) for t in (16, 48, 100, 256, 512)])
    fitted = LinearStepModel.fit(counts, LinearStepModel(smooth).predict(counts))
    assert fitted.as_dict()["odd_rows_step_s"] == pytest.approx(0.0, abs=1e-9)
    assert fitted.as_dict()["pair_rows_step_s"] == pytest.approx(0.0, abs=1e-9)
    # and a staircase is what a fit without those terms cannot follow
    stairs = LinearStepModel(VALUES).predict(counts)
    ablated = LinearStepModel.fit(counts, stairs, omit=ROWS_MOD_4)
    assert ablated.as_dict()["odd_rows_step_s"] == ablated.as_dict()["pair_rows_step_s"] == 0
    assert np.abs(ablated.predict(counts) / stairs - 1).max() > 0.03
    np.testing.assert_allclose(LinearStepModel.fit(counts, stairs).predict(counts), stairs,
                               rtol=1e-6)
    with pytest.raises(ConfigError, match=r"omit.*per_row_s"):
        LinearStepModel.fit(counts, stairs, omit=("per_row_s",))

