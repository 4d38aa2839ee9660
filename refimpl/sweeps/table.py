"""A sweep's tidy table: one row per cell, its settings then its figures, as columns.

Tidy in Wickham's sense (one observation per row, one variable per column), so a sweep reads
straight into pandas, polars or DuckDB and groups by any axis. Settings columns come first
(the grid's axes and what every cell shares), then the headline figures of `summarize` in a
fixed order, then its other scalar figures by name; nested ones (counts by reason, per class)
stay in the per-run JSON. Rows follow the grid's order, whatever order the cells finished in.
`MEASURED_COLUMNS` are wall-clock times of this machine: the only columns that differ between
two runs of the same sweep.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from refimpl.export.tables import write_table
from refimpl.sweeps.cell import Cell

__all__ = ["HEADLINE_COLUMNS", "MEASURED_COLUMNS", "SETTING_COLUMNS", "sweep_table",
           "write_sweep_table"]

SETTING_COLUMNS = ("cell", "key", "workload", "slo", "policy", "policy_params", "rate", "seed",
                   "num_requests", "model", "hardware", "step_model", "admission",
                   "mean_rate_req_s")
HEADLINE_COLUMNS = (
    "slo_attainment", "goodput_req_s", "throughput_tok_s", "num_requests_served",
    "num_finished", "num_rejected", "num_preempted", "ttft_p50_s", "ttft_p95_s", "ttft_p99_s",
    "tpot_p50_s", "tpot_p95_s", "tpot_p99_s", "e2e_p50_s", "e2e_p95_s", "kv_util_peak",
)
MEASURED_COLUMNS = ("wall_s", "decision_p50_s", "decision_p99_s", "decision_mean_s",
                    "decision_total_s")


def _row(index: int, cell: Cell, report: dict) -> dict:
    """One cell's row: its settings, then every scalar figure of its summary."""
    settings = report["settings"]
    summary = dict(report["policies"][cell.policy])
    summary["num_requests_served"] = summary.pop("num_requests")  # not the grid's setting
    row = {**cell.settings(), "cell": index, "key": settings["key"],
           "policy_params": json.dumps(cell.policy_params, sort_keys=True),
           "mean_rate_req_s": settings.get("mean_rate_req_s"), "wall_s": settings.get("wall_s")}
    row.update({name: value for name, value in summary.items()
                if value is None or isinstance(value, (int, float))})
    return row


def sweep_table(cells: Sequence[Cell], reports: Sequence[dict]) -> dict[str, list]:
    """The tidy table (column name -> one value per cell) of `cells` and their reports."""
    rows = [_row(i, cell, report) for i, (cell, report) in
            enumerate(zip(cells, reports, strict=True))]
    present = {name for row in rows for name in row}
    first = [*SETTING_COLUMNS, *HEADLINE_COLUMNS]
    rest = sorted(present - set(first) - set(MEASURED_COLUMNS))
    order = [n for n in first if n in present] + rest + [
        n for n in MEASURED_COLUMNS if n in present]
    return {name: [row.get(name) for row in rows] for name in order}


def write_sweep_table(table: dict[str, list], folder: str | Path) -> tuple[Path, Path]:
    """Write the table as `sweep.parquet` and `sweep.csv` in `folder`; return both paths."""
    folder = Path(folder)
    return write_table(table, folder / "sweep.parquet"), write_table(table, folder / "sweep.csv")
