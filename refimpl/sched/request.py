"""A request's life in the serving engine: tokens known, tokens computed, and its timestamps.

Following vLLM v1, a request carries no "prefill phase" flag. It knows `num_tokens` (prompt plus
the output generated so far) and `num_computed` (tokens whose K/V are in the cache); a step
schedules some of the difference. When the computed tokens catch up with the known ones, the
model emits the next output token. A prompt chunk and a decode step are the same operation:
decode is simply the case where exactly one token is left to compute.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from refimpl.config.slo import SLO, SLO_PRESETS
from refimpl.errors import ConfigError

__all__ = ["Request", "RequestStatus", "block_hashes_of"]


class RequestStatus(IntEnum):
    """Where a request is in its life."""

    WAITING = 0  # arrived, holds no KV yet (or lost it to a preemption)
    RUNNING = 1  # holds KV pages and is scheduled step by step
    FINISHED = 2  # produced its output (terminal)
    REJECTED = 3  # refused, with a reason (terminal)


@dataclass(eq=False, slots=True)
class Request:
    """One inference request and its progress; times are seconds on the engine's clock."""

    request_id: int
    arrival_s: float
    prompt_tokens: int
    max_new_tokens: int
    priority: int = 0  # 0 is the most urgent class
    weight: float = 1.0  # value of meeting its SLO, for weighted batching
    slo: SLO = SLO_PRESETS["default"]
    slo_class: str = "default"
    status: RequestStatus = RequestStatus.WAITING
    num_computed: int = 0  # tokens whose K/V are cached
    num_generated: int = 0  # output tokens produced
    first_scheduled_s: float = math.nan
    first_token_s: float = math.nan
    last_token_s: float = math.nan
    finish_s: float = math.nan
    finish_reason: str = ""
    num_preemptions: int = 0
    output_cap: int | None = None  # output of a run: a gate degraded it to end `length_capped` here
    # Prefix-block hashes of the prompt, one per `refimpl.kv.prefix.BLOCK_TOKENS` tokens
    # (Mooncake's `hash_ids`): equal leading hashes mean a shared, cacheable prompt prefix.
    block_hashes: tuple[int, ...] = ()

    @property
    def num_tokens(self) -> int:
        """Tokens known so far: the prompt and the output generated."""
        return self.prompt_tokens + self.num_generated

    @property
    def num_uncomputed(self) -> int:
        """Tokens a step could still schedule before the next output token."""
        return self.num_tokens - self.num_computed

    @property
    def is_decoding(self) -> bool:
        """Whether only the newest output token is left to compute (a decode step)."""
        return self.num_generated > 0 and self.num_uncomputed == 1

    @property
    def is_finished(self) -> bool:
        """Whether the request reached a terminal state."""
        return self.status >= RequestStatus.FINISHED

    def ttft_deadline_s(self) -> float:
        """When its first token is due."""
        return self.arrival_s + self.slo.ttft_s

    def next_token_deadline_s(self) -> float:
        """When its next output token is due (its TTFT deadline before the first token)."""
        if self.num_generated == 0:
            return self.ttft_deadline_s()
        return self.last_token_s + self.slo.tpot_s


def block_hashes_of(request: Request) -> tuple[int, ...]:
    """A request's prefix-block hashes, checked to be whole numbers."""
    hashes = request.block_hashes
    if not isinstance(hashes, (tuple, list)) or not all(
            isinstance(h, (int, np.integer)) and not isinstance(h, bool) for h in hashes):
        raise ConfigError("block_hashes", hashes, "must be a sequence of integers",
                          where=f"request {request.request_id!r}")
    return tuple(int(h) for h in hashes)
