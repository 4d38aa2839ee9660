"""Capacity search: the highest rate at which attainment holds, by bracketing then bisection.

Capacity as DistServe defines it (Zhong et al., OSDI 2024): the highest request rate at which
a chosen share of requests (90% by default) meets both its TTFT and TPOT targets. The search
is a small state machine, so a driver can run many at once (one per policy) and probe their
rates in parallel: `next_rate()` names the next rate to measure, `record(rate, attainment)`
takes the answer. From a start rate it doubles while attainment holds, or halves while it
does not, until one rate passes and a higher one fails (the bracket); then it bisects the
bracket until it is narrower than `tolerance` times its lower end. The answer is the bracket's
lower end: measured to pass, with a rate at most `tolerance` above it measured to fail.

It assumes attainment falls as the rate rises. Measured attainment is noisy (a few requests'
fate can flip near the threshold), so it may not be strictly monotone; the search then finds a
rate where it crosses the target, reported with the attainment measured there and just above.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from refimpl.errors import ConfigError

__all__ = ["CapacitySearch", "check_search_settings", "find_capacity"]


def check_search_settings(target: float, tolerance: float, start_rate: float,
                          max_rate: float) -> None:
    """A `ConfigError` naming the first setting a search cannot use."""
    for name, value in (("tolerance", tolerance), ("start_rate", start_rate),
                        ("max_rate", max_rate)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                math.isfinite(value) and value > 0):
            raise ConfigError(name, value, "must be a finite number above 0")
    if isinstance(target, bool) or not isinstance(target, (int, float)) or not 0 < target <= 1:
        raise ConfigError("target", target, "must be an attainment above 0 and at most 1")
    if tolerance >= 1:
        raise ConfigError("tolerance", tolerance, "must be below 1 (a share of the rate)")
    if max_rate < start_rate:
        raise ConfigError("max_rate", max_rate, f"must be at least start_rate={start_rate}")


@dataclass
class CapacitySearch:
    """One search's state: the probes so far and the bracket they give."""

    start_rate: float  # requests/s, the first rate probed
    target: float = 0.9  # attainment that must hold
    tolerance: float = 0.02  # stop when high - low <= tolerance * low
    max_rate: float = 1e4  # doubling stops here: capacity reported as "at least" this
    min_halvings: int = 12  # halving stops after this many: capacity reported as 0
    probes: dict[float, float] = field(default_factory=dict)  # rate -> attainment

    def __post_init__(self) -> None:
        check_search_settings(self.target, self.tolerance, self.start_rate, self.max_rate)

    @property
    def low(self) -> float | None:
        """The highest rate measured to pass, below every failing one."""
        high = self.high
        passing = [r for r, a in self.probes.items() if a >= self.target
                   and (high is None or r < high)]
        return max(passing, default=None)

    @property
    def high(self) -> float | None:
        """The lowest rate measured to fail."""
        return min((r for r, a in self.probes.items() if a < self.target), default=None)

    def next_rate(self) -> float | None:
        """The next rate to probe, or None when the search is done."""
        low, high = self.low, self.high
        if not self.probes:
            return float(self.start_rate)
        if low is None:  # everything failed so far: halve below the lowest failure
            rate = high / 2
            return rate if rate >= self.start_rate / 2 ** self.min_halvings else None
        if high is None:  # everything passed so far: double above the highest pass
            return min(low * 2, self.max_rate) if low < self.max_rate else None
        if high - low <= self.tolerance * low:
            return None
        return (low + high) / 2

    def record(self, rate: float, attainment: float) -> None:
        """Take the attainment measured at `rate`."""
        self.probes[float(rate)] = float(attainment)

    @property
    def capacity(self) -> float:
        """The answer (0.0 if even the lowest rate probed failed); final once `next_rate()`
        is None."""
        low = self.low
        return 0.0 if low is None else low

    @property
    def bounded(self) -> str:
        """`bracketed`, `at_max_rate` (it never failed up to max_rate) or `below_min_rate`."""
        if self.low is None:
            return "below_min_rate"
        return "at_max_rate" if self.high is None else "bracketed"


def find_capacity(probe, start_rate: float, *, target: float = 0.9,
                  tolerance: float = 0.02, max_rate: float = 1e4) -> CapacitySearch:
    """Run one search to the end, serially, with `probe(rate) -> attainment`."""
    search = CapacitySearch(start_rate, target, tolerance, max_rate)
    while (rate := search.next_rate()) is not None:
        search.record(rate, probe(rate))
    return search
