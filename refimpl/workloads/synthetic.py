"""Synthetic workloads: trace-fitted lengths on Poisson or Gamma arrivals (the embedded default).

`azure-conv-like` (the default workload of `refimpl demo` and `refimpl simulate`) draws prompt
and output lengths from the quantile tables fitted to the Azure 2023 conversation trace
(`refimpl.workloads.lengths`) and arrivals from a Poisson process at that trace's mean rate.
`azure-code-like` does the same for the code trace. The `-bursty` variants use Gamma gaps with
shape 0.25 (inter-arrival CV 2; see `refimpl.workloads.arrivals`). Same seed, same arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

from refimpl.config._validate import positive_int, positive_real, seeded_rng
from refimpl.errors import ConfigError
from refimpl.workloads.arrivals import gamma_arrivals
from refimpl.workloads.lengths import AZURE_CODE_LENGTHS, AZURE_CONV_LENGTHS, LengthDistribution
from refimpl.workloads.workload import Workload, new_workload

__all__ = ["DEFAULT_NUM_REQUESTS", "DEFAULT_WORKLOAD", "SYNTHETIC", "synthetic", "synthetic_names"]

# Mean request rates of the traces, (rows - 1) / (last - first timestamp), as the traces README
# defines them: conv 19,365 / 3,501.721937 s; code 8,818 / 3,435.948056 s.
AZURE_CONV_RATE = 19_365 / 3_501.721937  # 5.53 req/s
AZURE_CODE_RATE = 8_818 / 3_435.948056  # 2.57 req/s

# Gamma shape of the `-bursty` variants: inter-arrival CV = 1 / sqrt(0.25) = 2.
BURSTY_SHAPE = 0.25

DEFAULT_WORKLOAD = "azure-conv-like"
DEFAULT_NUM_REQUESTS = 1000  # a run of a few minutes of simulated traffic at the conv rate


@dataclass(frozen=True)
class SyntheticSpec:
    """What a synthetic name stands for: lengths, default rate and default Gamma shape."""

    lengths: LengthDistribution
    rate: float  # requests/s when the caller gives none
    burstiness: float  # Gamma shape of the gaps when the caller gives none (1.0 = Poisson)
    source: str


SYNTHETIC: dict[str, SyntheticSpec] = {
    "azure-conv-like": SyntheticSpec(
        AZURE_CONV_LENGTHS, AZURE_CONV_RATE, 1.0, "Azure LLM inference 2023, conversation"
    ),
    "azure-code-like": SyntheticSpec(
        AZURE_CODE_LENGTHS, AZURE_CODE_RATE, 1.0, "Azure LLM inference 2023, code"
    ),
    "azure-conv-like-bursty": SyntheticSpec(
        AZURE_CONV_LENGTHS, AZURE_CONV_RATE, BURSTY_SHAPE, "Azure 2023 conversation, Gamma CV 2"
    ),
    "azure-code-like-bursty": SyntheticSpec(
        AZURE_CODE_LENGTHS, AZURE_CODE_RATE, BURSTY_SHAPE, "Azure 2023 code, Gamma CV 2"
    ),
}


def synthetic_names() -> tuple[str, ...]:
    """Names `synthetic` accepts, the default first."""
    return tuple(SYNTHETIC)


def synthetic(
    name: str = DEFAULT_WORKLOAD,
    *,
    num_requests: int = DEFAULT_NUM_REQUESTS,
    rate: float | None = None,
    seed: int = 0,
    burstiness: float | None = None,
) -> Workload:
    """A synthetic workload: `rate` in requests/s (default: the trace's mean rate);
    `burstiness` is the Gamma shape of the gaps (1.0 = Poisson, < 1 burstier)."""
    if name not in SYNTHETIC:
        raise ConfigError("workload", name, "unknown synthetic workload", choices=SYNTHETIC)
    spec = SYNTHETIC[name]
    positive_int("num_requests", num_requests)
    rate = spec.rate if rate is None else rate
    burstiness = spec.burstiness if burstiness is None else burstiness
    positive_real("rate", rate)
    positive_real("burstiness", burstiness)
    # One generator per stream, spawned from the seed, so changing the rate or the arrival
    # process leaves the lengths unchanged (and vice versa): runs differ only where they should.
    arrival_rng, prompt_rng, output_rng = seeded_rng(seed).spawn(3)
    return new_workload(
        name,
        gamma_arrivals(num_requests, rate, burstiness, arrival_rng),
        spec.lengths.prompt.sample(num_requests, prompt_rng),
        spec.lengths.output.sample(num_requests, output_rng),
    )
