"""The Numba policy module: environment switches and serial/parallel pairs from one function."""

from __future__ import annotations

import numpy as np
import pytest

from refimpl import _numba
from refimpl.errors import ConfigError


def _total(values):
    acc = 0.0
    for i in _numba_prange(values.shape[0]):
        acc += values[i]
    return acc


from numba import prange as _numba_prange  # noqa: E402  (used inside the kernel above)


def test_switches_default_to_cached_and_serial(monkeypatch):
    monkeypatch.delenv("REFIMPL_NUMBA_CACHE", raising=False)
    monkeypatch.delenv("REFIMPL_PARALLEL", raising=False)
    assert _numba.cache_enabled() and not _numba.parallel_default()


def test_switches_read_the_environment(monkeypatch):
    monkeypatch.setenv("REFIMPL_NUMBA_CACHE", "0")
    monkeypatch.setenv("REFIMPL_PARALLEL", "yes")
    assert not _numba.cache_enabled() and _numba.parallel_default()
    monkeypatch.setenv("REFIMPL_PARALLEL", "maybe")
    with pytest.raises(ConfigError, match="REFIMPL_PARALLEL='maybe'"):
        _numba.parallel_default()


def test_kernel_pair_builds_agreeing_serial_and_parallel_variants(monkeypatch):
    monkeypatch.setenv("REFIMPL_NUMBA_CACHE", "0")  # a test-local function: nothing to cache
    pair = _numba.kernel_pair(_total)
    values = np.arange(1000, dtype=np.float64)
    assert pair.serial(values) == pair.parallel(values) == values.sum()
    monkeypatch.setenv("REFIMPL_PARALLEL", "1")
    assert pair.default is pair.parallel
