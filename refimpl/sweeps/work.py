"""What a worker does with one cell: build its workload, simulate it, and report.

The same function runs in the driver (`--serial`) and in Ray workers, so both give the same
numbers: everything a run depends on is in the cell, and the simulation is deterministic for a
seed. What comes back is plain data (a report dict, and the request records if asked for).
"""

from __future__ import annotations

from dataclasses import dataclass

from refimpl.metrics.records import RequestRecords
from refimpl.sweeps.cell import Cell

__all__ = ["CellResult", "run_cell"]


@dataclass(frozen=True)
class CellResult:
    """One finished cell: its key, its run report, and (where asked) its request records."""

    key: str
    report: dict  # refimpl.metrics.report layout: settings, and one policy under `policies`
    requests: RequestRecords | None = None


def run_cell(cell: Cell, with_requests: bool = False) -> CellResult:
    """Simulate `cell` and return its report (its request records too, `with_requests`)."""
    from refimpl.engine import simulate
    from refimpl.metrics.report import build_report
    from refimpl.sweeps.grid import slo_set_named
    from refimpl.workloads import assign_slo_set, make_workload

    workload = make_workload(cell.workload, num_requests=cell.num_requests, rate=cell.rate,
                             seed=cell.seed)
    workload = assign_slo_set(workload, slo_set_named(cell.slo), seed=cell.seed)
    result = simulate(workload, cell.policy, model=cell.model, hardware=cell.hardware,
                      step_model=cell.step_model, seed=cell.seed,
                      policy_params=cell.policy_params or None, admission=cell.admission)
    key = cell.key()
    settings = {**result.settings, **cell.settings(), "key": key, "wall_s": result.wall_s,
                "mean_rate_req_s": workload.mean_rate}
    report = build_report({cell.policy: (result.requests, result.steps)}, settings)
    return CellResult(key, report, result.requests if with_requests else None)
