"""Argument checks and page arithmetic shared by the page pool's modules (pool, slots, batch,
tiers).

One home for them, so that `PagePool`'s mixins (`refimpl.kv.slots`, `refimpl.kv.batch`,
`refimpl.kv.tiers`) need not import `refimpl.kv.pool`, which imports them.
"""

from __future__ import annotations

import numpy as np

from refimpl.errors import ConfigError

__all__ = ["check_count", "pages_for"]


def pages_for(num_tokens: int, tokens_per_page: int) -> int:
    """Pages that hold `num_tokens` tokens."""
    return -(-num_tokens // tokens_per_page)


def check_count(field: str, value: object, minimum: int) -> int:
    """`value` as an int, or a `ConfigError` naming `field` unless it is an integer >= minimum."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ConfigError(field, value, "must be an integer")
    if value < minimum:
        raise ConfigError(field, value, f"must be at least {minimum}")
    return int(value)
