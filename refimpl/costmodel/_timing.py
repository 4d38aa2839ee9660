"""Timing helpers of the profilers: the median of repeated calls, and a progress bar."""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

__all__ = ["Progress", "median_s"]


def median_s(call: Callable[[], object], repeats: int, max_total_s: float = 0.2) -> float:
    """Median wall time of up to `repeats` calls after one warm-up (compilation, page faults).

    Stops early once the timed calls add up to `max_total_s`: long calls vary little, and the
    profile's time goes to the short ones, where timer noise and jitter weigh most.
    """
    call()
    times: list[float] = []
    while len(times) < repeats and sum(times) < max_total_s:
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


class Progress:
    """A one-line progress bar on stderr (or nothing, when disabled)."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.enabled, self.start = total, enabled, time.perf_counter()

    def show(self, done: int, label: str) -> None:
        """Redraw the bar at `done` of `total`, with `label` and the elapsed time."""
        if not self.enabled:
            return
        width = 30
        filled = width * done // max(self.total, 1)
        elapsed = time.perf_counter() - self.start
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{self.total} "
                         f"{label:<28} {elapsed:6.1f} s")
        if done == self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()
