"""The regression: recovers a latency built from its own features, the cache size among them;
held-out MAPE per phase."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from refimpl.config import HardwareSpec
from refimpl.costmodel import fit
from refimpl.costmodel.candidates import (
    PHASES,
    RAGGED_DECODE,
    enumerate_candidates,
    ragged_context_lens,
)
from refimpl.costmodel.fit import FEATURES, features, fit_latency, holdout_mask, miss_fraction
from refimpl.costmodel.sample import Sample
from refimpl.kernels import decode_costs

from ._helpers import DIMS, GRID

HW = HardwareSpec("test", 512 * 1024, 1 << 34, 10e9, 20e9, 10e9, False, "test figures")
# one per FEATURES entry: no re-read terms here (test_rereads_... plants them)
TRUE = (20e-6, 0.3e-6, 1 / 25e9, 1 / 12e9, 0.0, 2e-6, 2 / 12e9, 0.0, 0.0)
CACHE = 4.0 * 2**20  # the planted cache: the grid's prefill and decode calls straddle it


def _samples(noise: float, seed: int = 0) -> tuple[list, list]:
    rng = np.random.default_rng(seed)
    cands, samples = [], []
    for phase in PHASES:
        for cand in enumerate_candidates(phase, DIMS, tile_q=(32, 64), tile_k=(64,),
                                         pages_per_tile=(4,))[:2]:
            cands.append(cand)
            for b in GRID[phase][0]:
                for s in GRID[phase][1]:
                    x = features(cand, DIMS, b, s, HW.peak_flops, HW.memory_bandwidth_bytes_s,
                                 CACHE)
                    t = float(np.dot(TRUE, x)) * np.exp(rng.normal(0, noise))
                    samples.append(Sample(phase, cand.name, b, s, t, t))
    return cands, samples


def test_a_noiseless_latency_is_recovered_on_held_out_points():
    cands, samples = _samples(noise=0.0)
    model = fit_latency(samples, cands, DIMS, HW)
    assert len(FEATURES) == len(TRUE)
    for phase in PHASES:
        # Chunk: one training point lies past the cache, too few to place it for the estimate.
        assert model.errors[phase].mape < (0.02 if phase == "chunk" else 0.001)
        assert model.errors[phase].num_heldout > 0
        assert model.cache_bytes[phase] == CACHE
    for s in samples[:20]:
        cand = next(c for c in cands if c.name == s.candidate)
        assert model.predict_s(cand, s.batch, s.seq_len) == pytest.approx(s.time_s, rel=0.01)


def test_noise_shows_in_the_held_out_error():
    cands, samples = _samples(noise=0.05)
    model = fit_latency(samples, cands, DIMS, HW)
    for phase in PHASES:
        error = model.errors[phase]
        assert 0.005 < error.mape < 0.15
        assert error.baseline_mape > 0
        assert len(error.heldout_s) == error.num_heldout
        assert error.mape == pytest.approx(np.mean([abs(p / m - 1) for m, p, _ in error.heldout_s]))
        assert error.baseline_mape == pytest.approx(
            np.mean([abs(b / m - 1) for m, _, b in error.heldout_s]))


def test_skipping_the_held_out_estimate_leaves_the_final_model_as_it_was():
    cands, samples = _samples(noise=0.05)
    full, quick = (fit_latency(samples, cands, DIMS, HW, heldout=h) for h in (True, False))
    assert quick.errors == {} and full.errors
    assert quick.coefficients == full.coefficients
    assert (quick.cache_bytes, quick.reuse_cache_bytes) == (full.cache_bytes,
                                                            full.reuse_cache_bytes)


def test_the_held_out_spread_is_the_mean_spread_of_the_held_out_samples():
    cands, samples = _samples(noise=0.0)
    samples = [dataclasses.replace(s, spread=1e-3 * i**2) for i, s in enumerate(samples)]
    model = fit_latency(samples, cands, DIMS, HW)
    for phase in PHASES:
        mine = [s for s in samples if s.phase == phase]
        held = [s.spread for s, h in zip(mine, fit._held_out(mine), strict=True) if h]
        assert model.errors[phase].spread == pytest.approx(np.mean(held))
        assert model.errors[phase].spread != pytest.approx(np.mean([s.spread for s in mine]))


def test_without_the_cache_term_the_held_out_points_past_the_cache_are_missed(monkeypatch):
    cands, samples = _samples(noise=0.0)
    with_cache = fit_latency(samples, cands, DIMS, HW)
    monkeypatch.setattr(fit, "CACHE_CHOICES", (math.inf,))
    without = fit_latency(samples, cands, DIMS, HW)
    assert without.cache_bytes["decode"] == math.inf
    assert without.errors["decode"].mape > 0.05 > 0.01 > with_cache.errors["decode"].mape
    assert with_cache.errors["decode"].baseline_mape > 0.05


def test_the_miss_fraction_ramps_over_an_octave_around_the_cache():
    cache = 2.0**20
    assert miss_fraction(cache / 2**0.5, cache) == 0.0
    assert miss_fraction(cache, cache) == pytest.approx(0.5)
    assert miss_fraction(cache * 2**0.5, cache) == 1.0
    assert miss_fraction(100 * cache, cache) == 1.0
    assert miss_fraction(100 * cache, math.inf) == 0.0


def test_held_out_points_are_interior_diagonals():
    mask = holdout_mask([1, 1, 1, 2, 2, 2], [10, 20, 30, 10, 20, 30])
    assert mask == [False, True, False, True, False, False]


def test_rereads_are_priced_by_the_cache_that_holds_one_sequence(monkeypatch):
    """Items that split a KV group re-read each sequence's K/V right after one another: from
    cache while one sequence's pages fit it, at any batch; the call's footprint cannot say."""
    reuse_cache = float(2**20)  # per-sequence footprints from 0.14 to 4.2 MB straddle it
    truth = (20e-6, 0.3e-6, 0.0, 1 / 12e9, 0.0, 2e-6, 0.0, 1 / 6e9, 0.0)
    cands = enumerate_candidates("decode", DIMS, pages_per_tile=(4,))  # h1, h2, h4, h4-kv2
    samples = []
    for cand in cands:
        for b in (1, 4, 16):
            for t in (128, 256, 512, 1024, 2048, 4096):
                x = features(cand, DIMS, b, t, HW.peak_flops, HW.memory_bandwidth_bytes_s,
                             reuse_cache_bytes=reuse_cache)
                y = float(np.dot(truth, x))
                samples.append(Sample("decode", cand.name, b, t, y, y))
    assert any(features(c, DIMS, 16, 4096, 1.0, 1.0, reuse_cache_bytes=reuse_cache)[7] > 0
               for c in cands)
    model = fit_latency(samples, cands, DIMS, HW)
    assert model.reuse_cache_bytes["decode"] == reuse_cache
    assert model.errors["decode"].mape < 1e-3
    monkeypatch.setattr(fit, "REUSE_CACHE_CHOICES", (math.inf,))
    without = fit_latency(samples, cands, DIMS, HW)
    assert without.reuse_cache_bytes["decode"] == math.inf
    assert without.errors["decode"].mape > 0.02


def _ragged_truth_s(cand, batch: int, seq_len: int, ragged: bool) -> float:
    """A decode latency from each sequence's own length: its whole pages read, its key tiles."""
    lens = ragged_context_lens(batch, seq_len) if ragged else [seq_len] * batch
    hbm = decode_costs(cand.tiles, context_lens=lens, num_q_heads=DIMS.num_q_heads,
                       num_kv_heads=DIMS.num_kv_heads, head_dim=DIMS.head_dim,
                       page_size=DIMS.page_size).hbm_bytes
    tile_keys = cand.tiles.pages_per_tile * DIMS.page_size
    items = DIMS.num_q_heads // (cand.tiles.heads_per_tile * cand.tiles.kv_heads_per_tile)
    key_tiles = items * sum(-(-n // tile_keys) for n in lens)
    return 20e-6 + 2e-6 * batch + hbm / 12e9 + 0.3e-6 * key_tiles


def test_ragged_decode_is_predicted_from_each_sequence_s_pages_where_the_baseline_is_not():
    """Short ragged contexts end inside pages and tiles: a sum of tokens cannot see that."""
    cands = enumerate_candidates("decode", DIMS, pages_per_tile=(1, 4))[:3]
    samples = [Sample("decode", c.name, b, t, y, y, ragged)
               for c in cands for ragged in (False, True) for b in (4, 16, 64)
               for t in (32, 64, 128, 256, 512) for y in [_ragged_truth_s(c, b, t, ragged)]]
    model = fit_latency(samples, cands, DIMS, HW)
    ragged = model.errors[RAGGED_DECODE]
    assert ragged.num_heldout == len(cands) * 5 and model.errors["decode"].num_heldout > 0
    assert ragged.mape < 1e-3
    assert ragged.baseline_mape > 0.005  # ~1%: each sequence rounds up to its pages and tiles
    cand = cands[0]
    assert model.predict_s(cand, 16, 64, ragged=True) == pytest.approx(
        _ragged_truth_s(cand, 16, 64, True), rel=1e-3)
