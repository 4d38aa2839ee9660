"""The serving loop, the one for every policy and clock: arrivals, gate, plan, execute, commit.

Vidur's discrete-event core and nano-vllm's step, compiled whole with Numba so a trace of
20,000 requests and 700,000 steps runs in about a second. Each turn:
1. **arrivals**: requests that arrived by now are checked against the model's context and the
   pool (rejected at once if they can never fit), then shown to the gate (refimpl.admission),
   which accepts (the policy gets the request), degrades, queues or rejects; queued ones are
   polled again before every step;
2. **plan**: the policy fills the plan arrays (refimpl.sched.plan), reading only; a
   plain-Python policy's plan is checked against the contract;
3. **execute and commit**: the commit carries out the plan's KV actions and grows the KV
   (refimpl.engine.commit), the executor says how long the step took (the clock advances by
   it), the commit counts tokens and finishes requests; the policy and the gate are told;
4. **record** the step.
The clock is virtual: it jumps to the next arrival when nothing can run. Requests that arrive
while a step runs wait for the next one. An empty plan with nothing left to arrive ends the
run, and whatever is left is rejected `unschedulable`: every request ends with a reason. Plans
that compute and end nothing for MAX_IDLE_STEPS steps in a row are an error, not a spin.
"""

from __future__ import annotations

import numpy as np
from numba import objmode

from refimpl._numba import inline_kernel, kernel
from refimpl.admission import decide as gate
from refimpl.engine import bridge
from refimpl.engine import dispatch as d
from refimpl.engine.clock import monotonic_ns
from refimpl.engine.commit import commit_tokens, end_request, prepare
from refimpl.engine.contract import PLAN_ERRORS, check_plan
from refimpl.kv import manager as kvm
from refimpl.sched import plan as p
from refimpl.sched.policy import PYTHON, SLO
from refimpl.sched.queues import push_waiting, update
from refimpl.sched.table import (
    ARRIVAL,
    EXCEEDS_CONTEXT,
    EXCEEDS_KV_CAPACITY,
    FINISHED,
    MAX_NEW,
    OUTPUT_CAP,
    PROMPT,
    REJECTED,
    STATUS,
    UNSCHEDULABLE,
)

__all__ = ["CONFIG_FIELDS", "MAX_IDLE_STEPS", "STEP_FLOAT_FIELDS", "STEP_INT_FIELDS",
           "ahead_calls", "serve"]

# Entries of `config`: the policy's code, the gate's kind, the executor's code, the
# run's bridge handle, the model's context length, the clock id, whether a Python policy wants
# to hear of every committed step, the steps between progress reports (0: none).
CONFIG_FIELDS = ("policy", "gate", "executor", "handle", "max_context", "clock_id", "observes",
                 "progress")
(POLICY, GATE, EXECUTOR, HANDLE, MAX_CONTEXT, CLOCK_ID, OBSERVES,
 PROGRESS) = range(len(CONFIG_FIELDS))
ACCEPT, QUEUE, DEGRADE, REJECT, LOWER = range(5)  # bridge.ACTION_CODES
NO_GATE, PYTHON_GATE, COMPILED_GATE = range(3)  # entries of config[GATE]
# Columns of the two step-record arrays, in `StepRecords` field names.
STEP_FLOAT_FIELDS = ("start_s", "duration_s", "decision_s", "tick_budget_s")
STEP_INT_FIELDS = ("num_decode", "num_prefill_tokens", "num_prefill_chunks", "kv_used_pages",
                   "num_waiting", "max_chunk_tokens")
NO_PROGRESS = len(PLAN_ERRORS) - 1  # the loop's own error: no progress
MAX_IDLE_STEPS = 1024  # steps in a row without progress before the loop refuses to go on
# Entries of `rates`: bytes of one KV page, and the bandwidth between the device and the CPU
# tier (bytes/s) that moving pages costs; and the factor on a step's charged time (1 but for
# a simulated clock replaying a machine slower or faster than its step model, which the
# policies still plan with).
PAGE_BYTES, HOST_BANDWIDTH, CLOCK_SCALE = range(3)


@kernel(calls_python=True)
def serve(config, params, rates, coefficients, ints, floats, kv, q, slo, gs, plan, finished,
          started, gate_out, kernel_counts, step_f, step_i):
    """Serve every request to the end (or to a broken plan); returns (steps, float records,
    int records, error code, offending request)."""
    entries, sizes = plan.entries, plan.sizes
    code, handle = config[POLICY], config[HANDLE]
    num_requests = ints.shape[1]
    now, next_arrival, num_steps, gate_queued, policy_waiting = 0.0, 0, 0, 0, -1
    idle_steps = 0  # steps in a row that computed no token and ended no request
    ones = np.ones(num_requests, np.int64)  # a decode's token count, for the KV growth
    scratch = np.zeros(num_requests, np.int64)  # `check_plan`'s marks
    while True:
        started_ns = monotonic_ns(config[CLOCK_ID])
        while next_arrival < num_requests and floats[ARRIVAL, next_arrival] <= now:
            gate_queued += _arrive(config, ints, floats, kv, q, slo, gs, gate_out,
                                   next_arrival, now)
            next_arrival += 1
        if gate_queued > 0:
            gate_queued -= _poll_gate(config, ints, floats, kv, q, slo, gs, gate_out, now)
        p.clear(sizes)
        if code == SLO:
            d.plan_slo(slo, coefficients, ints, floats, kv, entries, sizes, plan.kernels, now)
        else:
            d.plan_step(code, params, coefficients, handle, ints, floats, kv, q, entries,
                        sizes, now)
        decision_s = (monotonic_ns(config[CLOCK_ID]) - started_ns) / 1e9
        if code == PYTHON:
            error, row = check_plan(ints, entries, sizes, scratch, num_steps + 1)
            if error != 0:
                return num_steps, step_f, step_i, error, row
        if p.is_empty(sizes):
            if next_arrival < num_requests:
                now = max(now, floats[ARRIVAL, next_arrival])
                continue
            _reject_stranded(ints, floats, kv, now)
            break
        num_finished, num_started, moved, error, row = prepare(
            ints, floats, kv, entries, sizes, now, finished, started, ones,
            code == PYTHON or code == SLO, code != PYTHON)  # noqa: SIM109 (Numba: no `in`)
        if error != 0:
            return num_steps, step_f, step_i, error, row
        duration_s = (d.step_seconds(config[EXECUTOR], coefficients, handle, ints, entries,
                                     sizes) * rates[CLOCK_SCALE]
                      + moved * rates[PAGE_BYTES] / rates[HOST_BANDWIDTH])
        num_finished = commit_tokens(ints, floats, kv, entries, sizes, now, now + duration_s,
                                     finished, num_finished)
        idle_steps = 0 if sizes[p.NUM_DECODE] + sizes[p.NUM_PREFILL] + num_finished else (
            idle_steps + 1)
        if idle_steps >= MAX_IDLE_STEPS:  # a plan of KV moves only, forever: never ends
            return num_steps, step_f, step_i, NO_PROGRESS, -1
        if sizes[p.NUM_PREEMPT] + num_started + num_finished > 0:  # (most steps: none)
            update(ints, q, entries, sizes, started, num_started)
        if config[OBSERVES]:
            policy_waiting = d.update(code, handle, slo, ints, floats, entries, sizes,
                                      num_finished, now + duration_s)
        if config[GATE] == COMPILED_GATE:
            gate_queued = gate.observe(gs, ints, floats, entries, sizes, finished, num_finished,
                                       duration_s)
        elif config[GATE] == PYTHON_GATE:
            gate_queued = _observe_gate(handle, num_finished, duration_s, now + duration_s)
        for k in range(sizes[p.NUM_KERNELS]):
            kernel_counts[plan.kernels[k]] += 1
        if num_steps == step_f.shape[0]:
            step_f, step_i = _doubled(step_f), _doubled(step_i)
        _record(step_f[num_steps], step_i[num_steps], kv.num_pages - kvm.num_free_pages(kv),
                sizes, entries, now, duration_s, decision_s, d.tick_budget_s(slo),
                d.num_waiting(policy_waiting, q.sizes) + gate_queued)
        now += duration_s
        num_steps += 1
        if config[PROGRESS] > 0 and num_steps % config[PROGRESS] == 0:
            _progress(handle)
    return num_steps, step_f, step_i, 0, -1


def ahead_calls(config, params, rates, coefficients, ints, floats, kv, q, slo, gs, plan,
                finished, started, gate_out, kernel_counts, step_f, step_i) -> dict:
    """The loop's largest calls with arguments of the types `serve` passes them, given serve's
    arguments: name -> (kernel, arguments), so they can be compiled before the loop (in
    another process too). `tests/engine/test_compile_loop.py` checks that these are the types the
    loop compiles them for."""
    now, count, code = 0.0, 0, config[POLICY]  # any float64 time, any int64 count
    ones = np.ones(ints.shape[1], np.int64)
    entries, sizes = plan.entries, plan.sizes
    return {
        "plan_slo": (d.plan_slo, (slo, coefficients, ints, floats, kv, entries, sizes,
                                  plan.kernels, now)),
        "plan_step": (d.plan_step, (code, params, coefficients, config[HANDLE], ints, floats,
                                    kv, q, entries, sizes, now)),
        "arrive": (_arrive, (config, ints, floats, kv, q, slo, gs, gate_out, count, now)),
        "poll_gate": (_poll_gate, (config, ints, floats, kv, q, slo, gs, gate_out, now)),
        "prepare": (prepare, (ints, floats, kv, entries, sizes, now, finished, started, ones,
                              True, True)),
        "commit_tokens": (commit_tokens, (ints, floats, kv, entries, sizes, now, now,
                                          finished, count)),
        "update": (update, (ints, q, entries, sizes, started, count)),
        "policy_update": (d.update, (code, config[HANDLE], slo, ints, floats, entries, sizes,
                                     count, now)),
        "observe_gate": (gate.observe, (gs, ints, floats, entries, sizes, finished, count,
                                        now)),
    }


@kernel(calls_python=True)
def _progress(handle):
    """Report how many requests have ended so far."""
    with objmode():
        bridge.progress(handle)


@kernel(calls_python=True)
def _observe_gate(handle, num_finished, duration_s, now):
    """Show the gate the committed step; returns how many requests it holds."""
    with objmode(queued="int64"):
        queued = bridge.gate_observe(handle, num_finished, duration_s, now)
    return queued


@kernel(calls_python=True)
def _arrive(config, ints, floats, kv, q, slo, gs, gate_out, i, now):
    """Request `i` arrives: rejected if it can never fit, else the gate decides; returns 1
    if the gate queued it."""
    total = ints[PROMPT, i] + ints[MAX_NEW, i]
    if total > config[MAX_CONTEXT]:
        end_request(ints, floats, kv, i, REJECTED, EXCEEDS_CONTEXT, floats[ARRIVAL, i])
        return 0
    if kvm.pages_for(total, kv.page_size) > kv.num_pages:
        end_request(ints, floats, kv, i, REJECTED, EXCEEDS_KV_CAPACITY, floats[ARRIVAL, i])
        return 0
    if config[GATE] == NO_GATE:
        _accept(config, ints, floats, q, slo, i, now)
        return 0
    if config[GATE] == COMPILED_GATE:
        gate.arrive(gs, ints, floats, kv, i, now, gate_out)
    else:
        _python_arrive(config[HANDLE], i, now)
    return _apply(config, ints, floats, kv, q, slo, gate_out, 0, now)


@kernel(calls_python=True)
def _poll_gate(config, ints, floats, kv, q, slo, gs, gate_out, now):
    """Decide again on the gate's queued requests; returns how many left the gate."""
    if config[GATE] == COMPILED_GATE:
        leaving = gate.poll(gs, ints, floats, kv, now, gate_out)
    else:
        leaving = _python_poll(config[HANDLE], now)
    for k in range(leaving):
        _apply(config, ints, floats, kv, q, slo, gate_out, k, now)
    return leaving


@kernel(calls_python=True)
def _python_arrive(handle, i, now):
    """The Python gate decides on arrival `i` (into column 0 of the gate's output)."""
    with objmode():
        bridge.gate_arrive(handle, i, now)


@kernel(calls_python=True)
def _python_poll(handle, now):
    """The Python gate decides again on its queue; returns how many left it."""
    with objmode(leaving="int64"):
        leaving = bridge.gate_poll(handle, now)
    return leaving


@kernel(calls_python=True)
def _apply(config, ints, floats, kv, q, slo, gate_out, k, now):
    """Carry out the gate's decision in column `k` of `gate_out`; returns 1 if queued."""
    i, action, reason, cap = gate_out[0, k], gate_out[1, k], gate_out[2, k], gate_out[3, k]
    if action == REJECT:
        end_request(ints, floats, kv, i, REJECTED, reason, now)
    elif action == QUEUE:
        return 1
    else:
        if action == DEGRADE:
            ints[OUTPUT_CAP, i] = cap
        _accept(config, ints, floats, q, slo, i, now)
    return 0


@inline_kernel
def _accept(config, ints, floats, q, slo, i, now):
    """Request `i` joins the waiting queue, and its policy is told."""
    push_waiting(q, i, False)
    d.add_request(config[POLICY], config[HANDLE], slo, ints, floats, i, now)


@kernel
def _reject_stranded(ints, floats, kv, now):
    """Requests left when nothing runs and nothing will arrive: rejected, `unschedulable`."""
    for i in range(ints.shape[1]):
        if ints[STATUS, i] < FINISHED:
            end_request(ints, floats, kv, i, REJECTED, UNSCHEDULABLE, now)


@inline_kernel
def _record(row_f, row_i, used_pages, sizes, entries, start_s, duration_s, decision_s,
            budget_s, waiting):
    """One step's records (columns as STEP_FLOAT_FIELDS and STEP_INT_FIELDS); handed the
    pages in use, not the KV state (an inlined helper handed a tuple copies every array of
    it, docs/performance.md)."""
    row_f[0], row_f[1], row_f[2], row_f[3] = start_s, duration_s, decision_s, budget_s
    prefill_tokens = largest = 0
    for k in range(sizes[p.NUM_PREFILL]):
        prefill_tokens += entries[p.PREFILL_TOKENS, k]
        largest = max(largest, entries[p.PREFILL_TOKENS, k])
    row_i[0], row_i[1], row_i[2] = sizes[p.NUM_DECODE], prefill_tokens, sizes[p.NUM_PREFILL]
    row_i[3] = used_pages
    row_i[4] = waiting
    row_i[5] = largest


@kernel
def _doubled(records):
    """`records` copied into an array twice as long (called a few dozen times per run)."""
    grown = np.empty((2 * records.shape[0], records.shape[1]), dtype=records.dtype)
    for row in range(records.shape[0]):  # plain loops compile faster than slice assignment
        for column in range(records.shape[1]):
            grown[row, column] = records[row, column]
    return grown
