"""The NumPy oracle: attention computed the plain way, in float64, for tests and benchmarks.

Every kernel is checked against these few lines. The whole score matrix is materialised, which
is exactly what the tiled kernels avoid; it is fine for the small shapes tests use.
"""

from __future__ import annotations

import numpy as np

from refimpl.kernels.validate import check_heads, index_array

__all__ = ["gather_pages", "reference_attention"]


def reference_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray,
                        causal: bool = True) -> np.ndarray:
    """softmax(q k^T / sqrt(d)) v with grouped-query heads, accumulated in float64.

    q: (B, Hq, Tq, d); k, v: (B, Hkv, Tk, d) with Tk >= Tq. Query i sits at position
    Tk - Tq + i (the queries are the last Tq tokens), so with Tq == Tk this is ordinary causal
    prefill and with Tq == 1 it is a decode step. Returns (B, Hq, Tq, d) float32.
    """
    num_q_heads, num_queries, head_dim = q.shape[1:]
    num_kv_heads, num_keys = k.shape[1], k.shape[2]
    check_heads("q.shape[1]", num_q_heads, "k.shape[1]", num_kv_heads)
    group = num_q_heads // num_kv_heads
    k64 = np.repeat(k.astype(np.float64), group, axis=1)  # (B, Hq, Tk, d): head h reads h // group
    v64 = np.repeat(v.astype(np.float64), group, axis=1)
    scores = q.astype(np.float64) @ k64.swapaxes(-1, -2) / np.sqrt(head_dim)  # (B, Hq, Tq, Tk)
    if causal:
        positions = np.arange(num_keys - num_queries, num_keys)[:, None]  # (Tq, 1)
        scores = np.where(np.arange(num_keys)[None, :] <= positions, scores, -np.inf)
    scores -= scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights /= weights.sum(axis=-1, keepdims=True)
    return (weights @ v64).astype(np.float32)  # (B, Hq, Tq, d)


def gather_pages(cache: np.ndarray, block_table: np.ndarray, length: int) -> np.ndarray:
    """The first `length` tokens of one sequence as contiguous (Hkv, length, d) rows.

    cache: (num_pages, P, Hkv, d); block_table: (max_pages,) page ids in order.
    """
    page_size = cache.shape[1]
    table = index_array("block_table", block_table, 1)
    pages = cache[table[: -(-length // page_size)]]  # (n, P, Hkv, d)
    tokens = pages.reshape(-1, *cache.shape[2:])[:length]  # (length, Hkv, d)
    return np.ascontiguousarray(tokens.transpose(1, 0, 2))
