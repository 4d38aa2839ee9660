"""Small checks shared by the config dataclasses; each raises a `ConfigError` naming the field."""

from __future__ import annotations

import math
from numbers import Integral, Real

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
