"""Per-request latencies and SLO verdicts, computed from `RequestRecords` by one set of rules.

The definitions (docs/metrics.md repeats them) follow the serving literature (DistServe, Zhong
et al. 2024; vLLM's benchmark_serving): TTFT = first_token_s - arrival_s; TPOT = mean time
between output tokens after the first = (finish_s - first_token_s) / (num_generated - 1);
end-to-end = finish_s - arrival_s; queueing delay = first_scheduled_s - arrival_s. Each is
defined only for finished requests (NaN elsewhere, and TPOT also NaN below two tokens).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from refimpl.metrics.records import FINISHED, RequestRecords

__all__ = ["RequestLatencies", "request_latencies"]


@dataclass(frozen=True)
class RequestLatencies:
    """Latencies of each request (one row per request, NaN where undefined), in seconds."""

    is_finished: np.ndarray  # bool: the request produced its output (maybe length-capped)
    ttft_s: np.ndarray  # float64: arrival to first output token
    tpot_s: np.ndarray  # float64: mean gap between later tokens; NaN below two tokens
    e2e_s: np.ndarray  # float64: arrival to finish
    queue_s: np.ndarray  # float64: arrival to the first step that computed any of it
    meets_ttft: np.ndarray  # bool: finished with TTFT within its own target
    meets_tpot: np.ndarray  # bool: finished with TPOT within target (vacuous below 2 tokens)
    meets_slo: np.ndarray  # bool: meets both; what attainment and goodput count


def request_latencies(requests: RequestRecords) -> RequestLatencies:
    """Compute each request's latencies and whether it met its own TTFT and TPOT targets."""
    is_finished = np.asarray(requests.status == FINISHED, dtype=bool)
    arrival_s = np.asarray(requests.arrival_s, dtype=np.float64)
    num_generated = np.asarray(requests.num_generated, dtype=np.int64)

    def finished_only(values: np.ndarray) -> np.ndarray:
        return np.where(is_finished, values, np.nan)

    ttft_s = finished_only(requests.first_token_s - arrival_s)
    e2e_s = finished_only(requests.finish_s - arrival_s)
    queue_s = finished_only(requests.first_scheduled_s - arrival_s)
    has_gaps = is_finished & (num_generated >= 2)
    # Divide only where there are gaps between tokens, so no 0/0 warnings for one-token rows.
    tpot_s = np.full(len(requests), np.nan)
    np.divide(requests.finish_s - requests.first_token_s, num_generated - 1, out=tpot_s,
              where=has_gaps)

    # NaN compares False, so a finished request without a first token never meets TTFT.
    meets_ttft = is_finished & (ttft_s <= requests.ttft_slo_s)
    # With fewer than two tokens there is no gap to be late: TPOT is met vacuously.
    meets_tpot = is_finished & (~has_gaps | (tpot_s <= requests.tpot_slo_s))
    return RequestLatencies(
        is_finished=is_finished, ttft_s=ttft_s, tpot_s=tpot_s, e2e_s=e2e_s, queue_s=queue_s,
        meets_ttft=meets_ttft, meets_tpot=meets_tpot, meets_slo=meets_ttft & meets_tpot,
    )
