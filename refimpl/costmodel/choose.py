"""Which step-time model a run gets (calibrated, the ideal roofline, or fitted to this
machine), and which of them the loop computes compiled.

Apart from the models' modules so that none imports another: `step.py` holds the analytic
model and the compiled formula, `calibrated.py` and `profiled.py` build on it, this chooses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from refimpl.config.hardware import HardwareSpec
from refimpl.config.model import ModelConfig
from refimpl.costmodel.calibrated import CalibratedStepModel
from refimpl.costmodel.linear_step import LinearStepModel
from refimpl.costmodel.step import RooflineStepModel, StepCoefficients, StepTimeModel
from refimpl.errors import ConfigError

if TYPE_CHECKING:
    from refimpl.costmodel.table import CostTable

__all__ = ["STEP_MODELS", "compiled_coefficients", "step_time_model"]

STEP_MODELS = ("auto", "calibrated", "roofline")  # names a run may ask for


def step_time_model(model: ModelConfig, hardware: HardwareSpec,
                    table: CostTable | None = None, kind: str = "auto") -> StepTimeModel:
    """The step-time model `kind` for `model` on `hardware`.

    `auto`: spec-sheet hardware with fitted efficiencies (the GPU presets) gets
    `CalibratedStepModel`, other spec-sheet hardware the ideal `RooflineStepModel`;
    `roofline` asks for the ideal one by name, `calibrated` for the fitted one. Measured
    hardware gets `ProfiledStepModel` from `table`, or from this machine's table saved by
    `refimpl profile` for `model`; with neither, the roofline of the probed figures (never a
    silent profile run: it takes 20 s in quick mode, minutes in full).
    """
    if kind not in STEP_MODELS:
        raise ConfigError("step_model", kind, "unknown step model", choices=STEP_MODELS)
    if kind == "roofline":
        return RooflineStepModel(model, hardware)
    if kind == "calibrated" or (hardware.analytic and hardware.efficiency is not None):
        return CalibratedStepModel(model, hardware)
    if hardware.analytic:
        return RooflineStepModel(model, hardware)
    # imported here: the fitted model loads the kernels (Numba), which a roofline run never needs
    from refimpl.costmodel.profiled import ProfiledStepModel, default_table_for

    table = table if table is not None else default_table_for(model)
    if table is None:
        return RooflineStepModel(model, hardware)
    return ProfiledStepModel(table, model)


def compiled_coefficients(step_model: object) -> StepCoefficients | None:
    """The coefficients the loop runs compiled, if `step_model` is exactly one of the models
    `step_s` computes (a subclass may change the formula: it goes through the bridge)."""
    if type(step_model) in (RooflineStepModel, CalibratedStepModel, LinearStepModel):
        return step_model.coefficients
    return None
