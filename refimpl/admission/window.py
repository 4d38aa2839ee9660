"""A rolling-window percentile: the p95 of the last W observations, updated one at a time.

Admission control must not look only at averages (the seed's section 5): it keeps the recent
tail of TTFT and TPOT. The window is a ring buffer (which value leaves next) beside the same
values kept sorted (any percentile is then an index). An update is two binary searches, one
delete and one insert in the sorted list: O(log W) comparisons plus a memmove of at most W
pointers, which for the W of a few hundred used here is a fraction of a microsecond; a query
is O(1). Percentiles interpolate linearly between order statistics, as NumPy's default does,
so the tests compare against `np.percentile` of the last W values exactly.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort

from refimpl.config._validate import positive_int
from refimpl.errors import ConfigError

__all__ = ["RollingWindow"]


class RollingWindow:
    """The last `size` observations, in arrival order and sorted."""

    def __init__(self, size: int) -> None:
        positive_int("size", size)
        self.size = size
        self._ring: list[float] = []  # in arrival order; `_next` is the oldest once full
        self._next = 0
        self._sorted: list[float] = []

    def __len__(self) -> int:
        return len(self._ring)

    def add(self, value: float) -> None:
        """Observe `value`; the oldest observation leaves once the window is full."""
        if not math.isfinite(value):
            raise ConfigError("value", value, "a window observation must be finite")
        if len(self._ring) < self.size:
            self._ring.append(value)
        else:
            oldest = self._ring[self._next]
            del self._sorted[bisect_left(self._sorted, oldest)]
            self._ring[self._next] = value
            self._next = (self._next + 1) % self.size
        insort(self._sorted, value)

    def percentile(self, q: float) -> float:
        """The `q`-th percentile (0..100, linear interpolation); NaN when empty."""
        if not 0 <= q <= 100:
            raise ConfigError("q", q, "a percentile lies in [0, 100]")
        values = self._sorted
        if not values:
            return math.nan
        position = (len(values) - 1) * q / 100
        low = int(position)
        high = min(low + 1, len(values) - 1)
        return values[low] + (values[high] - values[low]) * (position - low)
