"""Timing helper of the profilers: the median and fastest of repeated calls on the CPU clock."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

__all__ = ["time_calls"]


def time_calls(call: Callable[[], object], repeats: int, max_total_s: float = 0.2, *,
               warm_up: bool = True) -> tuple[float, float]:
    """(median, fastest) CPU time of this thread over 3 to `repeats` calls, after one warm-up
    call (compilation, page faults) unless `warm_up` is False.

    Past three calls it stops once they add up to `max_total_s`: long calls vary little, and the
    profile's time goes to the short ones, where timer noise and jitter weigh most. The clock is
    the thread's CPU time, not the wall: on a shared machine a call preempted by another process
    loses whole time slices (milliseconds) of wall time that say nothing about the kernel. The
    kernels and BLAS run serially on this thread, so on an idle machine the two clocks agree;
    for the same reason the fastest call is the cleaner measure (load only ever adds time).
    """
    if warm_up:
        call()
    times: list[float] = []
    while len(times) < min(3, repeats) or (len(times) < repeats and sum(times) < max_total_s):
        start = time.thread_time()
        call()
        times.append(time.thread_time() - start)
    return statistics.median(times), min(times)
