"""Reference solution: online softmax (Milakov & Gimelshein 2018), as in FlashAttention.

Per query row keep the running max `m`, the running sum `total` of exp(score - m) and the
running weighted sum `acc` of values. A new tile with a larger max rescales the old `total` and
`acc` by exp(m_old - m_new), so the result equals the softmax over all keys seen so far.
"""

from __future__ import annotations

import numpy as np


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, tile_tokens: int,
              causal: bool = False) -> np.ndarray:
    """softmax(q @ k.T / sqrt(d)) @ v, reading k and v one tile of `tile_tokens` rows at a time."""
    if tile_tokens < 1:
        raise ValueError(f"tile_tokens={tile_tokens!r}: must be at least 1")
    num_queries, d = q.shape
    num_keys = k.shape[0]
    scale = 1.0 / np.sqrt(d)
    m = np.full(num_queries, -np.inf)  # (nq,) running max of the scores seen
    total = np.zeros(num_queries)  # (nq,) running sum of exp(score - m)
    acc = np.zeros((num_queries, v.shape[1]))  # (nq, dv) running sum of exp(score - m) * v
    last_key = np.arange(num_queries) + num_keys - num_queries  # (nq,) last key each may see
    for start in range(0, num_keys, tile_tokens):
        stop = min(start + tile_tokens, num_keys)
        scores = (q @ k[start:stop].T) * scale  # (nq, tile)
        if causal:
            scores[np.arange(start, stop)[None, :] > last_key[:, None]] = -np.inf
        m_new = np.maximum(m, scores.max(axis=1))  # (nq,)
        # A row that has seen only masked keys keeps m = -inf; shift by 0 there to avoid nan.
        shift = np.where(np.isneginf(m_new), 0.0, m_new)
        p = np.exp(scores - shift[:, None])  # (nq, tile)
        rescale = np.exp(np.where(np.isneginf(m), -np.inf, m - shift))  # (nq,) 0 if nothing yet
        total = total * rescale + p.sum(axis=1)
        acc = acc * rescale[:, None] + p @ v[start:stop]
        m = m_new
    return acc / total[:, None]
