"""The serving loop, compiled: arrivals, the policy's decision, KV growth, step time, commit.

The compiled twin of `Engine.run` (refimpl.engine.engine) with `SimulatedExecutor` over the
roofline step model: the same virtual clock, the same order of events and float operations,
so its records equal the Python engine's. A whole trace runs in one call; per-step records go
into preallocated arrays that double when full. The step time is `roofline_step_s` itself,
compiled, so the two engines share one formula.
"""

from __future__ import annotations

import math

import numpy as np

from refimpl._numba import inline_kernel, kernel
from refimpl.costmodel.step import roofline_step_s
from refimpl.engine.compiled.clock import monotonic_ns
from refimpl.engine.compiled.policies import decide
from refimpl.engine.compiled.state import (
    COMPLETED,
    EXCEEDS_CONTEXT,
    EXCEEDS_KV_CAPACITY,
    FINISHED,
    NUM_DECODE,
    NUM_PREFILL,
    REJECTED,
    UNSCHEDULABLE,
    WAIT_LEN,
    drop_finished,
    free_kv,
    grow_kv,
    push_waiting,
)
from refimpl.kv import _pool_kernels as K

__all__ = ["STEP_FLOAT_FIELDS", "STEP_INT_FIELDS", "serve"]

# Columns of the two record arrays, in `StepRecords` field names.
STEP_FLOAT_FIELDS = ("start_s", "duration_s", "decision_s")
STEP_INT_FIELDS = ("num_decode", "num_prefill_tokens", "num_prefill_chunks", "kv_used_pages",
                   "num_waiting")

_step_s = inline_kernel(roofline_step_s)


@kernel
def serve(policy, token_budget, max_num_seqs, coefficients, max_context, clock_id,
          r, p, q, plan, step_f, step_i):
    """Serve every request to the end; returns (steps, float records, int records).

    `step_f` (capacity, 3) and `step_i` (capacity, 5) are the first record arrays (columns as
    STEP_FLOAT_FIELDS / STEP_INT_FIELDS); full ones are replaced by arrays twice as long.
    """
    num_requests = r.arrival_s.shape[0]
    now = 0.0
    next_arrival = num_steps = epoch = 0
    while True:
        while next_arrival < num_requests and r.arrival_s[next_arrival] <= now:
            _arrive(r, p, q, next_arrival, max_context)
            next_arrival += 1
        epoch += 1
        started_ns = monotonic_ns(clock_id)
        decide(policy, token_budget, max_num_seqs, epoch, r, p, q, plan)
        decision_s = (monotonic_ns(clock_id) - started_ns) / 1e9
        if plan.sizes[NUM_DECODE] + plan.sizes[NUM_PREFILL] == 0:
            if next_arrival < num_requests:
                now = max(now, r.arrival_s[next_arrival])
                continue
            _reject_stranded(r, p, now)
            break
        _grow_plan(r, p, plan)
        duration_s = _plan_step_s(coefficients, r, plan)
        if _commit(r, p, plan, now, now + duration_s):
            drop_finished(r, q)
        if num_steps == step_f.shape[0]:
            step_f, step_i = _doubled(step_f), _doubled(step_i)
        step_f[num_steps, 0] = now
        step_f[num_steps, 1] = duration_s
        step_f[num_steps, 2] = decision_s
        step_i[num_steps, 0] = plan.sizes[NUM_DECODE]
        step_i[num_steps, 1] = plan.prefill_tokens[:plan.sizes[NUM_PREFILL]].sum()
        step_i[num_steps, 2] = plan.sizes[NUM_PREFILL]
        step_i[num_steps, 3] = p.num_pages - p.counters[K.FREE]
        step_i[num_steps, 4] = q.sizes[WAIT_LEN]
        now += duration_s
        num_steps += 1
    return num_steps, step_f, step_i


@kernel
def _doubled(records):
    """`records` copied into an array twice as long (called a few dozen times per run)."""
    grown = np.empty((2 * records.shape[0], records.shape[1]), dtype=records.dtype)
    grown[:records.shape[0]] = records
    return grown


@inline_kernel
def _arrive(r, p, q, i, max_context):
    """`Engine._arrive`: queue request `i`, or reject it at once if it can never run."""
    total = r.prompt_tokens[i] + r.max_new_tokens[i]
    if total > max_context:
        _reject(r, p, i, EXCEEDS_CONTEXT, r.arrival_s[i])
    elif -(-total // p.page_size) > p.num_pages:
        _reject(r, p, i, EXCEEDS_KV_CAPACITY, r.arrival_s[i])
    else:
        push_waiting(q, i, False)


@inline_kernel
def _reject(r, p, i, reason, now):
    """`Engine._reject`."""
    r.status[i] = REJECTED
    r.reason[i] = reason
    r.finish_s[i] = now
    free_kv(r, p, i)


@inline_kernel
def _reject_stranded(r, p, now):
    """`Engine._reject_stranded`: requests left when nothing runs and nothing will arrive."""
    for i in range(r.status.shape[0]):
        if r.status[i] < FINISHED:
            _reject(r, p, i, UNSCHEDULABLE, now)


@inline_kernel
def _grow_plan(r, p, plan):
    """`KVManager.grow` over the plan: decodes by one token, chunks by theirs (the same order)."""
    for k in range(plan.sizes[NUM_DECODE]):
        grow_kv(r, p, plan.decode[k], 1)
    for k in range(plan.sizes[NUM_PREFILL]):
        grow_kv(r, p, plan.prefill[k], plan.prefill_tokens[k])


@inline_kernel
def _plan_step_s(coefficients, r, plan):
    """`SimulatedExecutor.execute`: the step's counts, then the roofline step time."""
    prefill_tokens = prefill_pairs = decode_context = 0
    for k in range(plan.sizes[NUM_PREFILL]):
        tokens = plan.prefill_tokens[k]
        prefill_tokens += tokens
        # causal pairs of a chunk of `tokens` queries after `num_computed` cached ones
        prefill_pairs += tokens * r.num_computed[plan.prefill[k]] + tokens * (tokens + 1) // 2
    for k in range(plan.sizes[NUM_DECODE]):
        i = plan.decode[k]
        decode_context += r.prompt_tokens[i] + r.num_generated[i]
    return _step_s(coefficients, prefill_tokens, prefill_pairs, plan.sizes[NUM_DECODE],
                   decode_context)


@inline_kernel
def _commit(r, p, plan, start_s, end_s):
    """`Engine._commit` of the decodes, then the chunks; returns whether any request finished."""
    finished = False
    for k in range(plan.sizes[NUM_DECODE]):
        finished |= _commit_one(r, p, plan.decode[k], 1, start_s, end_s)
    for k in range(plan.sizes[NUM_PREFILL]):
        finished |= _commit_one(r, p, plan.prefill[k], plan.prefill_tokens[k], start_s, end_s)
    return finished


@inline_kernel
def _commit_one(r, p, i, tokens, start_s, end_s):
    """Count `tokens` computed for request `i`; emit its next token if it caught up."""
    if math.isnan(r.first_scheduled_s[i]):
        r.first_scheduled_s[i] = start_s
    r.num_computed[i] += tokens
    if r.num_computed[i] < r.prompt_tokens[i] + r.num_generated[i]:
        return False  # a prompt chunk short of the end: no token yet
    r.num_generated[i] += 1
    if r.num_generated[i] == 1:
        r.first_token_s[i] = end_s
    r.last_token_s[i] = end_s
    if r.num_generated[i] < r.max_new_tokens[i]:
        return False
    r.status[i] = FINISHED
    r.reason[i] = COMPLETED
    r.finish_s[i] = end_s
    free_kv(r, p, i)
    return True
