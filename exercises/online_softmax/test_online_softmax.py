"""Graded tests for online softmax over tiles, against a naive (whole-matrix) oracle."""

from __future__ import annotations

import numpy as np
import pytest

from refimpl.grading.measure import peak_bytes


def naive_attention(q, k, v, causal=False):
    """The oracle: all scores at once, max-subtracted softmax, optional causal mask."""
    scores = q @ k.T / np.sqrt(q.shape[1])  # (nq, nk)
    if causal:
        num_queries, num_keys = scores.shape
        last_key = np.arange(num_queries) + num_keys - num_queries
        scores[np.arange(num_keys)[None, :] > last_key[:, None]] = -np.inf
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    return (weights / weights.sum(axis=1, keepdims=True)) @ v


def qkv(seed, num_queries, num_keys, d=8, d_v=6, scale=1.0):
    """Random float64 q (nq, d), k (nk, d), v (nk, d_v)."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((num_queries, d)) * scale,
            rng.standard_normal((num_keys, d)) * scale, rng.standard_normal((num_keys, d_v)))


@pytest.mark.points(2)
def test_it_matches_softmax_attention_on_random_inputs(solution):
    """Random q, k, v of several shapes give softmax(q k^T / sqrt(d)) v."""
    for seed, (num_queries, num_keys) in enumerate([(1, 1), (1, 50), (7, 33), (16, 128)]):
        q, k, v = qkv(seed, num_queries, num_keys)
        got = solution.attention(q, k, v, tile_tokens=8)
        assert got.shape == (num_queries, 6)
        np.testing.assert_allclose(got, naive_attention(q, k, v), rtol=1e-10, atol=1e-12)


@pytest.mark.points(2)
def test_every_tile_size_gives_the_same_answer(solution):
    """Tiles of 1, a divisor, a non-divisor, all keys, and more than all keys agree."""
    q, k, v = qkv(1, 5, 60)
    want = naive_attention(q, k, v)
    for tile_tokens in (1, 12, 7, 60, 1000):
        got = solution.attention(q, k, v, tile_tokens=tile_tokens)
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12, err_msg=f"{tile_tokens=}")


@pytest.mark.points(2)
def test_huge_scores_neither_overflow_nor_lose_precision(solution):
    """Scores in the thousands (exp would overflow) still give the right, finite result."""
    q, k, v = qkv(2, 4, 40, scale=40.0)  # scores of order 40 * 40 * sqrt(8) / sqrt(8) = 1600
    got = solution.attention(q, k, v, tile_tokens=6)
    assert np.isfinite(got).all(), "inf or nan in the output: subtract a running max"
    np.testing.assert_allclose(got, naive_attention(q, k, v), rtol=1e-9, atol=1e-12)


@pytest.mark.points(2)
def test_the_causal_mask_hides_future_keys(solution):
    """With causal=True each query sees only keys up to its own position."""
    for num_queries, num_keys in ((10, 10), (3, 20), (1, 9)):
        q, k, v = qkv(3, num_queries, num_keys)
        got = solution.attention(q, k, v, tile_tokens=4, causal=True)
        np.testing.assert_allclose(got, naive_attention(q, k, v, causal=True), rtol=1e-10,
                                   atol=1e-12, err_msg=f"{num_queries=} {num_keys=}")


@pytest.mark.points(2)
def test_it_never_holds_all_the_scores_at_once(solution):
    """On 200,000 keys, peak extra memory stays under a quarter of the full score row."""
    q, k, v = qkv(4, 1, 200_000, d=4, d_v=4)
    full_scores_bytes = 200_000 * 8
    got, peak = peak_bytes(lambda: solution.attention(q, k, v, tile_tokens=256))
    assert peak < full_scores_bytes // 4, (
        f"attention allocated up to {peak:,} bytes; all the scores take {full_scores_bytes:,}"
        ": compute them one tile at a time"
    )
    np.testing.assert_allclose(got, naive_attention(q, k, v), rtol=1e-9, atol=1e-12)


@pytest.mark.points(1)
def test_a_tile_size_below_one_raises_value_error(solution):
    """tile_tokens=0 raises ValueError naming tile_tokens."""
    q, k, v = qkv(5, 2, 5)
    with pytest.raises(ValueError, match="tile_tokens"):
        solution.attention(q, k, v, tile_tokens=0)
