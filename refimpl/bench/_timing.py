"""Timing helpers shared by the benchmark suites: best-of-n wall time, thread pinning."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator


def best_seconds(fn: Callable[[], object], repeats: int) -> float:
    """The fastest of `repeats` calls after one warm-up call (compilation, page faults)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


@contextlib.contextmanager
def threads(num_threads: int) -> Iterator[None]:
    """Numba, BLAS and (if loaded) PyTorch limited to `num_threads` inside the block."""
    import numba
    import scipy.linalg.cython_blas  # noqa: F401  (BLAS must be loaded to be limited)
    from threadpoolctl import threadpool_limits

    before = numba.get_num_threads()
    numba.set_num_threads(num_threads)
    try:
        with threadpool_limits(limits=num_threads):
            yield
    finally:
        numba.set_num_threads(before)
