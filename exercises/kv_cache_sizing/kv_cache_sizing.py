"""Your solution to the KV-cache sizing warm-up: fill in the four functions."""

from __future__ import annotations


def kv_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    """Bytes of K and V that one token keeps in the cache, over all layers.

    Raises ValueError naming the argument if any of them is below 1.
    """
    raise NotImplementedError("kv_bytes_per_token: not written yet")


def pages_for(num_tokens: int, page_tokens: int) -> int:
    """Pages of `page_tokens` tokens needed to hold `num_tokens` tokens (0 tokens: 0 pages)."""
    raise NotImplementedError("pages_for: not written yet")


def pool_pages(memory_bytes: int, bytes_per_token: int, page_tokens: int) -> int:
    """Whole pages that fit in `memory_bytes` when a token takes `bytes_per_token`."""
    raise NotImplementedError("pool_pages: not written yet")


def max_concurrent(num_pages: int, num_tokens: int, page_tokens: int) -> int:
    """Requests of `num_tokens` tokens each that a pool of `num_pages` pages holds at once."""
    raise NotImplementedError("max_concurrent: not written yet")
