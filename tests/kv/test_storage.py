"""Real K/V pages behind the pool: writes, copy-on-write, quantization and spills keep the data."""

from __future__ import annotations

import numpy as np
import pytest

from refimpl.errors import ConfigError, KVCacheError
from refimpl.kernels import decode_attention, reference_attention
from refimpl.kv import PagePool
from refimpl.kv.storage import KVStorage

LAYERS, HKV, HQ, D, P = 2, 2, 4, 16, 4


def rows(rng, n):
    return rng.standard_normal((n, HKV, D)).astype(np.float32)


@pytest.fixture
def pool():
    pool = PagePool(64, P, cpu_tier_pages=64)
    pool.attach_storage(LAYERS, HKV, D)
    return pool


def fill(pool, rng, request_id, length):
    """Allocate a request and write random rows in every layer; returns them (L, n, Hkv, d)."""
    pool.allocate(request_id, length)
    data = {}
    for layer in range(LAYERS):
        k, v = rows(rng, length), rows(rng, length)
        pool.write(request_id, layer, 0, k, v)
        data[layer] = (k, v)
    return data


def test_rows_read_back_exactly_through_shuffled_pages(pool):
    rng = np.random.default_rng(0)
    pool.allocate(99, 6)  # so request 1's pages do not start at 0
    data = fill(pool, rng, 1, 11)
    pool.free(99)
    for layer, (k, v) in data.items():
        k_back, v_back = pool.read(1, layer)
        assert np.array_equal(k_back, k) and np.array_equal(v_back, v)


def test_decode_over_the_pool_cache_matches_the_oracle(pool):
    rng = np.random.default_rng(1)
    data = fill(pool, rng, 1, 13)
    k_cache, v_cache = pool.storage.float_cache(layer=1)
    q = rng.standard_normal((1, HQ, D)).astype(np.float32)
    table = np.array([pool.page_table(1)], dtype=np.int32)
    out = decode_attention(q, k_cache, v_cache, table, np.array([13], np.int32))
    k, v = data[1]
    expected = reference_attention(q[:, :, None, :], k.transpose(1, 0, 2)[None],
                                   v.transpose(1, 0, 2)[None], causal=False)[:, :, 0]
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


def test_copy_on_write_keeps_the_source_intact(pool):
    rng = np.random.default_rng(2)
    data = fill(pool, rng, 1, 6)
    pool.fork(1, 2)
    assert pool.append(2) == [(pool.page_table(1)[1], pool.page_table(2)[1])]
    new_k, new_v = rows(rng, 1), rows(rng, 1)
    pool.write(2, 0, 6, new_k, new_v)
    k_fork, _ = pool.read(2, 0)
    k_src, _ = pool.read(1, 0)
    assert np.array_equal(k_fork[:6], data[0][0]) and np.array_equal(k_fork[6:], new_k)
    assert np.array_equal(k_src, data[0][0])


def test_quantization_frees_three_quarters_and_keeps_attention_close(pool):
    rng = np.random.default_rng(3)
    data = fill(pool, rng, 1, 32)  # 8 pages of 4 float tokens -> 2 pages of 16 codes
    freed = pool.quantize(1, 4)
    assert len(freed) == 6 and len(pool.page_table(1)) == 2
    k_back, _ = pool.read(1, 0)
    k, v = data[0]
    assert np.abs(k_back - k).max() <= np.abs(k).max() / 127 * 0.5 + 1e-6  # half an INT8 step
    q = rng.standard_normal((1, HQ, D)).astype(np.float32)
    k_q, v_q = pool.storage.quantized_cache(layer=0)
    out = decode_attention(q, k_q, v_q, np.array([pool.page_table(1)], np.int32),
                           np.array([32], np.int32))
    expected = reference_attention(q[:, :, None, :], k.transpose(1, 0, 2)[None],
                                   v.transpose(1, 0, 2)[None], causal=False)[:, :, 0]
    assert np.abs(out - expected).max() < 0.05


def test_writes_after_quantization_requantize_the_page(pool):
    rng = np.random.default_rng(4)
    fill(pool, rng, 1, 10)
    pool.quantize(1, 4)
    pool.append(1, 3)
    k_new, v_new = rows(rng, 3), rows(rng, 3)
    for layer in range(LAYERS):
        pool.write(1, layer, 10, k_new, v_new)
    k_back, _ = pool.read(1, 1)
    assert np.abs(k_back[10:] - k_new).max() < np.abs(k_back).max() / 127


def test_spill_and_restore_round_trip_the_data(pool):
    rng = np.random.default_rng(5)
    data = fill(pool, rng, 1, 9)
    fill(pool, rng, 2, 5)
    pool.spill(1)
    pool.free(2)
    pool.allocate(3, 16)  # reuses the freed pages, so the restore lands elsewhere
    pool.restore(1)
    for layer, (k, v) in data.items():
        k_back, v_back = pool.read(1, layer)
        assert np.array_equal(k_back, k) and np.array_equal(v_back, v)


def test_storage_misuse_is_refused(pool):
    rng = np.random.default_rng(6)
    fill(pool, rng, 1, 4)
    with pytest.raises(KVCacheError, match="start=3"):
        pool.write(1, 0, 3, rows(rng, 2), rows(rng, 2))
    with pytest.raises(KVCacheError, match="factor=2"):
        pool.quantize(1, 2)
    with pytest.raises(KVCacheError, match="storage"):
        pool.attach_storage(1, 1, 1)
    with pytest.raises(KVCacheError, match="only keeps accounts"):
        PagePool(4, 4).read(1, 0)


@pytest.mark.parametrize(("dims", "field"), [
    ({"num_layers": 0}, "num_layers"), ({"num_pages": -1}, "num_pages"),
    ({"page_size": 2.5}, "page_size"), ({"num_kv_heads": True}, "num_kv_heads"),
    ({"head_dim": 0}, "head_dim")])
def test_storage_of_bad_dimensions_is_refused_by_name(dims, field):
    good = {"num_layers": 1, "num_pages": 2, "page_size": 4, "num_kv_heads": 1, "head_dim": 8}
    with pytest.raises(ConfigError, match=f"{field}="):
        KVStorage(**{**good, **dims})
