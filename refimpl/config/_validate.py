"""Small checks shared by the config dataclasses; each raises a `ConfigError` naming the field."""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np

from refimpl.errors import ConfigError


def positive_int(field: str, value: object) -> None:
    """Require a whole number >= 1."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ConfigError(field, value, "must be an integer")
    if value < 1:
        raise ConfigError(field, value, "must be at least 1")


def positive_real(field: str, value: object) -> None:
    """Require a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ConfigError(field, value, "must be a number")
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(field, value, "must be a finite number above 0")


def positive_limit(field: str, value: object) -> None:
    """Require a number > 0, infinity allowed (no limit)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ConfigError(field, value, "must be a number")
    if math.isnan(value) or value <= 0:
        raise ConfigError(field, value, "must be above 0 (inf: no limit)")


def positive_ints(field: str, values: object, *, empty: bool = False) -> None:
    """Require a tuple of whole numbers >= 1 (`empty`: possibly none)."""
    if not isinstance(values, tuple) or (not values and not empty):
        raise ConfigError(field, values, "must be a tuple of integers" if empty
                          else "must be a non-empty tuple of integers")
    for value in values:
        positive_int(field, value)


def check_seed(seed: object, field: str = "seed") -> int:
    """`seed` as an int, or a `ConfigError` unless it is an integer >= 0 (what NumPy takes)."""
    if isinstance(seed, bool) or not isinstance(seed, Integral):
        raise ConfigError(field, seed, "must be an integer")
    if seed < 0:
        raise ConfigError(field, seed, "must be at least 0")
    return int(seed)


def seeded_rng(seed: object) -> np.random.Generator:
    """NumPy's generator for a checked `seed` (every seeded draw in refimpl starts here)."""
    return np.random.default_rng(check_seed(seed))
