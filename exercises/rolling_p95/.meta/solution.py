"""Reference solution: samples in arrival order (a deque, to expire the oldest) and in value
order (a sorted list, for the rank). bisect.insort and list.pop are O(n) memory moves but
run in C, so they are fast at these sizes; a balanced tree or two heaps would be O(log n)."""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections import deque


class RollingQuantile:
    """The q-quantile (default p95) of the samples of the last `window_s` seconds."""

    def __init__(self, window_s: float, quantile: float = 0.95) -> None:
        """An empty window."""
        if not window_s > 0:
            raise ValueError(f"window_s={window_s!r}: must be above 0")
        if not 0 < quantile <= 1:
            raise ValueError(f"quantile={quantile!r}: must be in (0, 1]")
        self.window_s = window_s
        self.quantile = quantile
        self._by_time: deque[tuple[float, float]] = deque()  # (t_s, value), oldest first
        self._sorted: list[float] = []  # the same values, ascending
        self._latest_s = -math.inf  # the latest time seen by add or value

    def _advance(self, name: str, t_s: float) -> None:
        if t_s < self._latest_s:
            raise ValueError(f"{name}={t_s!r}: earlier than {self._latest_s!r}, time went back")
        self._latest_s = t_s

    def add(self, t_s: float, value: float) -> None:
        """Record `value` observed at time `t_s`."""
        self._advance("t_s", t_s)
        self._by_time.append((t_s, value))
        insort(self._sorted, value)

    def value(self, now_s: float) -> float | None:
        """Nearest-rank quantile of the samples with now_s - window_s < t_s <= now_s."""
        self._advance("now_s", now_s)
        while self._by_time and self._by_time[0][0] <= now_s - self.window_s:
            _, old = self._by_time.popleft()
            self._sorted.pop(bisect_left(self._sorted, old))
        if not self._sorted:
            return None
        rank = math.ceil(self.quantile * len(self._sorted))  # 1-based nearest rank
        return self._sorted[rank - 1]
