"""The regression: recovers a latency built from its own features; held-out MAPE per phase."""

from __future__ import annotations

import numpy as np
import pytest

from refimpl.config import HardwareSpec
from refimpl.costmodel.candidates import PHASES, enumerate_candidates
from refimpl.costmodel.fit import FEATURES, features, fit_latency, holdout_mask
from refimpl.costmodel.profile import Sample

from ._helpers import DIMS, GRID

HW = HardwareSpec("test", 512 * 1024, 1 << 34, 10e9, 20e9, 10e9, False, "test figures")
TRUE = (20e-6, 0.3e-6, 1 / 25e9, 1 / 12e9, 0.0, 2e-6)  # one per FEATURES entry


def _samples(noise: float, seed: int = 0) -> tuple[list, list]:
    rng = np.random.default_rng(seed)
    cands, samples = [], []
    for phase in PHASES:
        for cand in enumerate_candidates(phase, DIMS, tile_q=(32, 64), tile_k=(64,),
                                         pages_per_tile=(4,))[:2]:
            cands.append(cand)
            for b in GRID[phase][0]:
                for s in GRID[phase][1]:
                    x = features(cand, DIMS, b, s, HW.peak_flops, HW.memory_bandwidth_bytes_s)
                    t = float(np.dot(TRUE, x)) * np.exp(rng.normal(0, noise))
                    samples.append(Sample(phase, cand.name, b, s, t, t))
    return cands, samples


def test_a_noiseless_latency_is_recovered_on_held_out_points():
    cands, samples = _samples(noise=0.0)
    model = fit_latency(samples, cands, DIMS, HW)
    assert len(FEATURES) == len(TRUE)
    for phase in PHASES:
        assert model.errors[phase].mape < 0.01
        assert model.errors[phase].num_heldout > 0
    for s in samples[:20]:
        cand = next(c for c in cands if c.name == s.candidate)
        assert model.predict_s(cand, s.batch, s.seq_len) == pytest.approx(s.time_s, rel=0.01)


def test_noise_shows_in_the_held_out_error():
    cands, samples = _samples(noise=0.05)
    model = fit_latency(samples, cands, DIMS, HW)
    for phase in PHASES:
        assert 0.005 < model.errors[phase].mape < 0.15
        assert model.errors[phase].baseline_mape > 0


def test_held_out_points_are_interior_diagonals():
    mask = holdout_mask([1, 1, 1, 2, 2, 2], [10, 20, 30, 10, 20, 30])
    assert mask == [False, True, False, True, False, False]
