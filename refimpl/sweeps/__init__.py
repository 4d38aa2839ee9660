"""Sweeps and capacity searches: grids of simulated runs, cached on disk, on Ray or serially."""

from refimpl.sweeps.cell import Cell
from refimpl.sweeps.grid import SweepGrid, load_grid
from refimpl.sweeps.run_capacity import CapacityResult, capacity
from refimpl.sweeps.run_sweep import SweepResult, sweep
from refimpl.sweeps.table import MEASURED_COLUMNS

__all__ = [
    "MEASURED_COLUMNS",
    "CapacityResult",
    "Cell",
    "SweepGrid",
    "SweepResult",
    "capacity",
    "load_grid",
    "sweep",
]
