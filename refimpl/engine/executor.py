"""Executors run a step plan and say how long it took: predicted on a simulated clock.

The engine is the same whichever executor it drives; the simulated one charges the cost
model's step time, and the real engine (tiny model on refimpl's kernels) measures wall time.
"""

from __future__ import annotations

from typing import Protocol

from refimpl.costmodel.step import StepTimeModel
from refimpl.sched.plan import StepPlan

__all__ = ["Executor", "SimulatedExecutor"]


class Executor(Protocol):
    """Runs one step."""

    def execute(self, plan: StepPlan) -> float:
        """Run `plan`; return the step's duration in seconds."""


class SimulatedExecutor:
    """Charges the step time the cost model predicts for the plan; computes nothing."""

    def __init__(self, step_model: StepTimeModel) -> None:
        self.step_model = step_model

    def execute(self, plan: StepPlan) -> float:
        """Predicted seconds of the plan's prefill chunks and decode batch."""
        prefill_tokens = prefill_pairs = 0
        for request, tokens in plan.prefill:
            prefill_tokens += tokens
            # causal pairs of a chunk of `tokens` queries after `num_computed` cached ones
            prefill_pairs += tokens * request.num_computed + tokens * (tokens + 1) // 2
        decode_context = 0
        for request in plan.decode:
            decode_context += request.num_tokens  # the cached context plus the new token
        return self.step_model.step_time_parts(prefill_tokens, prefill_pairs, len(plan.decode),
                                               decode_context)
