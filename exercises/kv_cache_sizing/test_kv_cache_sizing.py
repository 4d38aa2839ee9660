"""Graded tests for the KV-cache sizing warm-up, checked against refimpl's `ModelConfig`."""

from __future__ import annotations

import pytest

from refimpl import ModelConfig
from refimpl.config import MODEL_PRESETS


@pytest.mark.points(1)
def test_the_formula_counts_k_and_v_for_every_layer_and_head(solution):
    """2 * layers * kv_heads * head_dim * bytes: Llama-2-7B in fp16 takes 512 KiB a token."""
    assert solution.kv_bytes_per_token(1, 1, 1, 1) == 2
    assert solution.kv_bytes_per_token(32, 32, 128, 2) == 512 * 1024
    assert solution.kv_bytes_per_token(3, 5, 7, 4) == 840


@pytest.mark.points(2)
def test_every_model_preset_agrees_with_refimpl(solution):
    """Every refimpl model preset gives refimpl's own bytes per token (GQA, fp32, bf16)."""
    for name in MODEL_PRESETS:
        model = ModelConfig.preset(name)
        got = solution.kv_bytes_per_token(model.num_layers, model.num_kv_heads,
                                          model.head_dim, model.kv_dtype_bytes)
        assert got == model.kv_bytes_per_token(), name


@pytest.mark.points(1)
def test_pages_round_up_and_no_tokens_need_no_pages(solution):
    """A partly filled page is still a page; 0 tokens take 0 pages."""
    cases = {(0, 16): 0, (1, 16): 1, (16, 16): 1, (17, 16): 2, (4096, 16): 256,
             (10**18 + 1, 10**9): 10**9 + 1}  # float division rounds this one wrong
    for (num_tokens, page_tokens), want in cases.items():
        assert solution.pages_for(num_tokens, page_tokens) == want, (num_tokens, page_tokens)


@pytest.mark.points(1)
def test_a_pool_counts_only_whole_pages(solution):
    """The pool holds floor(memory / page bytes) pages: a partial page is no page."""
    assert solution.pool_pages(1000, 10, 10) == 10
    assert solution.pool_pages(999, 10, 10) == 9
    assert solution.pool_pages(99, 10, 10) == 0
    llama = ModelConfig.preset("llama-2-7b")  # 40 GiB of KV at 512 KiB a token, 16-token pages
    assert solution.pool_pages(40 << 30, llama.kv_bytes_per_token(), 16) == 5120


@pytest.mark.points(1)
def test_concurrency_counts_requests_that_fit_whole(solution):
    """A pool holds as many requests as it has room for all of their pages."""
    assert solution.max_concurrent(100, 16, 16) == 100
    assert solution.max_concurrent(100, 17, 16) == 50
    assert solution.max_concurrent(5120, 4096, 16) == 20
    assert solution.max_concurrent(3, 100, 16) == 0


@pytest.mark.points(2)
def test_bad_sizes_raise_value_error_naming_the_argument(solution):
    """Zero or negative sizes raise ValueError whose message names the argument."""
    with pytest.raises(ValueError, match="num_layers"):
        solution.kv_bytes_per_token(0, 8, 128, 2)
    with pytest.raises(ValueError, match="dtype_bytes"):
        solution.kv_bytes_per_token(32, 8, 128, -2)
    with pytest.raises(ValueError, match="page_tokens"):
        solution.pages_for(10, 0)
    with pytest.raises(ValueError, match="num_tokens"):
        solution.pages_for(-1, 16)
    with pytest.raises(ValueError, match="bytes_per_token"):
        solution.pool_pages(1000, 0, 16)
