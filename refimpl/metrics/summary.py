"""The figures of one serving run: latency percentiles, throughput, SLO attainment and goodput.

`summarize` reads the engine's records (see records.py) and returns a flat dict of plain
floats, ints and dicts, ready for JSON (None where there is no data, never NaN). Definitions,
repeated with examples in docs/metrics.md:

- TTFT, TPOT, end-to-end, queueing delay: per request as in latency.py; p50/p90/p95/p99 (NumPy's
  'linear' interpolation) and mean over the finished requests for which they are defined.
- makespan: first arrival to the last finish (a rejection counts as that request's finish).
- throughput: output tokens of finished requests / makespan, in tokens per second.
- SLO attainment: requests that finished and met both their own TTFT and TPOT targets / ALL
  arrived requests (rejected ones count as failures; one token meets TPOT vacuously).
- goodput: requests meeting both targets / makespan, in requests per second (DistServe).
- KV use: pages in use after each step / pool pages; mean weighted by step duration, and peak.
- decision time: the policy's (and admission control's) wall time per step, p50/p99/mean.
- admission: requests by admission decision and reason ("degrade:kv_watermark", ...).
- prefix cache (only where the run had one): hit rate in blocks (cached blocks attached /
  full prompt blocks looked up) and in tokens (cached tokens / prompt tokens looked up), the
  peak of pages the cache held (referenced or idle), blocks evicted and published.

`summarize_by_class` gives the same request figures per SLO class over the whole run's
makespan, so the classes' throughputs and goodputs add up to the run's.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import fields

import numpy as np

from refimpl.metrics.latency import request_latencies
from refimpl.metrics.percentiles import describe, percentile
from refimpl.metrics.records import REJECTED, RequestRecords, StepRecords

__all__ = ["makespan_s", "summarize", "summarize_by_class"]


def makespan_s(requests: RequestRecords) -> float | None:
    """Seconds from the first arrival to the last finish or rejection; None for no requests."""
    if len(requests) == 0:
        return None
    return float(np.max(requests.finish_s) - np.min(requests.arrival_s))


def summarize(requests: RequestRecords, steps: StepRecords | None = None) -> dict:
    """All figures of one run (request figures, then step figures; None where no data)."""
    summary = _request_summary(requests, makespan_s(requests))
    summary.update(_step_summary(steps))
    return summary


def summarize_by_class(requests: RequestRecords) -> dict[str, dict]:
    """The request figures of each SLO class (sorted by name), over the whole run's makespan."""
    run_makespan_s = makespan_s(requests)
    classes = sorted({str(name) for name in requests.slo_class})
    return {name: _request_summary(_select(requests, requests.slo_class == name), run_makespan_s)
            for name in classes}


def _select(requests: RequestRecords, mask: np.ndarray) -> RequestRecords:
    """The rows of `requests` where `mask` is true."""
    return RequestRecords(**{f.name: getattr(requests, f.name)[mask] for f in fields(requests)})


def _per_second(count: float, seconds: float | None) -> float | None:
    """`count / seconds`, or None when the span is missing or empty."""
    return float(count) / seconds if seconds else None


def _count_by(values: np.ndarray) -> dict[str, int]:
    """How many times each string occurs, keys sorted."""
    return dict(sorted(Counter(str(v) for v in values).items()))


def _request_summary(requests: RequestRecords, span_s: float | None) -> dict:
    """Counts, latency percentiles, throughput, attainment and goodput over `span_s` seconds."""
    latencies = request_latencies(requests)
    num_requests = len(requests)
    num_met = int(latencies.meets_slo.sum())
    is_rejected = requests.status == REJECTED
    num_tokens = int(requests.num_generated[latencies.is_finished].sum())
    summary: dict = {
        "num_requests": num_requests,
        "num_finished": int(latencies.is_finished.sum()),
        "num_rejected": int(is_rejected.sum()),
        "num_preempted": int((requests.num_preemptions > 0).sum()),  # requests, not events
        "num_preemptions": int(requests.num_preemptions.sum()),
        "num_slo_met": num_met,
        "num_ttft_met": int(latencies.meets_ttft.sum()),
        "num_tpot_met": int(latencies.meets_tpot.sum()),
        "num_generated_tokens": num_tokens,
        "finished_by_reason": _count_by(requests.reason[latencies.is_finished]),
        "rejected_by_reason": _count_by(requests.reason[is_rejected]),
        "makespan_s": span_s,
        "throughput_tok_s": _per_second(num_tokens, span_s),
        "goodput_req_s": _per_second(num_met, span_s),
        "slo_attainment": num_met / num_requests if num_requests else None,
    }
    summary.update(describe(latencies.ttft_s, "ttft"))
    summary.update(describe(latencies.tpot_s, "tpot"))
    summary.update(describe(latencies.e2e_s, "e2e"))
    summary.update(describe(latencies.queue_s, "queue"))
    return summary


def _step_summary(steps: StepRecords | None) -> dict:
    """Step count, batch composition, KV use and the policy's decision time (None if no steps)."""
    if steps is None or len(steps) == 0:
        return dict.fromkeys(_STEP_KEYS, None)
    duration_s = np.asarray(steps.duration_s, dtype=np.float64)
    busy_s = float(duration_s.sum())
    kv_util_mean = kv_util_peak = None
    if steps.kv_total_pages > 0:
        utilization = steps.kv_used_pages / steps.kv_total_pages  # (num_steps,)
        # Weight by duration: a long step holds its pages for longer (a time average).
        kv_util_mean = (float(np.average(utilization, weights=duration_s)) if busy_s > 0
                        else float(utilization.mean()))
        kv_util_peak = float(utilization.max())
    summary = {
        "num_steps": len(steps),
        "busy_s": busy_s,
        "decode_batch_mean": float(steps.num_decode.mean()),
        "prefill_tokens_per_step_mean": float(steps.num_prefill_tokens.mean()),
        "waiting_peak": int(steps.num_waiting.max()),
        "kv_total_pages": int(steps.kv_total_pages),
        "kv_peak_pages": int(steps.kv_used_pages.max()),
        "kv_util_mean": kv_util_mean,
        "kv_util_peak": kv_util_peak,
        "decision_p50_s": percentile(steps.decision_s, 50),
        "decision_p99_s": percentile(steps.decision_s, 99),
        "decision_mean_s": float(np.mean(steps.decision_s)),
        "decision_total_s": float(np.sum(steps.decision_s)),
        "kernel_usage": dict(sorted(steps.kernel_usage.items())),
        "admission_by_decision": dict(sorted(steps.admission_counts.items())),
        "kv_actions": dict(sorted(steps.kv_actions.items())),
    }
    summary.update(_prefix_summary(steps.prefix_cache))
    return summary


def _prefix_summary(counts: dict) -> dict:
    """The prefix cache's figures (none where the run had no cache)."""
    if not counts:
        return {}

    def rate(hits: str, looked_up: str) -> float | None:
        return counts[hits] / counts[looked_up] if counts[looked_up] else None

    return {
        "prefix_hit_rate_blocks": rate("hit_blocks", "lookup_blocks"),
        "prefix_hit_rate_tokens": rate("hit_tokens", "lookup_tokens"),
        "prefix_hit_blocks": counts["hit_blocks"],
        "prefix_hit_tokens": counts["hit_tokens"],
        "prefix_cached_pages_peak": counts["peak_cached_pages"],
        "prefix_evicted_blocks": counts["evicted_blocks"],
        "prefix_published_blocks": counts["published_blocks"],
    }


# The step figures, listed once so a run without steps reports the same keys (as None).
_STEP_KEYS = (
    "num_steps", "busy_s", "decode_batch_mean", "prefill_tokens_per_step_mean", "waiting_peak",
    "kv_total_pages", "kv_peak_pages", "kv_util_mean", "kv_util_peak", "decision_p50_s",
    "decision_p99_s", "decision_mean_s", "decision_total_s", "kernel_usage",
    "admission_by_decision", "kv_actions",
)
