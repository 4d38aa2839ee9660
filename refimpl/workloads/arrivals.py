"""Arrival processes: seeded Poisson and bursty Gamma arrival times.

Inter-arrival gaps are i.i.d. Gamma(shape=k, scale=1 / (k * rate)): the mean gap is 1 / rate
and the coefficient of variation (std / mean) of the gaps is 1 / sqrt(k). k = 1 is the Poisson
process (exponential gaps, CV 1); k < 1 is burstier (k = 0.25 gives CV 2: clumps of arrivals
and long idle gaps); k > 1 is more regular. `burstiness` is k, as in vLLM's
benchmark_serving.py (`--burstiness`), so the same number means the same traffic there.
"""

from __future__ import annotations

import math

import numpy as np

from refimpl.config._validate import positive_int, positive_real

__all__ = ["gamma_arrivals", "gamma_cv", "poisson_arrivals"]


def gamma_cv(burstiness: float) -> float:
    """Coefficient of variation of the inter-arrival gaps for Gamma shape `burstiness`."""
    positive_real("burstiness", burstiness)
    return 1.0 / math.sqrt(burstiness)


def gamma_arrivals(
    num_requests: int, rate: float, burstiness: float, rng: np.random.Generator
) -> np.ndarray:
    """Arrival times, float64 (num_requests,) seconds from 0.0, with Gamma(burstiness) gaps."""
    positive_int("num_requests", num_requests)
    positive_real("rate", rate)
    positive_real("burstiness", burstiness)
    gaps_s = rng.gamma(burstiness, 1.0 / (burstiness * rate), num_requests - 1)  # (n-1,)
    return np.concatenate(([0.0], np.cumsum(gaps_s)))


def poisson_arrivals(num_requests: int, rate: float, rng: np.random.Generator) -> np.ndarray:
    """Arrival times, float64 (num_requests,) seconds from 0.0, of a Poisson process."""
    return gamma_arrivals(num_requests, rate, 1.0, rng)
