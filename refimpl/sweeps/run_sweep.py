"""`sweep`: every cell of a grid run once (on Ray, or serially), cached, and one tidy table.

    result = refimpl.sweep({"policies": ["slo", "vllm"], "rates": [10, 20, 40]}, "out")
    result.table["slo_attainment"]

The output folder holds `sweep.parquet` and `sweep.csv` (refimpl.sweeps.table), `runs/<key>.json`
(each cell's run report, which is also its cache entry) and, with `with_requests`, each cell's
request records (`runs/<key>.requests.parquet`). Running the same grid into the same folder
again reads finished cells back instead of running them, so a killed sweep resumes where it
stopped; changing a cell's settings or refimpl's version changes its key, so nothing stale
is reused.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from refimpl.sweeps.cache import CellCache
from refimpl.sweeps.cell import Cell
from refimpl.sweeps.execute import Progress, open_executor, run_cells
from refimpl.sweeps.grid import SweepGrid, load_grid
from refimpl.sweeps.table import sweep_table, write_sweep_table

__all__ = ["SweepResult", "as_grid", "sweep"]


@dataclass(frozen=True)
class SweepResult:
    """What a sweep produced, and what it cost."""

    cells: list[Cell]
    reports: list[dict]  # one run report per cell, in grid order
    table: dict[str, list]  # the tidy table, column -> values
    folder: Path
    paths: tuple[Path, ...] = ()  # the table files written
    num_cached: int = 0  # cells read back instead of run
    num_workers: int = 1
    wall_s: float = 0.0  # the whole sweep, start-up included
    startup_s: float = 0.0  # starting Ray (or joining it) and loading each worker's loop
    settings: dict = field(default_factory=dict)


def as_grid(grid: SweepGrid | dict | str | Path) -> SweepGrid:
    """A grid as given, from a dict of `SweepGrid` fields, or from a TOML file."""
    if isinstance(grid, SweepGrid):
        return grid
    if isinstance(grid, dict):
        return SweepGrid(**grid)
    return load_grid(grid)


def sweep(grid: SweepGrid | dict | str | Path, out: str | Path = "refimpl-sweep", *,
          workers: int | None = None, address: str | None = None,
          with_requests: bool = False, progress: Progress | None = None,
          ray_temp_dir: str | None = None) -> SweepResult:
    """Run every cell of `grid` not already in `out`'s cache and write the table there.

    `workers=0` runs in this process without Ray (the same numbers); otherwise on Ray with
    `workers` workers (None: one per core), embedded, or on the cluster at `address`.
    `progress(done, total, detail)` hears of each cell as it finishes.
    """
    grid = as_grid(grid)
    cells = grid.cells()
    folder = Path(out)
    cache = CellCache(folder)
    started = time.perf_counter()
    with open_executor(workers, address, ray_temp_dir) as executor:
        reports, num_cached = run_cells(cells, cache, executor, with_requests=with_requests,
                                        progress=progress)
        num_workers, startup_s = executor.num_workers, executor.startup_s
    table = sweep_table(cells, reports)
    paths = write_sweep_table(table, folder)
    return SweepResult(cells, reports, table, folder, paths, num_cached, num_workers,
                       time.perf_counter() - started, startup_s,
                       {"workers": workers, "address": address})
