"""The offline cost model (seed section 1) and the step time the serving engine asks for.

`step_time_model(model, hardware)` gives the engine a `StepTimeModel`: analytic (roofline) for
spec-sheet GPUs, fitted to measured kernels on this CPU.
"""

from refimpl.costmodel.step import (
    DEFAULT_STEP_OVERHEAD_S,
    RooflineStepModel,
    StepShape,
    StepTimeModel,
    step_time_model,
)

__all__ = [
    "DEFAULT_STEP_OVERHEAD_S",
    "RooflineStepModel",
    "StepShape",
    "StepTimeModel",
    "step_time_model",
]
