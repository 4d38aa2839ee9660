"""Tiled prefill against the float64 oracle, serial against parallel, and its SRAM budget."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refimpl.errors import CapacityError
from refimpl.kernels import (
    PrefillTiles,
    default_sram_budget,
    prefill_attention,
    prefill_costs,
    reference_attention,
)

from ._helpers import REL_TOL, randn, rel_err

# (B, Hq, Hkv, T, d, tile_q, tile_k): T = 1, T off the tile grid, d 64/96/128, GQA 1/4/8.
SHAPES = [
    (1, 1, 1, 1, 64, 64, 64),
    (2, 4, 4, 37, 64, 16, 8),
    (1, 8, 2, 50, 96, 32, 16),
    (1, 8, 1, 33, 128, 8, 32),
]


def _qkv(rng, batch, num_q_heads, num_kv_heads, seq_len, head_dim):
    return (randn(rng, batch, num_q_heads, seq_len, head_dim),
            randn(rng, batch, num_kv_heads, seq_len, head_dim),
            randn(rng, batch, num_kv_heads, seq_len, head_dim))


@pytest.mark.numba
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_prefill_matches_the_oracle_on_odd_shapes(rng, shape, causal):
    batch, num_q_heads, num_kv_heads, seq_len, head_dim, tile_q, tile_k = shape
    q, k, v = _qkv(rng, batch, num_q_heads, num_kv_heads, seq_len, head_dim)
    out = prefill_attention(q, k, v, tile_q=tile_q, tile_k=tile_k, causal=causal)
    assert rel_err(out, reference_attention(q, k, v, causal=causal)) <= REL_TOL


@pytest.mark.numba
@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seq_len=st.integers(1, 70), tile_q=st.integers(1, 40), tile_k=st.integers(1, 40),
       group=st.sampled_from([1, 2, 4]), heads_per_tile=st.sampled_from([1, None]))
def test_prefill_matches_the_oracle_for_any_tiling(rng, seq_len, tile_q, tile_k, group,
                                                   heads_per_tile):
    q, k, v = _qkv(rng, 1, 2 * group, 2, seq_len, 64)
    out = prefill_attention(q, k, v, tile_q=tile_q, tile_k=tile_k, heads_per_tile=heads_per_tile)
    assert rel_err(out, reference_attention(q, k, v)) <= REL_TOL


@pytest.mark.numba
def test_serial_and_parallel_prefill_agree_exactly(rng):
    q, k, v = _qkv(rng, 2, 8, 2, 45, 64)
    serial = prefill_attention(q, k, v, tile_q=16, tile_k=16, parallel=False)
    parallel = prefill_attention(q, k, v, tile_q=16, tile_k=16, parallel=True)
    np.testing.assert_array_equal(serial, parallel)


@pytest.mark.numba
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("tiles", [PrefillTiles(16, 8, 1), PrefillTiles(7, 64, 4),
                                   PrefillTiles(64, 5, 2)], ids=str)
def test_counted_traffic_equals_the_analytic_costs(rng, tiles, causal):
    q, k, v = _qkv(rng, 2, 8, 2, 45, 64)
    _, counted = prefill_attention(q, k, v, tile_q=tiles.tile_q, tile_k=tiles.tile_k,
                                   heads_per_tile=tiles.heads_per_tile, causal=causal,
                                   return_costs=True)
    assert counted == prefill_costs(tiles, batch=2, num_q_heads=8, num_kv_heads=2, seq_len=45,
                                    head_dim=64, causal=causal)


def test_bigger_query_tiles_read_less_kv_but_need_more_sram():
    shape = {"batch": 1, "num_q_heads": 32, "num_kv_heads": 8, "seq_len": 2048, "head_dim": 128}
    small = prefill_costs(PrefillTiles(32, 64, 4), **shape)
    large = prefill_costs(PrefillTiles(128, 64, 4), **shape)
    assert large.hbm_bytes < small.hbm_bytes
    assert large.sram_bytes > small.sram_bytes
    assert large.arithmetic_intensity > small.arithmetic_intensity


@pytest.mark.numba
def test_heads_per_tile_shrinks_to_fit_the_budget(rng):
    q, k, v = _qkv(rng, 1, 8, 1, 20, 64)
    budget = PrefillTiles(16, 16, 2).sram_bytes(64)  # room for 2 of the 8 heads, not 4
    _, costs = prefill_attention(q, k, v, tile_q=16, tile_k=16, sram_budget_bytes=budget,
                                 return_costs=True)
    assert costs.sram_bytes == budget


def test_a_tile_over_the_sram_budget_is_a_capacity_error(rng):
    q, k, v = _qkv(rng, 1, 4, 1, 8, 64)
    with pytest.raises(CapacityError, match=r"sram_bytes=\d+: .*over the SRAM budget of 1000 B"):
        prefill_attention(q, k, v, sram_budget_bytes=1000)
    with pytest.raises(CapacityError, match="4 query head"):
        prefill_attention(q, k, v, tile_q=64, tile_k=64, heads_per_tile=4,
                          sram_budget_bytes=PrefillTiles(64, 64, 2).sram_bytes(64))


def test_the_default_budget_is_the_cpu_local_l2_read_without_probing_speeds(monkeypatch):
    from refimpl.config import HardwareSpec, probe

    expected = HardwareSpec.preset("cpu-local").sram_bytes

    def no_probe(*_):
        raise AssertionError("the default SRAM budget ran the bandwidth and GEMM probe")

    monkeypatch.setattr(probe, "_measure", no_probe)
    monkeypatch.setattr(probe, "_MEASURED", {})
    assert default_sram_budget.__wrapped__() == expected
