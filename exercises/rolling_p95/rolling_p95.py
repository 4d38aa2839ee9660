"""Your solution to the rolling-percentile exercise: fill in `RollingQuantile`."""

from __future__ import annotations


class RollingQuantile:
    """The q-quantile (default p95) of the samples of the last `window_s` seconds."""

    def __init__(self, window_s: float, quantile: float = 0.95) -> None:
        """ValueError naming window_s if it is not > 0, or quantile if not in (0, 1]."""
        raise NotImplementedError("RollingQuantile: not written yet")

    def add(self, t_s: float, value: float) -> None:
        """Record `value` observed at time `t_s`."""
        raise NotImplementedError("add: not written yet")

    def value(self, now_s: float) -> float | None:
        """Nearest-rank quantile of the samples with now_s - window_s < t_s <= now_s.

        With n such samples sorted ascending, that is the ceil(quantile * n)-th (1-based);
        None when there are none. Times passed to `add` and `value` never go backwards:
        an earlier time than any seen before raises ValueError naming the argument.
        """
        raise NotImplementedError("value: not written yet")
