"""Decode and chunked prefill over shuffled pages: oracle, prefill equivalence, counted bytes."""

from __future__ import annotations

import numpy as np
import pytest

from refimpl.kernels import (
    PagedTiles,
    chunk_attention,
    chunk_costs,
    decode_attention,
    decode_costs,
    prefill_attention,
)

from ._helpers import REL_TOL, paged_kv, paged_oracle, randn, rel_err

PAGE_SIZE = 8  # paged_kv's default


@pytest.mark.numba
@pytest.mark.parametrize(("num_q_heads", "num_kv_heads", "head_dim"),
                         # groups of 1, 4 and 8 rows; 6 and 7 leave rows over the tile
                         # products' four-row passes (2, then 2 and 1)
                         [(2, 2, 64), (8, 2, 96), (8, 1, 128), (12, 2, 64), (7, 1, 32)])
def test_decode_matches_the_oracle_with_shuffled_pages_and_ragged_lengths(
        rng, num_q_heads, num_kv_heads, head_dim):
    _, _, k_cache, v_cache, tables = paged_kv(rng, 3, num_kv_heads, 41, head_dim)
    context_lens = np.array([1, 41, 17], np.int32)
    q = randn(rng, 3, num_q_heads, head_dim)
    out = decode_attention(q, k_cache, v_cache, tables, context_lens, pages_per_tile=2)
    ref = paged_oracle(q[:, :, None], k_cache, v_cache, tables, context_lens)[:, :, 0]
    assert rel_err(out, ref) <= REL_TOL


@pytest.mark.numba
def test_decode_of_token_t_equals_row_t_of_a_full_prefill(rng):
    q_all = randn(rng, 2, 8, 30, 64)
    k, v, k_cache, v_cache, tables = paged_kv(rng, 2, 2, 30, 64)
    full = prefill_attention(q_all, k, v, tile_q=16, tile_k=16)
    for t in (0, 7, 8, 29):
        lens = np.full(2, t + 1, np.int32)
        out = decode_attention(q_all[:, :, t], k_cache, v_cache, tables, lens)
        np.testing.assert_allclose(out, full[:, :, t], rtol=0, atol=1e-5)


@pytest.mark.numba
@pytest.mark.parametrize("cuts", [(30,), (1, 30), (5, 13, 14, 30), (16, 30)])
def test_chunked_prefill_over_any_chunking_equals_one_full_prefill(rng, cuts):
    q = randn(rng, 1, 8, 30, 64)
    k, v, k_cache, v_cache, tables = paged_kv(rng, 1, 2, 30, 64)
    full = prefill_attention(q, k, v, tile_q=8, tile_k=8)[0]
    start = 0
    for end in cuts:
        out = chunk_attention(q[0, :, start:end], k_cache, v_cache, tables[0], start, tile_q=4,
                              pages_per_tile=1)
        np.testing.assert_allclose(out, full[:, start:end], rtol=0, atol=1e-5)
        start = end


@pytest.mark.numba
def test_serial_and_parallel_paged_kernels_agree_exactly(rng):
    _, _, k_cache, v_cache, tables = paged_kv(rng, 3, 2, 41, 64)
    q = randn(rng, 3, 8, 64)
    lens = np.array([41, 3, 20], np.int32)
    serial = decode_attention(q, k_cache, v_cache, tables, lens, parallel=False)
    parallel = decode_attention(q, k_cache, v_cache, tables, lens, parallel=True)
    np.testing.assert_array_equal(serial, parallel)


@pytest.mark.numba
@pytest.mark.parametrize("tiles", [PagedTiles(1, 1, 1), PagedTiles(1, 3, 4),
                                   PagedTiles(1, 2, 4, 2)], ids=str)
def test_decode_counted_traffic_equals_the_analytic_costs(rng, tiles):
    _, _, k_cache, v_cache, tables = paged_kv(rng, 3, 2, 41, 64)
    lens = np.array([41, 3, 20], np.int32)
    _, counted = decode_attention(randn(rng, 3, 8, 64), k_cache, v_cache, tables, lens,
                                  pages_per_tile=tiles.pages_per_tile,
                                  heads_per_tile=tiles.heads_per_tile,
                                  kv_heads_per_tile=tiles.kv_heads_per_tile, return_costs=True)
    assert counted == decode_costs(tiles, context_lens=lens.tolist(), num_q_heads=8,
                                   num_kv_heads=2, head_dim=64, page_size=PAGE_SIZE)


@pytest.mark.numba
@pytest.mark.parametrize("tiles", [PagedTiles(4, 1, 2), PagedTiles(64, 2, 4),
                                   PagedTiles(8, 1, 4, 2)], ids=str)
def test_chunk_counted_traffic_equals_the_analytic_costs(rng, tiles):
    _, _, k_cache, v_cache, tables = paged_kv(rng, 1, 2, 41, 64)
    _, counted = chunk_attention(randn(rng, 8, 19, 64), k_cache, v_cache, tables[0], 22,
                                 tile_q=tiles.tile_q, pages_per_tile=tiles.pages_per_tile,
                                 heads_per_tile=tiles.heads_per_tile,
                                 kv_heads_per_tile=tiles.kv_heads_per_tile, return_costs=True)
    assert counted == chunk_costs(tiles, start=22, num_queries=19, num_q_heads=8,
                                  num_kv_heads=2, head_dim=64, page_size=PAGE_SIZE)


@pytest.mark.numba
def test_decode_gives_the_same_answer_whatever_the_kv_heads_per_work_item(rng):
    _, _, k_cache, v_cache, tables = paged_kv(rng, 3, 4, 41, 64)
    q = randn(rng, 3, 8, 64)
    lens = np.array([41, 3, 20], np.int32)
    outs = [decode_attention(q, k_cache, v_cache, tables, lens, heads_per_tile=2,
                             kv_heads_per_tile=kv) for kv in (1, 2, 4)]
    ref = paged_oracle(q[:, :, None], k_cache, v_cache, tables, lens)[:, :, 0]
    for out in outs:
        assert rel_err(out, ref) <= REL_TOL
        np.testing.assert_allclose(out, outs[0], rtol=0, atol=1e-6)


@pytest.mark.numba
def test_by_default_decode_takes_every_kv_head_of_a_page_in_one_work_item(rng):
    _, _, k_cache, v_cache, tables = paged_kv(rng, 2, 4, 20, 64)
    lens = np.array([20, 9], np.int32)
    _, counted = decode_attention(randn(rng, 2, 8, 64), k_cache, v_cache, tables, lens,
                                  return_costs=True)
    assert counted == decode_costs(PagedTiles(1, 2, 2, 4), context_lens=lens.tolist(),
                                   num_q_heads=8, num_kv_heads=4, head_dim=64,
                                   page_size=PAGE_SIZE)


class _NoBlasLimit:
    def limit(self, **_):
        raise AssertionError("BLAS limited for a kernel that never calls BLAS")


@pytest.mark.numba
def test_decode_skips_the_blas_thread_limit_which_prefill_needs(rng, monkeypatch):
    from refimpl.kernels import attention

    _, _, k_cache, v_cache, tables = paged_kv(rng, 2, 2, 20, 64)
    prefill_inputs = (randn(rng, 1, 8, 64, 64), randn(rng, 1, 2, 64, 64), randn(rng, 1, 2, 64, 64))
    monkeypatch.setattr(attention, "_blas_controller", _NoBlasLimit)
    decode_attention(randn(rng, 2, 8, 64), k_cache, v_cache, tables, np.array([20, 7], np.int32))
    with pytest.raises(AssertionError, match="BLAS limited"):  # 4 heads x 64 rows: BLAS tiles
        prefill_attention(*prefill_inputs)
