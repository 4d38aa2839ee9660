"""Executors say how long a step took: predicted on the simulated clock, measured on a real one.

The loop is the same whichever executor it drives. `SimulatedExecutor` charges the step time
its step model predicts for the plan's counts; the roofline and calibrated models run
compiled inside the loop, any other `StepTimeModel` (a profiled one, a user's) is called
through the bridge.
"""

from __future__ import annotations

import math

from refimpl.costmodel.choose import compiled_coefficients
from refimpl.costmodel.step import StepTimeModel, no_coefficients
from refimpl.errors import ConfigError

__all__ = ["BRIDGED", "COMPILED_STEP", "MEASURED", "NO_COEFFICIENTS", "SimulatedExecutor"]

# The loop's executor codes: a step formula computed in the loop (`step_s`: the roofline or
# the calibrated model), any other step model called through the bridge, or a step actually
# executed (and timed) by a Python executor. Whatever the code, an executor's `coefficients`
# are its step model's compiled ones (or none): the compiled policies plan with them.
COMPILED_STEP, BRIDGED, MEASURED = range(3)

NO_COEFFICIENTS = no_coefficients()


class SimulatedExecutor:
    """Charges the step time the step model predicts for the plan, times `clock_scale`;
    computes nothing. The policies plan with the unscaled model: a scale replays a machine
    that ran slower (> 1) or faster than the model the policies trust."""

    def __init__(self, step_model: StepTimeModel, *, clock_scale: float = 1.0) -> None:
        if not (clock_scale > 0 and math.isfinite(clock_scale)):
            raise ConfigError("clock_scale", clock_scale, "must be a finite number > 0")
        self.step_model = step_model
        self.clock_scale = float(clock_scale)
        coefficients = compiled_coefficients(step_model)
        self.code = COMPILED_STEP if coefficients is not None else BRIDGED
        self.coefficients = coefficients if coefficients is not None else NO_COEFFICIENTS

    def step_seconds(self, prefill_tokens: int, prefill_pairs: int, decode_seqs: int,
                     decode_context_tokens: int) -> float:
        """Predicted seconds of a step with these counts."""
        return self.step_model.step_time_parts(prefill_tokens, prefill_pairs, decode_seqs,
                                               decode_context_tokens)
