"""Service-level objectives: TTFT and TPOT targets, per priority class.

TTFT is the time from a request's arrival to its first output token; TPOT the mean time between
its later tokens. A request meets its SLO when both are within target. Priority follows vLLM's
convention: a smaller number is served first (0 is the most urgent class). The presets are ours
(interactive, default, batch) and MLPerf Inference's server-scenario limits (`mlperf-*`);
slo_sets.py mixes them into classes with shares.
"""

from __future__ import annotations

from dataclasses import dataclass

from refimpl.config._validate import positive_real
from refimpl.errors import ConfigError

__all__ = ["SLO", "SLO_PRESETS", "PriorityClass"]


@dataclass(frozen=True)
class SLO:
    """Latency targets of one class of requests, in seconds."""

    ttft_s: float  # time to first token
    tpot_s: float  # time per output token after the first

    def __post_init__(self) -> None:
        positive_real("ttft_s", self.ttft_s)
        positive_real("tpot_s", self.tpot_s)

    @classmethod
    def preset(cls, name: str) -> SLO:
        """The SLO of a named class (see `SLO_PRESETS`)."""
        if name not in SLO_PRESETS:
            raise ConfigError("slo", name, "unknown SLO preset", choices=SLO_PRESETS)
        return SLO_PRESETS[name]

    def is_met(self, ttft_s: float, tpot_s: float) -> bool:
        """Whether a request with these latencies meets both targets."""
        return ttft_s <= self.ttft_s and tpot_s <= self.tpot_s


@dataclass(frozen=True)
class PriorityClass:
    """A class of requests: its priority (smaller is served first), SLO and weight."""

    name: str
    priority: int
    slo: SLO
    weight: float = 1.0  # value of meeting this class's SLO, used by weighted batching

    def __post_init__(self) -> None:
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise ConfigError("priority", self.priority, "must be an integer")
        if self.priority < 0:
            raise ConfigError("priority", self.priority, "must be >= 0 (0 is the most urgent)")
        positive_real("weight", self.weight)


# Targets of the order used in the serving literature for chat (TTFT well under a second,
# TPOT near reading speed), a default class, and offline batch work (DistServe, Zhong et al.
# 2024, Table 1, uses 0.125-15 s TTFT and 0.1-0.2 s TPOT across its applications).
_LITERATURE = {
    "interactive": SLO(ttft_s=0.5, tpot_s=0.05),
    "default": SLO(ttft_s=2.0, tpot_s=0.1),
    "batch": SLO(ttft_s=30.0, tpot_s=0.5),
}

# MLPerf Inference's server-scenario latency limits for its LLM benchmarks: the "Server latency
# constraint" column of the Datacenter table in the MLPerf Inference Rules (MLCommons,
# github.com/mlcommons/inference_policies, inference_rules.adoc, section "Benchmarks"; the
# `-interactive` names are its "Interactive category"). Named `mlperf-<benchmark>` after
# MLPerf's own benchmark names. MLPerf bounds the run's 99th percentiles of TTFT and TPOT;
# refimpl applies the same limits to each request, so attainment is the share within them.
_MLPERF = {
    "mlperf-llama3.1-8b": SLO(ttft_s=2.0, tpot_s=0.1),
    "mlperf-llama3.1-8b-interactive": SLO(ttft_s=0.5, tpot_s=0.03),
    "mlperf-llama2-70b": SLO(ttft_s=2.0, tpot_s=0.2),
    "mlperf-llama2-70b-interactive": SLO(ttft_s=0.45, tpot_s=0.04),
}

SLO_PRESETS: dict[str, SLO] = {**_LITERATURE, **_MLPERF}
