"""What a serving run leaves behind: one record per request and one per engine step.

Both are struct-of-arrays (one NumPy array per field, one row per request or step) so that a
whole trace's worth of records is cheap to keep, summarize and save. The engine fills them; the
metrics module reads them; nothing else needs the engine's live objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from refimpl.errors import ConfigError

__all__ = ["FINISHED", "REJECTED", "RequestRecords", "StepRecords"]

FINISHED = "finished"  # `status` of a request that produced its output (maybe length-capped)
REJECTED = "rejected"  # `status` of a request refused before it finished; `reason` says why


@dataclass(frozen=True)
class RequestRecords:
    """The fate of every arrived request, rows in arrival order. Times in seconds."""

    request_id: np.ndarray  # int64
    arrival_s: np.ndarray  # float64
    prompt_tokens: np.ndarray  # int64: prompt length as served (after any clipping)
    max_new_tokens: np.ndarray  # int64: output length asked for
    priority: np.ndarray  # int64: 0 is the most urgent class
    slo_class: np.ndarray  # str (object): name of the request's SLO class
    ttft_slo_s: np.ndarray  # float64: the request's TTFT target
    tpot_slo_s: np.ndarray  # float64: the request's TPOT target
    status: np.ndarray  # str (object): FINISHED or REJECTED
    reason: np.ndarray  # str (object): "completed", "length_capped", or why it was rejected
    first_scheduled_s: np.ndarray  # float64: first step that computed any of it (nan: never)
    first_token_s: np.ndarray  # float64: time its first output token was ready (nan: never)
    finish_s: np.ndarray  # float64: time it finished or was rejected
    num_generated: np.ndarray  # int64: output tokens produced
    num_preemptions: np.ndarray  # int64: times its KV was dropped and recomputed

    def __post_init__(self) -> None:
        lengths = {f.name: len(getattr(self, f.name)) for f in fields(self)}
        if len(set(lengths.values())) > 1:
            raise ConfigError("RequestRecords", lengths, "arrays must all have one row per "
                              "request")

    def __len__(self) -> int:
        return len(self.request_id)


@dataclass(frozen=True)
class StepRecords:
    """One row per engine step, in time order. Times in seconds."""

    start_s: np.ndarray  # float64: virtual (or wall) time the step began
    duration_s: np.ndarray  # float64: predicted (simulated engine) or measured (real engine)
    num_decode: np.ndarray  # int64: sequences that produced a token
    num_prefill_tokens: np.ndarray  # int64: prompt tokens computed, all chunks
    num_prefill_chunks: np.ndarray  # int64: requests with a prefill chunk in the step
    kv_used_pages: np.ndarray  # int64: pages in use after the step
    num_waiting: np.ndarray  # int64: requests queued (policy and admission), not yet running
    decision_s: np.ndarray  # float64: wall time the policy took to plan the step
    # float64: the time `slo`'s tick allowed the step (decodes reserved, prefill in the slack);
    # NaN for a policy without a time budget
    tick_budget_s: np.ndarray
    max_chunk_tokens: np.ndarray  # int64: the step's largest prompt chunk (0: none)
    kv_total_pages: int = 0  # pages in the pool
    kernel_usage: dict = field(default_factory=dict)  # kernel candidate name -> steps using it
    admission_counts: dict = field(default_factory=dict)  # "action[:reason]" -> requests
    kv_actions: dict = field(default_factory=dict)  # KV ladder step -> times it acted
    prefix_cache: dict = field(default_factory=dict)  # the prefix cache's counts (none: off)

    def __len__(self) -> int:
        return len(self.start_s)
