"""Cells run one after another in this process: no Ray, for debugging and for one core.

The same `run_cell` the Ray workers run, so a serial sweep gives the same numbers as a
parallel one (only the wall-clock columns differ).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from refimpl.engine import prepare_loop
from refimpl.sweeps.cell import Cell
from refimpl.sweeps.work import CellResult, run_cell

__all__ = ["SerialExecutor"]

OnDone = Callable[[int, CellResult], None]  # (cell's index in the batch, its result)


class SerialExecutor:
    """Runs a batch of cells in order, in this process."""

    num_workers = 1
    startup_s = 0.0  # nothing to start

    def __enter__(self) -> SerialExecutor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None

    def map(self, cells: Sequence[Cell], on_done: OnDone, with_requests: bool = False) -> None:
        """Run every cell, calling `on_done(index, result)` as each finishes."""
        prepare_loop()
        for index, cell in enumerate(cells):
            on_done(index, run_cell(cell, with_requests))
