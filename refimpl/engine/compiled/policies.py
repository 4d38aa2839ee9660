"""The baseline policies' per-step decisions, compiled: vllm, sarathi and prefill-first.

Each function is the compiled twin of a `schedule` in refimpl.sched (vLLM v1's token budget,
Sarathi-Serve's stall-free batching, prefill-first), following the same rules in the same
order: which requests run, how many tokens each, which are preempted, where admission stops.
Each fills the plan in `q` and may preempt and admit through the queue helpers; the oracle
test (tests/engine/test_compiled.py) holds each pair to identical results.

KV pages needed follow `KVManager.pages_needed`, in its two cases: a running request holds a
slot (its pages, `tokens_per_page` tokens each), a waiting one holds none (pages of
`page_size` tokens from scratch).
"""

from __future__ import annotations

from refimpl._numba import inline_kernel, kernel
from refimpl.engine.compiled.state import (
    COMPUTED,
    DECODE,
    GENERATED,
    MARK,
    NUM_DECODE,
    NUM_PREFILL,
    NUM_RUNNING,
    PREFILL,
    PREFILL_TOKENS,
    PROMPT,
    RUNNING,
    SLOT,
    STATUS,
    WAIT_HEAD,
    WAIT_LEN,
    admit,
    pages_for,
    preempt,
)
from refimpl.kv import _pool_kernels as K

__all__ = ["PREFILL_FIRST", "SARATHI", "VLLM", "decide"]

VLLM, SARATHI, PREFILL_FIRST = 0, 1, 2  # `decide`'s policy codes


@kernel
def decide(policy, token_budget, max_num_seqs, epoch, ints, p, q):
    """One policy decision: fill the plan in `q` (empty when nothing can run now)."""
    q.sizes[NUM_DECODE] = 0
    q.sizes[NUM_PREFILL] = 0
    if policy == PREFILL_FIRST:
        if not _prefill_whole_prompts(token_budget, max_num_seqs, ints, p, q):
            _decode_all(ints, p, q)
        return
    running, order = q.running, q.order
    num_running = q.sizes[NUM_RUNNING]
    if policy == VLLM:  # running requests in start order (VLLMPolicy.schedule)
        for k in range(num_running):
            order[k] = running[k]
    else:  # decodes first, then partial prefills (SarathiPolicy.schedule)
        k = 0
        for decoding in (True, False):
            for m in range(num_running):
                i = running[m]
                uncomputed = ints[PROMPT, i] + ints[GENERATED, i] - ints[COMPUTED, i]
                if _is_decoding(ints[GENERATED, i], uncomputed) == decoding:
                    order[k] = i
                    k += 1
    _budgeted_step(token_budget, max_num_seqs, epoch, num_running, ints, p, q)


@inline_kernel
def _is_decoding(num_generated, num_uncomputed):
    """`Request.is_decoding`: only the newest output token is left to compute."""
    return num_generated > 0 and num_uncomputed == 1


@inline_kernel
def _add_decode(plan, sizes, i):
    """Request `i` decodes one token this step."""
    plan[DECODE, sizes[NUM_DECODE]] = i
    sizes[NUM_DECODE] += 1


@inline_kernel
def _add_prefill(plan, sizes, i, tokens):
    """Request `i` computes a prompt chunk of `tokens` this step."""
    plan[PREFILL, sizes[NUM_PREFILL]] = i
    plan[PREFILL_TOKENS, sizes[NUM_PREFILL]] = tokens
    sizes[NUM_PREFILL] += 1


@inline_kernel
def _budgeted_step(token_budget, max_num_seqs, epoch, num_order, ints, p, q):
    """`QueuePolicy.budgeted_step` over `q.order[:num_order]` (see its docstring)."""
    order, plan, sizes = q.order, q.plan, q.sizes
    num_pages_of, tokens_per_page = p.num_pages_of, p.tokens_per_page
    budget, free = token_budget, p.counters[K.FREE]
    preempted = False
    for k in range(num_order):
        if budget == 0:
            break
        i = order[k]
        if ints[STATUS, i] != RUNNING:  # preempted for an earlier one
            continue
        uncomputed = ints[PROMPT, i] + ints[GENERATED, i] - ints[COMPUTED, i]
        tokens = min(uncomputed, budget)
        slot = ints[SLOT, i]
        need = (pages_for(ints[COMPUTED, i] + tokens, tokens_per_page[slot])
                - num_pages_of[slot])
        while need > free:
            victim = _newest_unscheduled(epoch, ints, q, i)
            free += num_pages_of[ints[SLOT, victim]]
            preempt(ints, p, q, victim)
            preempted = True
            if victim == i:
                break
        if ints[STATUS, i] != RUNNING:
            continue
        free -= need
        budget -= tokens
        ints[MARK, i] = epoch
        if _is_decoding(ints[GENERATED, i], uncomputed):
            _add_decode(plan, sizes, i)
        else:
            _add_prefill(plan, sizes, i, tokens)
    while (sizes[WAIT_LEN] > 0 and budget > 0 and not preempted
           and sizes[NUM_RUNNING] < max_num_seqs):
        i = q.waiting[sizes[WAIT_HEAD]]
        tokens = min(ints[PROMPT, i] + ints[GENERATED, i] - ints[COMPUTED, i], budget)
        need = pages_for(ints[COMPUTED, i] + tokens, p.page_size)
        if need > free:
            break
        admit(ints, q)
        free -= need
        budget -= tokens
        _add_prefill(plan, sizes, i, tokens)


@kernel
def _newest_unscheduled(epoch, ints, q, fallback):
    """`QueuePolicy._newest_unscheduled`: the newest running request not yet in the plan."""
    for k in range(q.sizes[NUM_RUNNING] - 1, -1, -1):
        i = q.running[k]
        if ints[MARK, i] != epoch and i != fallback:
            return i
    return fallback


@inline_kernel
def _prefill_whole_prompts(token_budget, max_num_seqs, ints, p, q):
    """`PrefillFirstPolicy.schedule`'s first half: whole waiting prompts; returns whether any."""
    plan, sizes = q.plan, q.sizes
    budget, free = token_budget, p.counters[K.FREE]
    while sizes[WAIT_LEN] > 0 and sizes[NUM_RUNNING] < max_num_seqs:
        i = q.waiting[sizes[WAIT_HEAD]]
        tokens = ints[PROMPT, i] + ints[GENERATED, i] - ints[COMPUTED, i]
        need = pages_for(ints[COMPUTED, i] + tokens, p.page_size)
        if need > free or (sizes[NUM_PREFILL] > 0 and tokens > budget):
            break
        admit(ints, q)
        free -= need
        budget -= tokens
        _add_prefill(plan, sizes, i, tokens)
    return sizes[NUM_PREFILL] > 0


@inline_kernel
def _decode_all(ints, p, q):
    """`PrefillFirstPolicy._decode_all`: every running request decodes, newest preempted first."""
    running, order, plan, sizes = q.running, q.order, q.plan, q.sizes
    num_pages_of, tokens_per_page = p.num_pages_of, p.tokens_per_page
    free = p.counters[K.FREE]
    num_order = sizes[NUM_RUNNING]
    for k in range(num_order):  # a snapshot: victims leave `running`, not `order`
        order[k] = running[k]
    for k in range(num_order):
        i = order[k]
        if ints[STATUS, i] != RUNNING:
            continue
        slot = ints[SLOT, i]
        need = pages_for(ints[COMPUTED, i] + 1, tokens_per_page[slot]) - num_pages_of[slot]
        while need > free and ints[STATUS, i] == RUNNING:
            victim = running[sizes[NUM_RUNNING] - 1]
            free += num_pages_of[ints[SLOT, victim]]
            preempt(ints, p, q, victim)
        if ints[STATUS, i] == RUNNING:
            free -= need
            _add_decode(plan, sizes, i)
