"""Timing helpers shared by the benchmark suites: best-of-n wall time, thread pinning."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

from refimpl._timing import best_seconds

__all__ = ["best_seconds", "threads"]


@contextlib.contextmanager
def threads(num_threads: int) -> Iterator[None]:
    """Numba, BLAS and (if loaded) PyTorch limited to `num_threads` inside the block."""
    import numba
    import scipy.linalg.cython_blas  # noqa: F401  (BLAS must be loaded to be limited)
    from threadpoolctl import threadpool_limits

    # Only a PyTorch already imported: importing it here would cost every suite seconds.
    torch = sys.modules.get("torch")
    before = numba.get_num_threads(), torch.get_num_threads() if torch else None
    numba.set_num_threads(num_threads)
    if torch:
        torch.set_num_threads(num_threads)  # by name: threadpoolctl reaches it only via OpenMP
    try:
        with threadpool_limits(limits=num_threads):
            yield
    finally:
        numba.set_num_threads(before[0])
        if torch:
            torch.set_num_threads(before[1])
