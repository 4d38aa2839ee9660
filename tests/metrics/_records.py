"""Build small `RequestRecords`/`StepRecords` by hand for tests: rows in, struct of arrays out."""

from __future__ import annotations

import numpy as np

from refimpl.metrics import FINISHED, REJECTED, RequestRecords, StepRecords

NAN = float("nan")

# Defaults for the columns a test does not care about; a test row overrides any of them.
_REQUEST_DEFAULTS = {
    "prompt_tokens": 16, "max_new_tokens": 8, "priority": 0, "slo_class": "chat",
    "ttft_slo_s": 1.0, "tpot_slo_s": 0.5, "status": FINISHED, "reason": "completed",
    "first_scheduled_s": NAN, "first_token_s": NAN, "num_generated": 0, "num_preemptions": 0,
}
_OBJECT_COLUMNS = ("slo_class", "status", "reason")
_INT_COLUMNS = ("request_id", "prompt_tokens", "max_new_tokens", "priority", "num_generated",
                "num_preemptions")


def make_requests(rows: list[dict]) -> RequestRecords:
    """Records from dicts with at least `arrival_s` and `finish_s`; ids count from 0."""
    full = [{"request_id": i, **_REQUEST_DEFAULTS, **row} for i, row in enumerate(rows)]
    columns = {}
    for name in RequestRecords.__dataclass_fields__:
        values = [row[name] for row in full]
        dtype = object if name in _OBJECT_COLUMNS else (
            np.int64 if name in _INT_COLUMNS else np.float64)
        columns[name] = np.array(values, dtype=dtype)
    return RequestRecords(**columns)


def rejected(arrival_s: float, reason: str, **row) -> dict:
    """A row for a request rejected on arrival for `reason`."""
    return {"arrival_s": arrival_s, "finish_s": arrival_s, "status": REJECTED, "reason": reason,
            **row}


def make_steps(duration_s: list[float], *, kv_used_pages: list[int] | None = None,
               kv_total_pages: int = 0, decision_s: list[float] | None = None,
               num_decode: list[int] | None = None,
               num_prefill_tokens: list[int] | None = None) -> StepRecords:
    """Back-to-back steps of the given durations, starting at 0; other columns default to 0."""
    n = len(duration_s)
    duration = np.array(duration_s, dtype=np.float64)

    def ints(values: list[int] | None) -> np.ndarray:
        return np.array(values if values is not None else [0] * n, dtype=np.int64)

    return StepRecords(
        start_s=np.concatenate([[0.0], np.cumsum(duration)[:-1]]) if n else np.zeros(0),
        duration_s=duration,
        num_decode=ints(num_decode),
        num_prefill_tokens=ints(num_prefill_tokens),
        num_prefill_chunks=ints(None),
        kv_used_pages=ints(kv_used_pages),
        num_waiting=ints(None),
        decision_s=np.array(decision_s if decision_s is not None else [0.0] * n),
        tick_budget_s=np.full(n, np.nan),
        max_chunk_tokens=ints(num_prefill_tokens),
        kv_total_pages=kv_total_pages,
    )
