"""Measurements that graded exercise tests share: peak allocated memory, elapsed time.

`tracemalloc` sees every allocation made through Python's allocators, NumPy's included, so
the peak during a call is the extra space that call needed (objects built before it are not
counted). Tests compare peaks across input sizes rather than against a fixed figure, so the
check does not depend on the Python version's object sizes.
"""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable
from typing import TypeVar

__all__ = ["elapsed_s", "peak_bytes"]

T = TypeVar("T")


def peak_bytes(fn: Callable[[], T]) -> tuple[T, int]:
    """Call `fn()`; return its result and the peak bytes allocated during the call."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        start_bytes, _ = tracemalloc.get_traced_memory()
        result = fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak - start_bytes


def elapsed_s(fn: Callable[[], T]) -> tuple[T, float]:
    """Call `fn()`; return its result and the wall time it took in seconds."""
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start
