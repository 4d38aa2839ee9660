"""Which policy, gate and clock the compiled loop calls: built-in ones by code, others by bridge.

The loop is compiled once for every policy: each call here branches on a small integer code
(refimpl.sched.policy's PYTHON, VLLM, ...) to a built-in's compiled decision, or crosses to
Python through `refimpl.engine.bridge` for a plain-Python policy, gate or step model (about
2 us a crossing). Branching on a code, not passing the policy's function as an argument,
because Numba cannot cache a function that takes another compiled function (its type is
keyed by the object, new in every process), and compiling the loop in every run would cost
seconds.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import objmode

from refimpl._numba import inline_kernel, kernel
from refimpl.costmodel.choose import compiled_coefficients
from refimpl.costmodel.step import no_coefficients, step_s
from refimpl.engine import bridge
from refimpl.engine.executor import COMPILED_STEP, MEASURED
from refimpl.kv.manager import KVState
from refimpl.sched.plan import (
    DECODE,
    NUM_DECODE,
    NUM_PREFILL,
    PREFILL,
    PREFILL_TOKENS,
    StepPlan,
    new_plan_arrays,
    read_plan,
)
from refimpl.sched.policies.edf import plan_edf
from refimpl.sched.policies.prefill_first import plan_prefill_first
from refimpl.sched.policies.sarathi import plan_sarathi
from refimpl.sched.policies.sarathi_edf import plan_sarathi_edf
from refimpl.sched.policies.vllm import plan_vllm
from refimpl.sched.policy import (
    EDF,
    PREFILL_FIRST,
    PYTHON,
    SARATHI,
    SARATHI_EDF,
    SLO,
    VLLM,
    Policy,
)
from refimpl.sched.queues import WAIT_LEN, Queues
from refimpl.sched.slo.compiled import no_slo_state, plan_slo, slo_add, slo_update
from refimpl.sched.slo.compiled.state import LAST_BUDGET
from refimpl.sched.table import COMPUTED, GENERATED, PROMPT, REASONS

__all__ = ["RunArrays", "add_request", "budget_slot", "num_waiting", "plan_once", "plan_step",
           "slo_state", "step_seconds", "tick_budget_s", "update"]

TOKEN_BUDGET, MAX_NUM_SEQS = range(2)  # a baseline's entries of `params`

_step_s = inline_kernel(step_s)


class RunArrays(NamedTuple):
    """A run's arrays that decisions read: the request table, the KV facade, the queues."""

    ints: np.ndarray
    floats: np.ndarray
    kv: KVState
    queues: Queues


def plan_once(policy: Policy, now_s: float) -> StepPlan:
    """The plan a bound built-in `policy` would make at `now_s`, from Python; changes nothing
    but the queues' decision scratch (the loop itself never calls this)."""
    arrays = policy.ctx.arrays
    plan = new_plan_arrays(arrays.ints.shape[1])
    coefficients = compiled_coefficients(policy.ctx.step_model) or no_coefficients()
    if policy.code == SLO:
        plan_slo(slo_state(policy), coefficients, arrays.ints, arrays.floats, arrays.kv,
                 plan.entries, plan.sizes, plan.kernels, now_s)
    else:
        plan_step(policy.code, policy_params(policy), coefficients, 0, arrays.ints,
                  arrays.floats, arrays.kv, arrays.queues, plan.entries, plan.sizes, now_s)
    return read_plan(plan, REASONS, [])


def slo_state(policy: Policy):
    """The compiled `slo` policy's state (refimpl.sched.slo.compiled), a tiny dummy for others
    (the loop takes one either way)."""
    compiled = getattr(policy, "compiled", None)
    return compiled.state if compiled is not None and policy.code == SLO else no_slo_state()


def policy_params(policy: Policy) -> np.ndarray:
    """A built-in policy's parameters as its decision reads them (zeros for others)."""
    return np.array([getattr(policy, "token_budget", 0), getattr(policy, "max_num_seqs", 0)],
                    np.int64)


@kernel(calls_python=True)
def plan_step(code, params, coefficients, handle, ints, floats, kv, q, entries, sizes, now):
    """Fill the plan of the next step (the plan arrays are empty on entry); `slo` has a call
    of its own (`plan_slo`), so the other policies' steps do not pass its state. `edf` reads
    the step model's `coefficients` (its TTFT guard's floor) and the request times in `floats`.

    A call, not inlined into the loop: in one function that large, Numba's reference-count
    pruning gives up, and every array of `kv` and `q` the decision touches cost two atomic
    operations (60% of the loop's time, measured); a call of its own prunes them. For the same
    reason `slo`'s state (26 arrays) is passed only where it is used.
    """
    if code == VLLM:
        plan_vllm(params[TOKEN_BUDGET], params[MAX_NUM_SEQS], ints, kv, q, entries, sizes)
    elif code == SARATHI:
        plan_sarathi(params[TOKEN_BUDGET], params[MAX_NUM_SEQS], ints, kv, q, entries, sizes)
    elif code == PREFILL_FIRST:
        plan_prefill_first(params[TOKEN_BUDGET], params[MAX_NUM_SEQS], ints, kv, q, entries,
                           sizes)
    elif code == EDF:
        plan_edf(params[TOKEN_BUDGET], params[MAX_NUM_SEQS], coefficients, ints, floats, kv, q,
                 entries, sizes, now)
    elif code == SARATHI_EDF:
        plan_sarathi_edf(params[TOKEN_BUDGET], params[MAX_NUM_SEQS], ints, kv, q, entries,
                         sizes)
    else:
        _python_schedule(handle, now)


@inline_kernel
def add_request(code, handle, slo, ints, floats, i, now):
    """Tell the policy that request `i` was admitted (the loop queued it already)."""
    if code == PYTHON:
        _python_add(handle, i, now)
    elif code == SLO:
        slo_add(slo, ints, floats, i)


@kernel(calls_python=True)
def update(code, handle, slo, ints, floats, entries, sizes, num_finished, now):
    """Tell the policy the plan was committed; returns the requests it has waiting, or -1
    when the loop's own waiting queue says."""
    if code == SLO:
        return slo_update(slo, ints, floats, entries, sizes)
    if code != PYTHON:
        return -1
    return _python_update(handle, num_finished, now)


@inline_kernel
def num_waiting(policy_waiting, queue_sizes):
    """Requests admitted and not running: the policy's count, or the loop's queue's."""
    return queue_sizes[WAIT_LEN] if policy_waiting < 0 else policy_waiting


@inline_kernel
def tick_budget_s(slo):
    """The time the policy's tick allowed this step: the compiled `slo`'s, or a plain-Python
    policy's `tick_budget_s` (`budget_slot`); NaN for policies without one."""
    return slo.fp[LAST_BUDGET]


def budget_slot(state) -> np.ndarray:
    """Where a plain-Python policy's tick budget goes for the loop to record: a one-entry
    view of `state` (`slo_state`'s dummy for such a policy)."""
    return state.fp[LAST_BUDGET:LAST_BUDGET + 1]


@inline_kernel
def step_seconds(code, coefficients, handle, ints, entries, sizes):
    """The step's duration: predicted by `step_s` (the roofline or the calibrated model) or a
    Python step model, or measured by an executor that runs the step."""
    if code == MEASURED:
        return _execute(handle)
    prefill_tokens = prefill_pairs = decode_context = 0
    for k in range(sizes[NUM_PREFILL]):
        tokens = entries[PREFILL_TOKENS, k]
        prefill_tokens += tokens
        # causal pairs of a chunk of `tokens` queries after `num_computed` cached ones
        prefill_pairs += tokens * ints[COMPUTED, entries[PREFILL, k]] + tokens * (tokens + 1) // 2
    for k in range(sizes[NUM_DECODE]):
        i = entries[DECODE, k]
        decode_context += ints[PROMPT, i] + ints[GENERATED, i]  # its cache and newest token
    if code == COMPILED_STEP:
        return _step_s(coefficients, prefill_tokens, prefill_pairs, sizes[NUM_DECODE],
                       decode_context)
    return _python_step_s(handle, prefill_tokens, prefill_pairs, sizes[NUM_DECODE],
                          decode_context)


# ---- the crossings to Python (not inlined: Numba lifts `objmode` blocks out of a function) ----
@kernel(calls_python=True)
def _execute(handle):
    with objmode(seconds="float64"):
        seconds = bridge.execute(handle)
    return seconds


@kernel(calls_python=True)
def _python_schedule(handle, now):
    with objmode():
        bridge.policy_schedule(handle, now)


@kernel(calls_python=True)
def _python_add(handle, i, now):
    with objmode():
        bridge.policy_add(handle, i, now)


@kernel(calls_python=True)
def _python_update(handle, num_finished, now):
    with objmode(waiting="int64"):
        waiting = bridge.policy_update(handle, num_finished, now)
    return waiting


@kernel(calls_python=True)
def _python_step_s(handle, prefill_tokens, prefill_pairs, decode_seqs, decode_context):
    with objmode(seconds="float64"):
        seconds = bridge.step_seconds(handle, prefill_tokens, prefill_pairs, decode_seqs,
                                      decode_context)
    return seconds
