"""Prefill-first: a step is all prefill whenever a prompt waits, else all decode.

Mirrors vLLM v0's default scheduler before chunked prefill (and Orca-style iteration-level
scheduling; Vidur calls it `vllm`): waiting prompts are prefilled whole, in arrival order,
batched up to the token budget (a prompt longer than the budget runs alone); only when no
prompt can start do the running requests decode, all together. Prompts therefore stall
decodes: the TPOT cost that chunked prefill was invented to remove. KV exhaustion during
decode preempts the most recently started request. A prompt starts only if it leaves vLLM's
watermark of pages free (refimpl.sched.policies.budget).
"""

from __future__ import annotations

from refimpl._numba import inline_kernel
from refimpl.kv import manager as kvm
from refimpl.kv import prefix_facade as kvp
from refimpl.sched.plan import NUM_PREFILL, add_decode, add_preempt, add_prefill
from refimpl.sched.policies.budget import watermark_pages
from refimpl.sched.policy import PREFILL_FIRST, BuiltinPolicy
from refimpl.sched.queues import NUM_RUNNING, WAIT_LEN, waiting_at
from refimpl.sched.table import COMPUTED, GENERATED, PROMPT

__all__ = ["PrefillFirstPolicy", "plan_prefill_first"]


@inline_kernel
def plan_prefill_first(token_budget, max_num_seqs, ints, kv, q, entries, sizes):
    """One prefill-first step: whole waiting prompts if any can start, else every decode."""
    budget, free = token_budget, kvm.num_free_pages(kv)
    reserve = watermark_pages(kv)
    num_started = 0
    while (num_started < q.sizes[WAIT_LEN]
           and q.sizes[NUM_RUNNING] + num_started < max_num_seqs):
        i = waiting_at(q, num_started)
        start, pinned = ints[COMPUTED, i], 0
        if kv.prefix.enabled:  # (an inlined call handed the KV state costs: test first)
            start, pinned = kvp.prefix_start(kv, i, ints[COMPUTED, i], ints[PROMPT, i])
        tokens = ints[PROMPT, i] + ints[GENERATED, i] - start  # after a prefix-cache hit
        need = kvp.pages_to_start(kv, i, ints[COMPUTED, i], start, pinned, tokens)
        held_back = reserve if q.sizes[NUM_RUNNING] + num_started > 0 else 0
        if need > free - held_back or (sizes[NUM_PREFILL] > 0 and tokens > budget):
            break
        num_started += 1
        free -= need
        budget -= tokens
        add_prefill(entries, sizes, i, tokens)
    if sizes[NUM_PREFILL] > 0:
        return
    # No prompt could start: every running request decodes (the budget does not cap decodes
    # here, as in vLLM v0 where max_num_seqs bounds the decode batch); while the pages do not
    # fit, the newest not yet preempted is (victims come from the back: never one already in).
    last = q.sizes[NUM_RUNNING] - 1
    for k in range(q.sizes[NUM_RUNNING]):
        if k > last:
            break
        i = q.running[k]
        need = kvm.pages_needed(kv, i, ints[COMPUTED, i], 1)
        while need > free and k <= last:
            victim = q.running[last]
            free += kvm.pages_released(kv, victim)  # (shared pages stay)
            add_preempt(entries, sizes, victim)
            last -= 1
        if k <= last:
            free -= need
            add_decode(entries, sizes, i)


class PrefillFirstPolicy(BuiltinPolicy):
    """Whole-prompt prefills take priority over decodes."""

    name = "prefill-first"
    code = PREFILL_FIRST
