"""Per-step records as a table: each engine step's start, length, batch and KV use.

One row per step, in time order, with the columns of `refimpl.metrics.records.StepRecords`
and the pool's size, so KV use can be read as a share. Times in seconds on the run's clock.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from refimpl.export.tables import concat_columns, write_table
from refimpl.metrics.records import StepRecords

__all__ = ["STEP_COLUMNS", "export_steps", "step_columns"]

STEP_COLUMNS = ("start_s", "duration_s", "num_decode", "num_prefill_tokens",
                "num_prefill_chunks", "max_chunk_tokens", "kv_used_pages", "num_waiting",
                "decision_s", "tick_budget_s")


def step_columns(steps: StepRecords, policy: str | None = None) -> dict[str, np.ndarray]:
    """The table of one run's steps (a `policy` column first, where given)."""
    columns: dict[str, np.ndarray] = {}
    if policy is not None:
        columns["policy"] = np.full(len(steps), policy, dtype=object)
    columns["step"] = np.arange(len(steps), dtype=np.int64)
    columns.update({name: np.asarray(getattr(steps, name)) for name in STEP_COLUMNS})
    columns["kv_total_pages"] = np.full(len(steps), steps.kv_total_pages, dtype=np.int64)
    return columns


def export_steps(runs: dict[str, StepRecords] | StepRecords, path: str | Path) -> Path:
    """Write the steps of one run, or of several (`{policy: steps}`), to .csv or .parquet."""
    if isinstance(runs, StepRecords):
        return write_table(step_columns(runs), path)
    return write_table(concat_columns([step_columns(s, name) for name, s in runs.items()]), path)
