"""Bad input is a KernelInputError from the wrapper, naming the argument and the value."""

from __future__ import annotations

import numpy as np
import pytest

from refimpl.errors import KernelInputError, RefimplError
from refimpl.kernels import (
    chunk_attention,
    decode_attention,
    prefill_attention,
    quantize_pages,
    reference_attention,
)

from ._helpers import paged_kv, randn


@pytest.fixture
def qkv(rng):
    return randn(rng, 1, 4, 8, 64), randn(rng, 1, 2, 8, 64), randn(rng, 1, 2, 8, 64)


@pytest.fixture
def paged(rng):
    """q (2, 4, 64), k_cache, v_cache, block_tables (2, 2) of 8-token pages, context_lens."""
    _, _, k_cache, v_cache, tables = paged_kv(rng, 2, 2, 12, 64)
    return randn(rng, 2, 4, 64), k_cache, v_cache, tables, np.array([12, 5], np.int32)


def _with(args, i, value):
    return (*args[:i], value, *args[i + 1:])


@pytest.mark.parametrize(("index", "make", "match"), [
    (0, lambda q: q.astype(np.float64), r"q\.dtype='float64': must be float32"),
    (0, lambda q: q[0], r"q\.ndim=3: must be 4"),
    (0, lambda q: q.tolist(), r"q type='list': must be a numpy array"),
    (1, lambda k: k[:, :, :5], r"k\.shape\[2\] \(tokens\)=5: must equal q\.shape\[2\]=8"),
    (1, lambda k: k[:, :, :, :32], r"k\.shape\[3\] \(head dim\)=32"),
    (0, lambda q: q[:, :3], r"k\.shape\[1\] \(KV heads\)=2: must divide q\.shape\[1\]=3"),
    (2, lambda v: v[:, :1], r"v\.shape\[1\] \(KV heads\)=1: must equal k\.shape\[1\]=2"),
    (1, lambda k: np.where(np.arange(8)[:, None] == 3, np.nan, k).astype(np.float32),
     r"k\[0, 0, 3, 0\]=nan: must be finite"),
    (0, lambda q: np.full_like(q, np.inf), r"q\[0, 0, 0, 0\]=inf: must be finite"),
])
def test_bad_prefill_input_is_rejected_before_the_kernel(qkv, index, make, match):
    args = _with(qkv, index, make(qkv[index]))
    with pytest.raises(KernelInputError, match=match):
        prefill_attention(*args)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"tile_q": 0}, r"tile_q=0: must be an integer >= 1"),
    ({"tile_k": 2.5}, r"tile_k=2.5"),
    ({"heads_per_tile": 3}, r"heads_per_tile=3: must divide the query heads per KV head \(2\)"),
])
def test_bad_prefill_tiles_are_rejected(qkv, kwargs, match):
    with pytest.raises(KernelInputError, match=match):
        prefill_attention(*qkv, **kwargs)


@pytest.mark.parametrize(("index", "make", "match"), [
    (0, lambda q: q[:, :3], r"k_cache\.shape\[2\] \(KV heads\)=2: must divide q heads=3"),
    (0, lambda q: q[None], r"q\.ndim=4: must be 3"),
    (2, lambda v: v[:, :, :1], r"v_cache\.shape=.*must equal k_cache\.shape"),
    (2, lambda v: quantize_pages(np.nan_to_num(v)), r"v_cache='QuantizedPages': must be stored"),
    (3, lambda t: t.astype(np.float32), r"block_tables\.dtype='float32': must be an integer"),
    (3, lambda t: np.where(t == t[1, 0], 99, t), r"block_tables\[1, 0\]=99: page id out of range"),
    (3, lambda t: -np.ones_like(t), r"block_tables\[0, 0\]=-1: page id out of range"),
    (3, lambda t: t[:1], r"block_tables\.shape\[0\]=1: must equal q\.shape\[0\]=2"),
    (4, lambda c: np.array([12, 17], np.int32), r"context length of sequence 1=17: exceeds"),
    (4, lambda c: np.array([12, 0], np.int32), r"context_lens\[1\]=0: must be >= 1"),
    (4, lambda c: c[:1], r"context_lens\.shape\[0\]=1: must equal q\.shape\[0\]=2"),
    (0, lambda q: np.where(q > 2.5, np.nan, q).astype(np.float32), r"q\[.*\]=nan: must be finite"),
])
def test_bad_decode_input_is_rejected_before_the_kernel(paged, index, make, match):
    args = _with(paged, index, make(paged[index]))
    with pytest.raises(KernelInputError, match=match):
        decode_attention(*args)


def test_nan_in_a_used_row_is_rejected_but_garbage_in_unused_rows_is_not(paged):
    q, k_cache, v_cache, tables, lens = paged
    k_cache[tables[1, 0], 5:] = np.nan  # sequence 1 uses 5 rows of its first page ...
    decode_attention(q, k_cache, v_cache, tables, lens)  # ... so garbage past them is fine
    v_cache[tables[1, 0], 4, 1, 7] = np.inf
    with pytest.raises(KernelInputError, match=r"v_cache\[pages \[\d+\]\]\[4, 1, 7\]=inf"):
        decode_attention(q, k_cache, v_cache, tables, lens)


def test_fp8_nan_codes_in_used_rows_are_rejected(paged):
    q, k_cache, v_cache, tables, lens = paged
    k8 = quantize_pages(np.nan_to_num(k_cache), "fp8_e4m3")
    v8 = quantize_pages(np.nan_to_num(v_cache), "fp8_e4m3")
    k8.codes[tables[0, 1], 2, 0, 0] = 0xFF
    with pytest.raises(KernelInputError, match="FP8 NaN code"):
        decode_attention(q, k8, v8, tables, lens)


def test_bad_chunk_input_is_rejected(paged):
    _, k_cache, v_cache, tables, _ = paged
    chunk = np.zeros((4, 6, 64), np.float32)
    with pytest.raises(KernelInputError, match=r"start=-1: must be an integer >= 0"):
        chunk_attention(chunk, k_cache, v_cache, tables[0], -1)
    with pytest.raises(KernelInputError, match=r"context length of sequence 0=17: exceeds"):
        chunk_attention(chunk, k_cache, v_cache, tables[0], 11)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"kv_heads_per_tile": 3}, r"kv_heads_per_tile=3: must divide the KV heads \(2\)"),
    ({"kv_heads_per_tile": 0}, r"kv_heads_per_tile=0: must be an integer >= 1"),
    ({"kv_heads_per_tile": 2, "heads_per_tile": 1},
     r"kv_heads_per_tile=2: above 1 needs whole groups: heads_per_tile=2, not 1"),
])
def test_bad_kv_heads_per_tile_is_rejected(paged, kwargs, match):
    with pytest.raises(KernelInputError, match=match):
        decode_attention(*paged, **kwargs)


def test_quantize_rejects_unknown_formats_and_nan():
    with pytest.raises(KernelInputError, match=r"fmt='int4': unknown choice \(choose from"):
        quantize_pages(np.zeros((1, 2, 1, 4), np.float32), "int4")
    cache = np.zeros((1, 2, 1, 4), np.float32)
    cache[0, 1, 0, 2] = np.nan
    with pytest.raises(RefimplError, match=r"cache\[0, 1, 0, 2\]=nan: must be finite"):
        quantize_pages(cache, "int8")


def test_inputs_whose_float32_scores_could_overflow_are_refused_not_turned_to_nan(qkv, paged):
    # q, k ~ 1e19: the float64 oracle is finite, float32 scores (~1e39) are not (issue 16).
    q, k, v = (x.copy() for x in qkv)
    big = np.float32(1e19)
    assert np.isfinite(reference_attention(q * big, k * big, v)).all()
    with pytest.raises(KernelInputError, match=r"max \|[qk]\|=\d\.\d+e\+19: too large: a score"):
        prefill_attention(q * big, k * big, v)
    with pytest.raises(KernelInputError, match=r"max \|v\|=.*sum over 8 keys"):
        prefill_attention(q, k, v * np.float32(1e38 / np.abs(v).max()))  # 8 x 1e38 overflows
    q1, k_cache, v_cache, tables, lens = paged
    with pytest.raises(KernelInputError, match=r"max \|[qk]\|=.*too large"):
        decode_attention(q1 * big, k_cache * big, v_cache, tables, lens)
    k8 = quantize_pages(np.nan_to_num(k_cache), "int8")  # (unused rows hold NaN)
    k8.scales[:] = 1e30  # dequantized magnitudes up to 128 * 1e30
    with pytest.raises(KernelInputError, match=r"max \|k\|=1\.28\d*e\+32: too large"):
        decode_attention(q1 * big, k8, quantize_pages(np.nan_to_num(v_cache), "int8"), tables,
                         lens)


def test_large_but_safe_magnitudes_still_match_the_oracle(qkv):
    q, k, v = (x * np.float32(1e17) for x in qkv)  # sqrt(64) * ~4e17 * ~4e17 < 3.4e38
    out = prefill_attention(q, k, v)
    assert np.isfinite(out).all()
    assert np.allclose(out, reference_attention(q, k, v), atol=1e-3 * float(np.abs(v).max()))
