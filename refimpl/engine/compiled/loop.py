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
    ARRIVAL,
    COMPLETED,
    COMPUTED,
    DECODE,
    EXCEEDS_CONTEXT,
    EXCEEDS_KV_CAPACITY,
    FINISH,
    FINISHED,
    FIRST_SCHEDULED,
    FIRST_TOKEN,
    GENERATED,
    LAST_TOKEN,
    MAX_NEW,
    NUM_DECODE,
    NUM_PREFILL,
    PREFILL,
    PREFILL_TOKENS,
    PROMPT,
    REASON,
    REJECTED,
    SLOT,
    STATUS,
    UNSCHEDULABLE,
    WAIT_LEN,
    drop_finished,
    free_kv,
    grow_kv,
    pages_for,
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
          ints, floats, p, q, step_f, step_i):
    """Serve every request to the end; returns (steps, float records, int records).

    `ints` and `floats` are the requests (see `state`), in arrival order. `step_f`
    (capacity, 3) and `step_i` (capacity, 5) are the first record arrays (columns as
    STEP_FLOAT_FIELDS / STEP_INT_FIELDS); full ones are replaced by arrays twice as long.
    """
    num_requests = ints.shape[1]
    plan, sizes = q.plan, q.sizes
    now = 0.0
    next_arrival = num_steps = epoch = 0
    while True:
        while next_arrival < num_requests and floats[ARRIVAL, next_arrival] <= now:
            _arrive(ints, floats, p, q, next_arrival, max_context)
            next_arrival += 1
        epoch += 1
        started_ns = monotonic_ns(clock_id)
        decide(policy, token_budget, max_num_seqs, epoch, ints, p, q)
        decision_s = (monotonic_ns(clock_id) - started_ns) / 1e9
        if sizes[NUM_DECODE] + sizes[NUM_PREFILL] == 0:
            if next_arrival < num_requests:
                now = max(now, floats[ARRIVAL, next_arrival])
                continue
            _reject_stranded(ints, floats, p, now)
            break
        _grow_plan(ints, p, plan, sizes)
        duration_s = _plan_step_s(coefficients, ints, plan, sizes)
        if _commit(ints, floats, p, plan, sizes, now, now + duration_s):
            drop_finished(ints, q.running, sizes)
        if num_steps == step_f.shape[0]:
            step_f, step_i = _doubled(step_f), _doubled(step_i)
        step_f[num_steps, 0] = now
        step_f[num_steps, 1] = duration_s
        step_f[num_steps, 2] = decision_s
        step_i[num_steps, 0] = sizes[NUM_DECODE]
        step_i[num_steps, 1] = _prefill_tokens(plan, sizes)
        step_i[num_steps, 2] = sizes[NUM_PREFILL]
        step_i[num_steps, 3] = p.num_pages - p.counters[K.FREE]
        step_i[num_steps, 4] = sizes[WAIT_LEN]
        now += duration_s
        num_steps += 1
    return num_steps, step_f, step_i


@kernel
def _doubled(records):
    """`records` copied into an array twice as long (called a few dozen times per run)."""
    grown = np.empty((2 * records.shape[0], records.shape[1]), dtype=records.dtype)
    for row in range(records.shape[0]):  # plain loops compile faster than slice assignment
        for column in range(records.shape[1]):
            grown[row, column] = records[row, column]
    return grown


@kernel
def _arrive(ints, floats, p, q, i, max_context):
    """`Engine._arrive`: queue request `i`, or reject it at once if it can never run."""
    total = ints[PROMPT, i] + ints[MAX_NEW, i]
    if total > max_context:
        _end(ints, floats, p, i, REJECTED, EXCEEDS_CONTEXT, floats[ARRIVAL, i])
    elif pages_for(total, p.page_size) > p.num_pages:
        _end(ints, floats, p, i, REJECTED, EXCEEDS_KV_CAPACITY, floats[ARRIVAL, i])
    else:
        push_waiting(q.waiting, q.sizes, i, False)


@kernel
def _end(ints, floats, p, i, status, reason, now):
    """`Engine._reject`, or the end of `Engine._commit` for a finished request."""
    ints[STATUS, i] = status
    ints[REASON, i] = reason
    floats[FINISH, i] = now
    free_kv(ints, p, i)


@kernel
def _reject_stranded(ints, floats, p, now):
    """`Engine._reject_stranded`: requests left when nothing runs and nothing will arrive."""
    for i in range(ints.shape[1]):
        if ints[STATUS, i] < FINISHED:
            _end(ints, floats, p, i, REJECTED, UNSCHEDULABLE, now)


@inline_kernel
def _entry(plan, sizes, k):
    """The plan's `k`-th request and its tokens: the decodes (one token each), then chunks."""
    if k < sizes[NUM_DECODE]:
        return plan[DECODE, k], 1
    return plan[PREFILL, k - sizes[NUM_DECODE]], plan[PREFILL_TOKENS, k - sizes[NUM_DECODE]]


@inline_kernel
def _grow_plan(ints, p, plan, sizes):
    """`KVManager.grow` over the plan, in the plan's order."""
    lengths, num_pages_of, tokens_per_page = p.lengths, p.num_pages_of, p.tokens_per_page
    for k in range(sizes[NUM_DECODE] + sizes[NUM_PREFILL]):
        i, tokens = _entry(plan, sizes, k)
        slot = ints[SLOT, i]
        if slot >= 0 and lengths[slot] + tokens <= num_pages_of[slot] * tokens_per_page[slot]:
            lengths[slot] += tokens  # room in the pages held (most decodes): no page to take
        else:
            grow_kv(ints, p, i, tokens)


@inline_kernel
def _prefill_tokens(plan, sizes):
    """Prompt tokens of all the plan's chunks."""
    total = 0
    for k in range(sizes[NUM_PREFILL]):
        total += plan[PREFILL_TOKENS, k]
    return total


@inline_kernel
def _plan_step_s(coefficients, ints, plan, sizes):
    """`SimulatedExecutor.execute`: the step's counts, then the roofline step time."""
    prefill_pairs = decode_context = 0
    for k in range(sizes[NUM_PREFILL]):
        tokens = plan[PREFILL_TOKENS, k]
        # causal pairs of a chunk of `tokens` queries after `num_computed` cached ones
        prefill_pairs += tokens * ints[COMPUTED, plan[PREFILL, k]] + tokens * (tokens + 1) // 2
    for k in range(sizes[NUM_DECODE]):
        i = plan[DECODE, k]
        decode_context += ints[PROMPT, i] + ints[GENERATED, i]
    return _step_s(coefficients, _prefill_tokens(plan, sizes), prefill_pairs, sizes[NUM_DECODE],
                   decode_context)


@inline_kernel
def _commit(ints, floats, p, plan, sizes, start_s, end_s):
    """`Engine._commit`: count computed tokens, emit tokens; returns whether any finished."""
    finished = False
    for k in range(sizes[NUM_DECODE] + sizes[NUM_PREFILL]):
        i, tokens = _entry(plan, sizes, k)
        if math.isnan(floats[FIRST_SCHEDULED, i]):
            floats[FIRST_SCHEDULED, i] = start_s
        ints[COMPUTED, i] += tokens
        if ints[COMPUTED, i] < ints[PROMPT, i] + ints[GENERATED, i]:
            continue  # a prompt chunk short of the end: no token yet
        ints[GENERATED, i] += 1
        if ints[GENERATED, i] == 1:
            floats[FIRST_TOKEN, i] = end_s
        floats[LAST_TOKEN, i] = end_s
        if ints[GENERATED, i] >= ints[MAX_NEW, i]:
            _end(ints, floats, p, i, FINISHED, COMPLETED, end_s)
            finished = True
    return finished
