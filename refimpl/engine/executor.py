"""Executors say how long a step took: predicted on the simulated clock, measured on a real one.

The loop is the same whichever executor it drives. `SimulatedExecutor` charges the step time
its step model predicts for the plan's counts; the roofline model runs compiled inside the
loop, any other `StepTimeModel` (a profiled one, a user's) is called through the bridge.
"""

from __future__ import annotations

from refimpl.costmodel.step import RooflineCoefficients, RooflineStepModel, StepTimeModel

__all__ = ["BRIDGED", "MEASURED", "NO_COEFFICIENTS", "ROOFLINE", "SimulatedExecutor"]

# The loop's executor codes: the roofline computed in the loop, any other step model called
# through the bridge, or a step actually executed (and timed) by a Python executor.
ROOFLINE, BRIDGED, MEASURED = range(3)

NO_COEFFICIENTS = RooflineCoefficients(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


class SimulatedExecutor:
    """Charges the step time the step model predicts for the plan; computes nothing."""

    def __init__(self, step_model: StepTimeModel) -> None:
        self.step_model = step_model
        compiled = type(step_model) is RooflineStepModel  # a subclass may change the formula
        self.code = ROOFLINE if compiled else BRIDGED
        self.coefficients = step_model.coefficients if compiled else NO_COEFFICIENTS

    def step_seconds(self, prefill_tokens: int, prefill_pairs: int, decode_seqs: int,
                     decode_context_tokens: int) -> float:
        """Predicted seconds of a step with these counts."""
        return self.step_model.step_time_parts(prefill_tokens, prefill_pairs, decode_seqs,
                                               decode_context_tokens)
