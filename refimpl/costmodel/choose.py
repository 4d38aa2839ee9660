"""Which step-time model a run gets: the roofline, or the one fitted to this machine.

Apart from both models' modules so that neither imports the other: `step.py` holds the
analytic model, `profiled.py` the fitted one (which builds on `step.py`), and this the choice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from refimpl.config.hardware import HardwareSpec
from refimpl.config.model import ModelConfig
from refimpl.costmodel.step import RooflineStepModel, StepTimeModel

if TYPE_CHECKING:
    from refimpl.costmodel.table import CostTable

__all__ = ["step_time_model"]


def step_time_model(model: ModelConfig, hardware: HardwareSpec,
                    table: CostTable | None = None) -> StepTimeModel:
    """The step-time model for `model` on `hardware`.

    Spec-sheet hardware (`hardware.analytic`) gets `RooflineStepModel`. Measured hardware gets
    `ProfiledStepModel` from `table`, or from this machine's table saved by
    `refimpl profile` for `model`; with neither, the roofline of the probed figures (never a
    silent profile run: it takes 20 s in quick mode, minutes in full).
    """
    if hardware.analytic:
        return RooflineStepModel(model, hardware)
    # imported here: the fitted model loads the kernels (Numba), which a roofline run never needs
    from refimpl.costmodel.profiled import ProfiledStepModel, default_table_for

    table = table if table is not None else default_table_for(model)
    if table is None:
        return RooflineStepModel(model, hardware)
    return ProfiledStepModel(table, model)
