"""The offline cost model (seed section 1) and the step time the serving engine asks for.

`step_time_model(model, hardware)` gives the engine a `StepTimeModel`: calibrated to measured
operator efficiencies for the GPU presets (or the ideal roofline, by name), fitted to measured
kernels on this CPU. `run_profile` -> `build_profiled_table`
-> `CostTable` (look-up, Pareto picks under `S`, save/load); `roofline_table` for GPUs;
`Calibrator` corrects predictions online. The step model, calibration and Pareto functions
import no Numba; the names that need the kernels load on first use.
"""

from __future__ import annotations

from refimpl._lazy import lazy_getattr
from refimpl.costmodel.calibrate import Calibrator
from refimpl.costmodel.calibrated import CalibratedStepModel
from refimpl.costmodel.choose import step_time_model
from refimpl.costmodel.pareto import fastest, pareto_mask
from refimpl.costmodel.step import (
    DEFAULT_STEP_OVERHEAD_S,
    RooflineStepModel,
    StepShape,
    StepTimeModel,
)

# Names whose modules import the kernels (and so Numba): imported when first used, so the
# engine's `from refimpl.costmodel import step_time_model` stays cheap.
_LAZY = {
    "AttentionDims": "candidates",
    "Candidate": "candidates",
    "enumerate_candidates": "candidates",
    "CostTable": "table",
    "ForeignTableWarning": "table",
    "load_table": "table",
    "default_table_path": "table",
    "LatencyModel": "fit",
    "fit_latency": "fit",
    "ProfileResult": "profile",
    "run_profile": "profile",
    "ProfiledStepModel": "profiled",
    "build_profiled_table": "profiled",
    "roofline_table": "roofline",
    "lookup_time_s": "fastlookup",
}

__all__ = [
    "DEFAULT_STEP_OVERHEAD_S",
    "CalibratedStepModel",
    "Calibrator",
    "RooflineStepModel",
    "StepShape",
    "StepTimeModel",
    "fastest",
    "pareto_mask",
    "step_time_model",
    *_LAZY,
]


__getattr__ = lazy_getattr(__name__, {name: f".{module}" for name, module in _LAZY.items()})
