"""Running a batch of cells through the cache: finished ones read back, the rest executed.

Shared by `sweep` (one batch) and `capacity` (a batch per round of its searches). Each result
is stored the moment it comes back, so however a sweep ends (killed, interrupted, a bad cell)
every cell that finished is kept, and running the same sweep again picks up from there.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from refimpl.sweeps.cache import CellCache
from refimpl.sweeps.cell import Cell
from refimpl.sweeps.ray_pool import RayExecutor
from refimpl.sweeps.serial import SerialExecutor
from refimpl.sweeps.work import CellResult

__all__ = ["open_executor", "run_cells"]

Progress = Callable[[int, int, str], None]  # (cells done, cells in all, detail)


def open_executor(workers: int | None = None, address: str | None = None,
                  ray_temp_dir: str | None = None) -> SerialExecutor | RayExecutor:
    """`workers=0`: this process, no Ray; else Ray (embedded, or the cluster at `address`)
    with `workers` actors (None: one per core, or per CPU of the cluster)."""
    if workers == 0:
        return SerialExecutor()
    return RayExecutor(workers, address, ray_temp_dir)


def run_cells(cells: Sequence[Cell], cache: CellCache, executor, *,
              with_requests: bool = False, progress: Progress | None = None
              ) -> tuple[list[dict], int]:
    """Every cell's report, in `cells`' order, and how many were read from the cache."""
    keys = [cell.key() for cell in cells]
    reports: list[dict | None] = [cache.load(key, with_requests) for key in keys]
    missing = [i for i, report in enumerate(reports) if report is None]
    num_cached = len(cells) - len(missing)
    started = time.monotonic()
    done = num_cached

    def on_done(index: int, result: CellResult) -> None:
        nonlocal done
        cache.store(result)
        reports[missing[index]] = result.report
        done += 1
        if progress is not None:
            progress(done, len(cells), _detail(done - num_cached, len(missing), started))

    if progress is not None:
        progress(done, len(cells), f"{num_cached} cached")
    if missing:
        executor.map([cells[i] for i in missing], on_done, with_requests)
    return reports, num_cached  # type: ignore[return-value]  (every entry filled)


def _detail(num_run: int, num_to_run: int, started: float) -> str:
    """`ETA 12 s`: the time left at the pace so far."""
    elapsed_s = time.monotonic() - started
    if num_run == 0 or num_run >= num_to_run:
        return ""
    return f"ETA {elapsed_s / num_run * (num_to_run - num_run):.0f} s"
