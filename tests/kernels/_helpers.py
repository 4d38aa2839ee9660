"""Helpers shared by the kernel tests: random inputs, paged layouts, the paged oracle."""

from __future__ import annotations

import numpy as np

from refimpl.kernels import gather_pages, reference_attention

REL_TOL = 1e-4  # the bound on relative error against the float64 oracle


def rel_err(out: np.ndarray, ref: np.ndarray) -> float:
    """max |out - ref| / max |ref|."""
    return float(np.abs(out.astype(np.float64) - ref).max() / np.abs(ref).max())


def randn(rng: np.random.Generator, *shape: int) -> np.ndarray:
    """Standard normal float32 array."""
    return rng.standard_normal(shape, dtype=np.float32)


def paged_oracle(q: np.ndarray, k_cache, v_cache, block_tables, context_lens) -> np.ndarray:
    """Oracle for the last q.shape[2] queries of each sequence: q (B, Hq, C, d)."""
    outs = []
    for b, length in enumerate(context_lens):
        k = gather_pages(k_cache, block_tables[b], int(length))[None]  # (1, Hkv, L, d)
        v = gather_pages(v_cache, block_tables[b], int(length))[None]
        outs.append(reference_attention(q[b : b + 1], k, v)[0])
    return np.stack(outs)  # (B, Hq, C, d)


def scatter_pages(rng: np.random.Generator, page_size: int, *arrays: np.ndarray):
    """Store contiguous (B, Hkv, T, d) K and V rows in the same shuffled pages.

    Returns one (num_pages, P, Hkv, d) cache per array and the (B, max_pages) block tables.
    Pages in no table, and rows past the end of a sequence, are NaN: a kernel that read one
    would return NaN.
    """
    batch, num_kv_heads, seq_len, head_dim = arrays[0].shape
    pages_per_seq = -(-seq_len // page_size)
    num_pages = batch * pages_per_seq + 3  # 3 pages belong to nobody
    order = rng.permutation(num_pages)[: batch * pages_per_seq]
    block_tables = order.reshape(batch, pages_per_seq).astype(np.int32)
    caches = []
    for x in arrays:
        cache = np.full((num_pages, page_size, num_kv_heads, head_dim), np.nan, np.float32)
        padded = np.full((batch, num_kv_heads, pages_per_seq * page_size, head_dim), np.nan,
                         np.float32)
        padded[:, :, :seq_len] = x
        for b in range(batch):
            pages = padded[b].reshape(num_kv_heads, pages_per_seq, page_size, head_dim)
            cache[block_tables[b]] = pages.transpose(1, 2, 0, 3)  # (pages, P, Hkv, d)
        caches.append(cache)
    return caches, block_tables


def paged_kv(rng: np.random.Generator, batch: int, num_kv_heads: int, seq_len: int,
             head_dim: int, page_size: int = 8):
    """Random K and V, contiguous and paged: (k, v, k_cache, v_cache, block_tables)."""
    k = randn(rng, batch, num_kv_heads, seq_len, head_dim)
    v = randn(rng, batch, num_kv_heads, seq_len, head_dim)
    (k_cache, v_cache), tables = scatter_pages(rng, page_size, k, v)
    return k, v, k_cache, v_cache, tables
