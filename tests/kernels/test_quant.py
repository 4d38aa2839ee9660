"""INT8 and FP8 e4m3 pages: encoding edge cases, round trips, and the attention error."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from refimpl._numba import kernel
from refimpl.kernels import (
    PagedTiles,
    chunk_attention,
    chunk_costs,
    decode_attention,
    dequantize_pages,
    fp8_e4m3_decode,
    fp8_e4m3_encode,
    quantize_pages,
)
from refimpl.kernels._floatbits import e4m3_value, target_has_f16c
from refimpl.kernels.quant import FP8_E4M3_NAN, FP8_E4M3_TABLE

from ._helpers import paged_kv, paged_oracle, randn, rel_err

# Measured relative attention error (max |err| / max |ref|) on standard normal K/V, d = 64:
# INT8 ~0.5%, FP8 e4m3 ~3%; the bounds leave room for other seeds.
ERROR_BOUND = {"int8": 0.015, "fp8_e4m3": 0.08}


def test_every_finite_fp8_code_round_trips():
    codes = np.array([c for c in range(256) if c & 0x7F != 0x7F], np.uint8)
    np.testing.assert_array_equal(fp8_e4m3_encode(fp8_e4m3_decode(codes)), codes)


def test_fp8_known_values_nan_and_saturation():
    values = fp8_e4m3_decode(np.array([0x00, 0x01, 0x08, 0x38, 0x7E, 0xFE, 0x7F], np.uint8))
    np.testing.assert_array_equal(values[:6], [0.0, 2.0**-9, 2.0**-6, 1.0, 448.0, -448.0])
    assert np.isnan(values[6])
    codes = fp8_e4m3_encode(np.array([1e6, -np.inf, np.inf, np.nan, 464.0, -0.0], np.float32))
    assert codes.tolist() == [0x7E, 0xFE, 0x7E, 0x7F, 0x7E, 0x80]


def test_fp8_rounds_to_nearest_with_ties_to_even():
    # 1.0625 lies halfway between 1.0 (code 0x38, even) and 1.125 (0x39): ties go to even.
    # 1.1875 is halfway between 1.125 (0x39) and 1.25 (0x3A, even).
    codes = fp8_e4m3_encode(np.array([1.0625, 1.1875, 1.07, 2.0**-10], np.float32))
    assert codes.tolist() == [0x38, 0x3A, 0x39, 0x00]


@pytest.mark.parametrize("fmt", ["int8", "fp8_e4m3"])
def test_quantized_pages_round_trip_within_half_a_step(rng, fmt):
    cache = randn(rng, 5, 4, 2, 16)
    cache[1, :, 0] = 0.0  # an all-zero (page, head) keeps a usable scale
    pages = quantize_pages(cache, fmt)
    assert pages.scales.shape == (5, 2)
    err = np.abs(dequantize_pages(pages) - cache)
    # INT8 steps are one scale apart; e4m3 steps at most 2**-3 relative (plus subnormals).
    bound = 0.5 * pages.scales[:, None, :, None] * (1.0 if fmt == "int8" else 32.0)
    assert (err <= bound * (1 + 1e-6)).all()
    if fmt == "fp8_e4m3":
        rel = err / np.maximum(np.abs(cache), 1e-30)
        assert rel[np.abs(cache) >= pages.scales[:, None, :, None] * 2.0**-6].max() <= 2.0**-4


@pytest.mark.numba
@pytest.mark.parametrize("fmt", ["int8", "fp8_e4m3"])
def test_decode_reads_quantized_pages_directly_with_a_bounded_error(rng, fmt):
    _, _, k_cache, v_cache, tables = paged_kv(rng, 3, 2, 41, 64)
    k_cache, v_cache = np.nan_to_num(k_cache), np.nan_to_num(v_cache)  # quantizable
    q = randn(rng, 3, 8, 64)
    lens = np.array([41, 9, 30], np.int32)
    kq, vq = quantize_pages(k_cache, fmt), quantize_pages(v_cache, fmt)
    k_deq, v_deq = dequantize_pages(kq), dequantize_pages(vq)
    out = decode_attention(q, kq, vq, tables, lens)
    # The kernel decodes exactly as dequantize_pages does ...
    np.testing.assert_allclose(out, decode_attention(q, k_deq, v_deq, tables, lens), atol=1e-5)
    # ... and the error against the unquantized oracle is bounded.
    err = rel_err(out, paged_oracle(q[:, :, None], k_cache, v_cache, tables, lens)[:, :, 0])
    assert err <= ERROR_BOUND[fmt]


@pytest.mark.numba
@pytest.mark.parametrize("kv_heads_per_tile", [1, 2])
def test_chunk_over_int8_pages_counts_one_byte_per_element_and_the_scales(rng,
                                                                          kv_heads_per_tile):
    _, _, k_cache, _, tables = paged_kv(rng, 1, 2, 30, 64)
    pages = quantize_pages(np.nan_to_num(k_cache), "int8")
    _, counted = chunk_attention(randn(rng, 4, 10, 64), pages, pages, tables[0], 20, tile_q=4,
                                 pages_per_tile=2, heads_per_tile=2,
                                 kv_heads_per_tile=kv_heads_per_tile, return_costs=True)
    tiles = PagedTiles(4, 2, 2, kv_heads_per_tile)
    assert counted == chunk_costs(tiles, start=20, num_queries=10, num_q_heads=4,
                                  num_kv_heads=2, head_dim=64, page_size=8, kv_bytes=1)


@kernel
def _e4m3_values(codes, out):
    for i in range(codes.shape[0]):
        out[i] = e4m3_value(codes[i])


@pytest.mark.numba
def test_the_kernels_fp8_decoding_equals_the_table_on_every_code():
    codes = np.array([c for c in range(256) if c & 0x7F != FP8_E4M3_NAN], np.uint8)
    out = np.empty(codes.shape, np.float32)
    _e4m3_values(codes, out)
    np.testing.assert_array_equal(out, FP8_E4M3_TABLE[codes])
    np.testing.assert_array_equal(np.signbit(out), np.signbit(FP8_E4M3_TABLE[codes]))  # -0.0


_GENERIC_TARGET_RUN = '''
import numba
import numpy as np
from refimpl.kernels._floatbits import e4m3_value
from refimpl.kernels.quant import FP8_E4M3_NAN, FP8_E4M3_TABLE

@numba.njit
def values(codes, out):
    for i in range(codes.shape[0]):
        out[i] = e4m3_value(codes[i])

codes = np.array([c for c in range(256) if c & 0x7F != FP8_E4M3_NAN], np.uint8)
out = np.empty(codes.shape, np.float32)
values(codes, out)
np.testing.assert_array_equal(out, FP8_E4M3_TABLE[codes])
np.testing.assert_array_equal(np.signbit(out), np.signbit(FP8_E4M3_TABLE[codes]))
print("exact")
'''


@pytest.mark.numba
def test_fp8_decoding_is_exact_on_a_target_without_f16c(tmp_path):
    # a generic x86-64 target has no F16C: a half-to-float32 widening there becomes a call
    # Numba's JIT does not link, and the process dies, so this runs in a process of its own
    env = {**os.environ, "NUMBA_CPU_NAME": "generic", "NUMBA_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", _GENERIC_TARGET_RUN], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["exact"]


def _context_with_features(features: str) -> SimpleNamespace:
    codegen = SimpleNamespace(magic_tuple=lambda: ("x86_64-unknown-linux-gnu", "cpu", features))
    return SimpleNamespace(codegen=lambda: codegen)


@pytest.mark.parametrize(("features", "has"), [
    ("+64bit,+avx2,+f16c,+fma", True), ("+avx2,-f16c,+fma", False), ("", False),
    ("+avx512fp16", False)])
def test_the_half_path_is_chosen_only_where_the_target_names_f16c(features, has):
    assert target_has_f16c(_context_with_features(features)) is has
