"""The baseline policies' per-step decisions, compiled: vllm, sarathi and prefill-first.

Each function is the compiled twin of a `schedule` in refimpl.sched (vLLM v1's token budget,
Sarathi-Serve's stall-free batching, prefill-first), following the same rules in the same
order: which requests run, how many tokens each, which are preempted, where admission stops.
Each fills the shared `Plan` and may preempt and admit through the queue helpers; the oracle
test (tests/engine/test_compiled.py) holds the pair to identical results. `decide` is an
ordinary compiled call, not inlined: one call per step costs well under a microsecond, and
keeping it out of the loop keeps the loop's compile time short.
"""

from __future__ import annotations

from refimpl._numba import inline_kernel, kernel
from refimpl.engine.compiled.state import (
    NUM_DECODE,
    NUM_PREFILL,
    NUM_RUNNING,
    RUNNING,
    WAIT_HEAD,
    WAIT_LEN,
    admit,
    pages_held,
    pages_needed,
    preempt,
)
from refimpl.kv import _pool_kernels as K

__all__ = ["PREFILL_FIRST", "SARATHI", "VLLM", "decide"]

VLLM, SARATHI, PREFILL_FIRST = 0, 1, 2  # `decide`'s policy codes


@kernel
def decide(policy, token_budget, max_num_seqs, epoch, r, p, q, plan):
    """One policy decision: fill `plan` (empty when nothing can run now)."""
    plan.sizes[NUM_DECODE] = 0
    plan.sizes[NUM_PREFILL] = 0
    if policy == PREFILL_FIRST:
        if not _prefill_whole_prompts(token_budget, max_num_seqs, r, p, q, plan):
            _decode_all(r, p, q, plan)
        return
    num_running = q.sizes[NUM_RUNNING]
    if policy == VLLM:  # running requests in start order (VLLMPolicy.schedule)
        q.order[:num_running] = q.running[:num_running]
    else:  # decodes first, then partial prefills (SarathiPolicy.schedule)
        k = 0
        for decoding in (True, False):
            for m in range(num_running):
                i = q.running[m]
                if _is_decoding(r, i) == decoding:
                    q.order[k] = i
                    k += 1
    _budgeted_step(token_budget, max_num_seqs, epoch, num_running, r, p, q, plan)


@inline_kernel
def _is_decoding(r, i):
    """`Request.is_decoding`."""
    return (r.num_generated[i] > 0
            and r.prompt_tokens[i] + r.num_generated[i] - r.num_computed[i] == 1)


@inline_kernel
def _add_decode(plan, i):
    """Request `i` decodes one token this step."""
    plan.decode[plan.sizes[NUM_DECODE]] = i
    plan.sizes[NUM_DECODE] += 1


@inline_kernel
def _add_prefill(plan, i, tokens):
    """Request `i` computes a prompt chunk of `tokens` this step."""
    plan.prefill[plan.sizes[NUM_PREFILL]] = i
    plan.prefill_tokens[plan.sizes[NUM_PREFILL]] = tokens
    plan.sizes[NUM_PREFILL] += 1


@inline_kernel
def _budgeted_step(token_budget, max_num_seqs, epoch, num_order, r, p, q, plan):
    """`QueuePolicy.budgeted_step` over `q.order[:num_order]` (see its docstring)."""
    budget, free = token_budget, p.counters[K.FREE]
    preempted = False
    for k in range(num_order):
        if budget == 0:
            break
        i = q.order[k]
        if r.status[i] != RUNNING:  # preempted for an earlier one
            continue
        tokens = min(r.prompt_tokens[i] + r.num_generated[i] - r.num_computed[i], budget)
        need = pages_needed(r, p, i, tokens)
        while need > free:
            victim = _newest_unscheduled(epoch, r, q, i)
            free += pages_held(r, p, victim)
            preempt(r, p, q, victim)
            preempted = True
            if victim == i:
                break
        if r.status[i] != RUNNING:
            continue
        free -= need
        budget -= tokens
        r.mark[i] = epoch
        if _is_decoding(r, i):
            _add_decode(plan, i)
        else:
            _add_prefill(plan, i, tokens)
    while (q.sizes[WAIT_LEN] > 0 and budget > 0 and not preempted
           and q.sizes[NUM_RUNNING] < max_num_seqs):
        i = q.waiting[q.sizes[WAIT_HEAD]]
        tokens = min(r.prompt_tokens[i] + r.num_generated[i] - r.num_computed[i], budget)
        need = pages_needed(r, p, i, tokens)
        if need > free:
            break
        admit(r, q)
        free -= need
        budget -= tokens
        _add_prefill(plan, i, tokens)


@inline_kernel
def _newest_unscheduled(epoch, r, q, fallback):
    """`QueuePolicy._newest_unscheduled`: the newest running request not yet in the plan."""
    for k in range(q.sizes[NUM_RUNNING] - 1, -1, -1):
        i = q.running[k]
        if r.mark[i] != epoch and i != fallback:
            return i
    return fallback


@inline_kernel
def _prefill_whole_prompts(token_budget, max_num_seqs, r, p, q, plan):
    """`PrefillFirstPolicy.schedule`'s first half: whole waiting prompts; returns whether any."""
    budget, free = token_budget, p.counters[K.FREE]
    while q.sizes[WAIT_LEN] > 0 and q.sizes[NUM_RUNNING] < max_num_seqs:
        i = q.waiting[q.sizes[WAIT_HEAD]]
        tokens = r.prompt_tokens[i] + r.num_generated[i] - r.num_computed[i]
        need = pages_needed(r, p, i, tokens)
        if need > free or (plan.sizes[NUM_PREFILL] > 0 and tokens > budget):
            break
        admit(r, q)
        free -= need
        budget -= tokens
        _add_prefill(plan, i, tokens)
    return plan.sizes[NUM_PREFILL] > 0


@inline_kernel
def _decode_all(r, p, q, plan):
    """`PrefillFirstPolicy._decode_all`: every running request decodes, newest preempted first."""
    free = p.counters[K.FREE]
    num_order = q.sizes[NUM_RUNNING]
    q.order[:num_order] = q.running[:num_order]  # victims leave `running`, not this snapshot
    for k in range(num_order):
        i = q.order[k]
        if r.status[i] != RUNNING:
            continue
        need = pages_needed(r, p, i, 1)
        while need > free and r.status[i] == RUNNING:
            victim = q.running[q.sizes[NUM_RUNNING] - 1]
            free += pages_held(r, p, victim)
            preempt(r, p, q, victim)
        if r.status[i] == RUNNING:
            free -= need
            _add_decode(plan, i)
