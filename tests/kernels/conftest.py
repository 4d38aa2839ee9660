"""Fixtures of the kernel tests."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    """A fixed-seed generator: same inputs on every run."""
    return np.random.default_rng(1234)
