"""Online calibration: correct the offline model from observed step times, and detect drift.

The seed's last risk: a static profile drifts from live conditions (load, thermals, another
tenant). Each observation's log ratio measured / predicted updates an exponentially weighted
mean per (phase, power-of-two bucket of B and T), with a per-phase mean for buckets not seen
yet; a two-sided CUSUM (Page, 1954) on the same log ratios flags when the profile stopped fitting.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from refimpl.errors import ConfigError

__all__ = ["Calibrator", "DriftState"]


@dataclass
class DriftState:
    """Two-sided CUSUM of one phase's log ratios; `fired` stays set until `reset`."""

    upper: float = 0.0  # evidence the machine is slower than the profile
    lower: float = 0.0  # evidence it is faster
    fired: bool = False


def _bucket(batch: float, seq_len: float) -> tuple[int, int]:
    """Power-of-two bucket of (B, T): shapes within 2x share a correction."""
    return int(math.log2(max(batch, 1))), int(math.log2(max(seq_len, 1)))


class Calibrator:
    """`base(phase, B, T)` seconds, corrected online by `observe`.

    Args:
        base: the offline prediction, e.g. `CostTable.predict_s` (by default 1: the caller
            corrects its own predictions with `correction` and `observe_ratio`).
        alpha: EWMA weight of the newest observation (0.2: about 10 observations of a bucket
            bring a step change to within 5%).
        slack: CUSUM allowance per observation, in log ratio (log 1.1: +-10% is noise).
        threshold: CUSUM level that fires the detector, in log ratio (1.0: e.g. four
            observations 1.5x off, or a dozen 1.2x off).
    """

    def __init__(self, base: Callable[[str, float, float], float] = lambda *_: 1.0, *,
                 alpha: float = 0.2, slack: float = math.log(1.1), threshold: float = 1.0
                 ) -> None:
        if not 0.0 < alpha <= 1.0:
            raise ConfigError("alpha", alpha, "must be in (0, 1]")
        self.base = base
        self.alpha, self.slack, self.threshold = alpha, slack, threshold
        self._buckets: dict[tuple[str, int, int], float] = {}  # EWMA of log ratio
        self._phases: dict[str, float] = {}
        self.drift: dict[str, DriftState] = {}

    def correction(self, phase: str, batch: float, seq_len: float) -> float:
        """The factor applied to the base prediction (1.0 before any observation)."""
        key = (phase, *_bucket(batch, seq_len))
        log_ratio = self._buckets.get(key)
        if log_ratio is None:
            log_ratio = self._phases.get(phase, 0.0)
        return math.exp(log_ratio)

    def predict_s(self, phase: str, batch: float, seq_len: float) -> float:
        """The calibrated prediction."""
        return self.base(phase, batch, seq_len) * self.correction(phase, batch, seq_len)

    def observe(self, phase: str, batch: float, seq_len: float, measured_s: float) -> None:
        """Fold one measured time into the corrections and the drift detector."""
        if not measured_s > 0 or math.isinf(measured_s):
            raise ConfigError("measured_s", measured_s, "must be a finite time above 0")
        self.observe_ratio(phase, batch, seq_len, measured_s / self.base(phase, batch, seq_len))

    def observe_ratio(self, phase: str, batch: float, seq_len: float, ratio: float) -> None:
        """Fold one measured / predicted ratio in (for a caller with its own predictions)."""
        if not ratio > 0 or math.isinf(ratio):
            raise ConfigError("ratio", ratio, "must be a finite ratio above 0")
        x = math.log(ratio)
        key = (phase, *_bucket(batch, seq_len))
        a = self.alpha
        # A new bucket starts from its phase's mean, so it gains from what others have seen.
        start = self._buckets.get(key, self._phases.get(phase, 0.0))
        self._buckets[key] = (1 - a) * start + a * x
        self._phases[phase] = (1 - a) * self._phases.get(phase, 0.0) + a * x
        state = self.drift.setdefault(phase, DriftState())
        state.upper = max(0.0, state.upper + x - self.slack)
        state.lower = max(0.0, state.lower - x - self.slack)
        state.fired = state.fired or max(state.upper, state.lower) > self.threshold

    def drifted(self, phase: str | None = None) -> bool:
        """Whether the detector fired for `phase` (any phase if None)."""
        states = self.drift.values() if phase is None else [self.drift.get(phase, DriftState())]
        return any(s.fired for s in states)

    def reset(self) -> None:
        """Forget every correction and detector state (e.g. after re-profiling)."""
        self._buckets.clear()
        self._phases.clear()
        self.drift.clear()
