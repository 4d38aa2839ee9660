"""`capacity`: each policy's capacity on a workload, by searches run side by side on Ray.

    result = refimpl.capacity({"policies": ["slo", "vllm"]}, "out", tolerance=0.02)
    result.rows[0]["capacity_req_s"]

One search (refimpl.sweeps.bisect) per workload x SLO set x policy (x parameters) of a grid
whose rate axis it ignores. Each round asks every unfinished search for its next rate, runs
those probes (one cell per seed, through the same cache as `sweep`, so an interrupted search
resumes) in one batch on the executor, and records them; a probe's attainment is the mean
over the grid's seeds. Both goodput definitions are reported: the capacity (DistServe: the
highest rate with attainment >= target) and vLLM's goodput (`vllm bench serve --goodput`:
requests per second meeting the SLOs, at a given rate) at the capacity and just above it.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path

from refimpl.metrics.report import write_report
from refimpl.sweeps.bisect import CapacitySearch, check_search_settings
from refimpl.sweeps.cache import CellCache
from refimpl.sweeps.cell import Cell
from refimpl.sweeps.execute import Progress, open_executor, run_cells
from refimpl.sweeps.grid import SweepGrid
from refimpl.sweeps.run_sweep import as_grid

__all__ = ["CapacityResult", "capacity"]


@dataclass(frozen=True)
class CapacityResult:
    """Each search's answer (`rows`), with its probes, and what the search cost."""

    rows: list[dict]
    settings: dict
    folder: Path
    num_cells: int = 0  # cells the searches probed (cached ones included)
    num_cached: int = 0
    num_rounds: int = 0
    wall_s: float = 0.0
    startup_s: float = 0.0
    paths: tuple[Path, ...] = field(default_factory=tuple)

    def report(self) -> dict:
        """The JSON report: settings and one entry per search."""
        return {"settings": self.settings, "capacity": self.rows}


def capacity(grid: SweepGrid | dict | str | Path, out: str | Path = "refimpl-capacity", *,
             target: float = 0.9, tolerance: float = 0.02, start_rate: float | None = None,
             max_rate: float = 1e4, workers: int | None = None, address: str | None = None,
             progress: Progress | None = None, ray_temp_dir: str | None = None
             ) -> CapacityResult:
    """Search the capacity of every policy (and workload, SLO set, parameters) in `grid`.

    `target`: the attainment that must hold (0.9: 90% of requests meet both SLOs);
    `tolerance`: the answer's precision as a share of it (0.02: the rate 2% above it failed);
    `start_rate`: the first rate probed (None: the grid's first rate, else the workload's
    own). `workers` and `address` as for `sweep`. Writes `capacity.json` into `out`.
    """
    grid = as_grid(grid)
    first_rate = start_rate if start_rate is not None else grid.rates[0]
    check_search_settings(target, tolerance, first_rate or 1.0, max_rate)
    bases = _search_bases(grid)
    if first_rate is None:  # the workload's own rate, as the grid's cells would run it
        first_rate = _own_rate(bases[0])
    searches = [CapacitySearch(first_rate, target, tolerance, max_rate) for _ in bases]
    cache = CellCache(out)
    started = time.perf_counter()
    measured: dict[tuple[int, float], list[dict]] = {}  # (search, rate) -> reports per seed
    num_cells = num_cached = num_rounds = 0
    with open_executor(workers, address, ray_temp_dir) as executor:
        while True:
            asks = [(k, rate) for k, s in enumerate(searches)
                    if (rate := s.next_rate()) is not None]
            if not asks:
                break
            num_rounds += 1
            cells = [dataclasses.replace(bases[k], rate=rate, seed=seed)
                     for k, rate in asks for seed in grid.seeds]
            reports, cached = run_cells(cells, cache, executor,
                                        progress=_per_round(progress, num_rounds))
            num_cells, num_cached = num_cells + len(cells), num_cached + cached
            per_seed = len(grid.seeds)
            for j, (k, rate) in enumerate(asks):
                runs = reports[j * per_seed:(j + 1) * per_seed]
                measured[(k, rate)] = runs
                searches[k].record(rate, _mean(runs, bases[k].policy, "slo_attainment"))
        startup_s = executor.startup_s
    rows = [_row(bases[k], s, measured, k) for k, s in enumerate(searches)]
    settings = {"target": target, "tolerance": tolerance, "start_rate": first_rate,
                "max_rate": max_rate, "seeds": list(grid.seeds),
                "grid": {f.name: getattr(grid, f.name) for f in dataclasses.fields(grid)
                         if f.name != "rates"}}
    result = CapacityResult(rows, settings, Path(out), num_cells, num_cached, num_rounds,
                            time.perf_counter() - started, startup_s)
    path = write_report(result.report(), Path(out) / "capacity.json")
    return dataclasses.replace(result, paths=(path,))


def _per_round(progress: Progress | None, round_number: int) -> Progress | None:
    """The progress of one round's batch, labelled with the round."""
    if progress is None:
        return None
    return lambda done, total, detail: progress(done, total, f"round {round_number} {detail}")


def _search_bases(grid: SweepGrid) -> list[Cell]:
    """One cell per search (rate and seed filled in per probe), in the grid's order."""
    seen: dict[str, Cell] = {}
    for cell in grid.cells():
        base = dataclasses.replace(cell, rate=None, seed=0)
        seen.setdefault(base.key(), base)
    return list(seen.values())


def _own_rate(cell: Cell) -> float:
    """The mean rate of the workload a cell would serve at its own rate."""
    from refimpl.workloads import make_workload

    return make_workload(cell.workload, num_requests=cell.num_requests, seed=0).mean_rate


def _mean(reports: list[dict], policy: str, key: str) -> float:
    """The mean over seeds of one summary figure (a missing figure counts as 0)."""
    return sum(r["policies"][policy].get(key) or 0.0 for r in reports) / len(reports)


def _row(base: Cell, search: CapacitySearch, measured: dict, k: int) -> dict:
    """One search's answer: capacity, attainment and goodput at it and just above it."""
    low, high = search.low, search.high
    policy = base.policy

    def at(rate: float | None, key: str) -> float | None:
        return None if rate is None else _mean(measured[(k, rate)], policy, key)

    settings = base.settings()
    del settings["rate"], settings["seed"]
    return {**settings, "capacity_req_s": search.capacity, "bounded": search.bounded,
            "attainment_at_capacity": at(low, "slo_attainment"),
            "goodput_at_capacity_req_s": at(low, "goodput_req_s"),
            "rate_above_req_s": high, "attainment_above": at(high, "slo_attainment"),
            "goodput_above_req_s": at(high, "goodput_req_s"),
            "probes": [{"rate": rate, "slo_attainment": attainment,
                        "goodput_req_s": at(rate, "goodput_req_s")}
                       for rate, attainment in sorted(search.probes.items())]}
