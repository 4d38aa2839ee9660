"""The compiled loop's way back into Python: plain-Python policies, gates and step models.

The loop (refimpl.engine.loop) calls these functions from `objmode` blocks with a run handle;
the handle names a `RunBridge`, registered for the length of one run, which holds the Python
objects and the same arrays the loop works on (shared memory, so a Python policy reads live
state and writes its plan where the commit reads it). A registry keyed by handle, not a
global "current run", so runs may nest (a policy that simulates ahead) without sharing state.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from refimpl.admission.gate import Action
from refimpl.errors import ConfigError, SchedulingError
from refimpl.sched.plan import PlanArrays, StepPlan, read_plan, write_plan
from refimpl.sched.table import FINISHED, PRIORITY, STATUS, TPOT_SLO, TTFT_SLO, NameCodes

if TYPE_CHECKING:
    from refimpl.admission.gate import Decision, Gate
    from refimpl.sched.policy import Policy

__all__ = ["ACTION_CODES", "RunBridge", "registered"]

MAX_KERNELS = 1024  # distinct kernel names one run counts (the loop's `kernel_counts`)
ACTION_CODES = {Action.ACCEPT: 0, Action.QUEUE: 1, Action.DEGRADE: 2, Action.REJECT: 3,
                Action.LOWER: 4}


class RunBridge:
    """One run's Python side: its components and the arrays shared with the loop."""

    def __init__(self, policy: Policy, gate: Gate | None, executor: Any, plan: PlanArrays,
                 finished: np.ndarray, gate_out: np.ndarray, reasons: NameCodes,
                 kernels: NameCodes, arrays: Any, tick_budget: np.ndarray,
                 progress: Callable[[int, int], None] | None = None) -> None:
        self.policy, self.gate, self.executor = policy, gate, executor
        self.plan, self.finished, self.gate_out = plan, finished, gate_out
        self.tick_budget = tick_budget  # (1,): the Python policy's `tick_budget_s`, recorded
        self.reasons, self.kernels = reasons, kernels
        self.arrays = arrays  # the run's request table, KV facade and queues (RunArrays)
        self.status, self.progress = arrays.ints[STATUS], progress  # the table's status row

    def write_plan(self, plan: StepPlan) -> None:
        """Put a Python policy's plan into the plan arrays (which are empty)."""
        if not isinstance(plan, StepPlan):
            raise SchedulingError("plan", type(plan).__name__, f"policy "
                                  f"{self.policy.name!r} must return a refimpl.StepPlan")
        write_plan(plan, self.plan, self.reasons.code, self._kernel_code)

    def read_plan(self) -> StepPlan:
        """The plan arrays as a `StepPlan` (for Python components that observe a step)."""
        return read_plan(self.plan, self.reasons.names, self.kernels.names)

    def _kernel_code(self, name: str) -> int:
        """The run's code of kernel candidate `name` (the loop counts at most MAX_KERNELS)."""
        code = self.kernels.code(name)
        if code >= MAX_KERNELS:
            raise SchedulingError("kernels", name, f"policy {self.policy.name!r} names more "
                                  f"than {MAX_KERNELS} kernel candidates in one run")
        return code

    def write_decision(self, k: int, i: int, decision: Decision) -> None:
        """Row `k` of the gate's output: request, action, reason code, output cap; a lowered
        request's scheduling targets and priority go into its table rows now."""
        if decision.action is Action.LOWER:
            if decision.slo is None:
                raise SchedulingError("decision.slo", None, f"gate {type(self.gate).__name__}"
                                      f" lowered request {i} without the SLO to lower it to")
            ints, floats = self.arrays.ints, self.arrays.floats
            floats[TTFT_SLO, i], floats[TPOT_SLO, i] = decision.slo.ttft_s, decision.slo.tpot_s
            if decision.priority is not None:
                ints[PRIORITY, i] = max(int(ints[PRIORITY, i]), int(decision.priority))
        self.gate_out[:, k] = (i, ACTION_CODES[decision.action],
                               self.reasons.code(decision.reason), decision.output_cap)


_RUNS: dict[int, RunBridge] = {}
_HANDLES = itertools.count(1)


@contextmanager
def registered(run: RunBridge) -> Iterator[int]:
    """A handle for `run` while the block runs (0 is never a handle)."""
    handle = next(_HANDLES)
    _RUNS[handle] = run
    try:
        yield handle
    finally:
        del _RUNS[handle]


# ---- what the loop calls (from objmode) --------------------------------------------------------
def policy_add(handle: int, i: int, now_s: float) -> None:
    _RUNS[handle].policy.add_request(int(i), float(now_s))


def policy_schedule(handle: int, now_s: float) -> None:
    run = _RUNS[handle]
    run.write_plan(run.policy.schedule(float(now_s)))
    run.tick_budget[0] = run.policy.tick_budget_s


def policy_update(handle: int, num_finished: int, now_s: float) -> int:
    run = _RUNS[handle]
    run.policy.update_from_output(run.read_plan(), run.finished[:num_finished].copy(),
                                  float(now_s))
    return run.policy.num_waiting()


def gate_arrive(handle: int, i: int, now_s: float) -> None:
    run = _RUNS[handle]
    run.write_decision(0, int(i), run.gate.on_arrival(int(i), float(now_s)))


def gate_poll(handle: int, now_s: float) -> int:
    run = _RUNS[handle]
    leaving = run.gate.poll(float(now_s))
    for k, (i, decision) in enumerate(leaving):
        run.write_decision(k, i, decision)
    return len(leaving)


def gate_observe(handle: int, num_finished: int, duration_s: float, now_s: float) -> int:
    run = _RUNS[handle]
    run.gate.observe(run.read_plan(), run.finished[:num_finished].copy(), float(duration_s),
                     float(now_s))
    return run.gate.num_queued()


def progress(handle: int) -> None:
    run = _RUNS[handle]
    if run.progress is not None:
        run.progress(int(np.count_nonzero(run.status >= FINISHED)), len(run.status))


def step_seconds(handle: int, prefill_tokens: int, prefill_pairs: int, decode_seqs: int,
                 decode_context_tokens: int) -> float:
    executor = _RUNS[handle].executor
    seconds = float(executor.step_seconds(int(prefill_tokens), int(prefill_pairs),
                                          int(decode_seqs), int(decode_context_tokens)))
    if not math.isfinite(seconds) or seconds < 0:  # a NaN clock never reaches an arrival
        raise ConfigError("step_model", type(executor.step_model).__name__, f"returned a step "
                          f"time of {seconds!r} s; it must be finite and >= 0")
    return seconds


def execute(handle: int) -> float:
    run = _RUNS[handle]
    return float(run.executor.execute(run.plan, run.arrays, run.kernels.names))
