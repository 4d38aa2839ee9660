"""Timing helpers shared by the benchmark suites: best-of-n wall time, thread pinning."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from refimpl._timing import best_seconds

__all__ = ["best_seconds", "threads"]


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
