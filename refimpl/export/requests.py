"""Per-request records as a table: when each request arrived, got its first token, finished.

One row per request, in arrival order, with its latencies and SLO verdict beside the raw
times (refimpl.metrics.latency's definitions), so a researcher can recompute any figure of
the summary, or one of their own, from the file alone. Times in seconds on the run's clock.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from refimpl.export.tables import concat_columns, write_table
from refimpl.metrics.latency import request_latencies
from refimpl.metrics.records import RequestRecords

__all__ = ["REQUEST_COLUMNS", "export_requests", "request_columns"]

# Columns in the order they are written (after `policy`, where there is one).
REQUEST_COLUMNS = (
    "request_id", "slo_class", "priority", "arrival_s", "first_scheduled_s", "first_token_s",
    "finish_s", "prompt_tokens", "max_new_tokens", "num_generated", "status", "reason",
    "num_preemptions", "ttft_slo_s", "tpot_slo_s", "ttft_s", "tpot_s", "e2e_s", "queue_s",
    "meets_ttft", "meets_tpot", "meets_slo",
)


def request_columns(records: RequestRecords, policy: str | None = None) -> dict[str, np.ndarray]:
    """The table of one run's requests (a `policy` column first, where given)."""
    latencies = request_latencies(records)
    columns: dict[str, np.ndarray] = {}
    if policy is not None:
        columns["policy"] = np.full(len(records), policy, dtype=object)
    for name in REQUEST_COLUMNS:
        source = latencies if hasattr(latencies, name) else records
        columns[name] = np.asarray(getattr(source, name))
    return columns


def export_requests(runs: dict[str, RequestRecords] | RequestRecords, path: str | Path) -> Path:
    """Write the requests of one run, or of several (`{policy: records}`, a `policy` column
    telling them apart), to `path` (.csv or .parquet)."""
    if isinstance(runs, RequestRecords):
        return write_table(request_columns(runs), path)
    return write_table(concat_columns([request_columns(r, name) for name, r in runs.items()]), path)
