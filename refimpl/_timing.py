"""Best-of-n wall-clock timing, shared by the machine probe and the benchmark suites."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["best_seconds"]


def best_seconds(fn: Callable[[], object], repeats: int) -> float:
    """The fastest of `repeats` calls after one warm-up call (compilation, page faults)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best
