"""Reference solution: the seed's KV formula, and whole pages by ceiling and floor division."""

from __future__ import annotations


def _at_least(name: str, value: int, low: int) -> None:
    if value < low:
        raise ValueError(f"{name}={value!r}: must be at least {low}")


def kv_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    """Bytes of K and V that one token keeps in the cache, over all layers."""
    for name, value in (("num_layers", num_layers), ("num_kv_heads", num_kv_heads),
                        ("head_dim", head_dim), ("dtype_bytes", dtype_bytes)):
        _at_least(name, value, 1)
    return 2 * num_layers * num_kv_heads * head_dim * dtype_bytes  # K and V, per layer and head


def pages_for(num_tokens: int, page_tokens: int) -> int:
    """Pages of `page_tokens` tokens needed to hold `num_tokens` tokens (0 tokens: 0 pages)."""
    _at_least("num_tokens", num_tokens, 0)
    _at_least("page_tokens", page_tokens, 1)
    return -(-num_tokens // page_tokens)  # ceiling division in integers: no float rounding


def pool_pages(memory_bytes: int, bytes_per_token: int, page_tokens: int) -> int:
    """Whole pages that fit in `memory_bytes` when a token takes `bytes_per_token`."""
    _at_least("memory_bytes", memory_bytes, 0)
    _at_least("bytes_per_token", bytes_per_token, 1)
    _at_least("page_tokens", page_tokens, 1)
    return memory_bytes // (bytes_per_token * page_tokens)


def max_concurrent(num_pages: int, num_tokens: int, page_tokens: int) -> int:
    """Requests of `num_tokens` tokens each that a pool of `num_pages` pages holds at once."""
    _at_least("num_pages", num_pages, 0)
    _at_least("num_tokens", num_tokens, 1)
    return num_pages // pages_for(num_tokens, page_tokens)
