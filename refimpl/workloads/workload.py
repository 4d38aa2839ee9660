"""A workload: the requests to serve, as arrays in arrival order (struct of arrays).

Readers (Azure, Mooncake, length-only CSVs), synthetic generators and transforms all produce a
`Workload`; the engine turns its rows into requests. One NumPy array per field keeps a whole
trace cheap to hold, transform and slice (the shape Vidur's trace replay and vLLM's benchmark
datasets also reduce to: arrival time, prompt length, output length).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from refimpl.config.slo import SLO_PRESETS, PriorityClass
from refimpl.errors import ConfigError

__all__ = ["DEFAULT_CLASS", "HASH_BLOCK_TOKENS", "Workload", "new_workload"]

HASH_BLOCK_TOKENS = 512  # prompt tokens per Mooncake `hash_ids` entry (Qin et al., FAST 2025)

# The class every fresh workload's requests belong to until `assign_classes` says otherwise.
DEFAULT_CLASS = PriorityClass(name="default", priority=0, slo=SLO_PRESETS["default"])

# Field -> dtype every array must have; checked in `Workload.__post_init__`.
_DTYPES: dict[str, type] = {
    "arrival_s": np.float64,
    "prompt_tokens": np.int64,
    "output_tokens": np.int64,
    "priority": np.int64,
    "slo_class": np.object_,
    "ttft_slo_s": np.float64,
    "tpot_slo_s": np.float64,
}


@dataclass(frozen=True)
class Workload:
    """Requests to serve, as arrays in arrival order (struct of arrays)."""

    name: str
    arrival_s: np.ndarray  # float64 (n,): seconds, non-decreasing, first arrival at 0.0
    prompt_tokens: np.ndarray  # int64 (n,): >= 1
    output_tokens: np.ndarray  # int64 (n,): >= 1, the trace's generated length = max new tokens
    priority: np.ndarray  # int64 (n,): 0 = most urgent (vLLM's convention)
    slo_class: np.ndarray  # object (n,): class names, e.g. "default", "interactive", "batch"
    ttft_slo_s: np.ndarray  # float64 (n,): time-to-first-token target, seconds
    tpot_slo_s: np.ndarray  # float64 (n,): time-per-output-token target, seconds
    # Mooncake prefix block hashes (one id per `hash_block_tokens` tokens of the prompt, the
    # last block partial), per request.
    hash_ids: tuple[tuple[int, ...], ...] | None = None
    num_clipped: int = 0  # requests whose lengths were clipped to the model's context
    hash_block_tokens: int = HASH_BLOCK_TOKENS  # 512 in the trace; `scale_lengths` scales it

    def __post_init__(self) -> None:
        num_requests = len(self.arrival_s) if isinstance(self.arrival_s, np.ndarray) else -1
        for field, dtype in _DTYPES.items():
            array = getattr(self, field)
            if not isinstance(array, np.ndarray) or array.ndim != 1:
                raise ConfigError(field, type(array).__name__, "must be a 1-D numpy array")
            if array.dtype != dtype:
                raise ConfigError(field, str(array.dtype), f"must have dtype {np.dtype(dtype)}")
            if len(array) != num_requests:
                raise ConfigError(
                    field, len(array), f"length must equal len(arrival_s)={num_requests}"
                )
        if num_requests == 0:
            raise ConfigError("arrival_s", "[]", "a workload needs at least one request")
        self._check_values()

    def _check_values(self) -> None:
        """Range checks; each names the first offending field and value."""
        arrival_s = self.arrival_s
        if not np.all(np.isfinite(arrival_s)):
            raise ConfigError("arrival_s", _first(arrival_s, ~np.isfinite(arrival_s)), "not finite")
        if arrival_s[0] != 0.0:
            raise ConfigError("arrival_s", float(arrival_s[0]), "the first arrival must be at 0.0")
        backwards = np.diff(arrival_s) < 0
        if backwards.any():
            raise ConfigError(
                "arrival_s", _first(arrival_s[1:], backwards), "must be non-decreasing"
            )
        for field in ("prompt_tokens", "output_tokens"):
            array = getattr(self, field)
            if (array < 1).any():
                raise ConfigError(field, _first(array, array < 1), "must be >= 1")
        if (self.priority < 0).any():
            raise ConfigError("priority", _first(self.priority, self.priority < 0), "must be >= 0")
        for field in ("ttft_slo_s", "tpot_slo_s"):
            array = getattr(self, field)
            bad = ~(np.isfinite(array) & (array > 0))
            if bad.any():
                raise ConfigError(field, _first(array, bad), "must be finite and > 0")
        if self.hash_ids is not None and len(self.hash_ids) != len(arrival_s):
            raise ConfigError(
                "hash_ids", len(self.hash_ids), f"length must equal len(arrival_s)={len(self)}"
            )
        if isinstance(self.hash_block_tokens, bool) or not isinstance(
                self.hash_block_tokens, (int, np.integer)) or self.hash_block_tokens < 1:
            raise ConfigError("hash_block_tokens", self.hash_block_tokens, "must be an int >= 1")
        if isinstance(self.num_clipped, bool) or not 0 <= self.num_clipped <= len(self):
            raise ConfigError("num_clipped", self.num_clipped, f"must be in [0, {len(self)}]")

    def __len__(self) -> int:
        """Number of requests."""
        return len(self.arrival_s)

    @property
    def duration_s(self) -> float:
        """Time from the first arrival to the last, seconds."""
        return float(self.arrival_s[-1])

    @property
    def mean_rate(self) -> float:
        """Mean arrival rate, requests/s: (n - 1) / duration, as the traces README defines it."""
        if self.duration_s == 0.0:
            return float("inf")
        return (len(self) - 1) / self.duration_s


def _first(array: np.ndarray, mask: np.ndarray) -> object:
    """The first element of `array` where `mask` holds, as a plain Python value."""
    return array[np.flatnonzero(mask)[0]].item()


def new_workload(
    name: str,
    arrival_s: np.ndarray,
    prompt_tokens: np.ndarray,
    output_tokens: np.ndarray,
    *,
    hash_ids: tuple[tuple[int, ...], ...] | None = None,
) -> Workload:
    """A workload of the default class, arrivals re-based so the first is at 0.0."""
    arrival_s = np.asarray(arrival_s, dtype=np.float64)
    num_requests = len(arrival_s)
    return Workload(
        name=name,
        arrival_s=arrival_s - arrival_s[0] if num_requests else arrival_s,
        prompt_tokens=np.asarray(prompt_tokens, dtype=np.int64),
        output_tokens=np.asarray(output_tokens, dtype=np.int64),
        priority=np.full(num_requests, DEFAULT_CLASS.priority, dtype=np.int64),
        slo_class=np.full(num_requests, DEFAULT_CLASS.name, dtype=object),
        ttft_slo_s=np.full(num_requests, DEFAULT_CLASS.slo.ttft_s),
        tpot_slo_s=np.full(num_requests, DEFAULT_CLASS.slo.tpot_s),
        hash_ids=hash_ids,
    )
