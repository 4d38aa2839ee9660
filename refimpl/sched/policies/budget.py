"""The token-budget step that vLLM v1 and Sarathi-Serve share, compiled: the one definition.

Each step has a budget of `token_budget` tokens. Running requests are visited in the order the
policy gives; each gets the tokens it still needs (one for a decode, the rest of its prompt
otherwise), capped by what is left of the budget (long prompts are chunked). Where its pages
do not fit, the newest running request not yet scheduled is preempted (vLLM's choice: the
least work is lost), or failing that the request itself. Then waiting requests start in
queue order (arrival, or the policy's own: refimpl.sched.queues) until one does not fit (no
skipping ahead, but past those the decision itself ended), and none starts in a step that
preempted, nor where its pages would leave fewer than the watermark free (vLLM's block
manager keeps `watermark=0.01` of the blocks back from new requests, so that running ones
can grow without preempting: `vllm/core/block_manager.py`, `can_allocate`); a waiting
request's prompt starts after its cached prefix where a prefix cache holds one. With nothing
running the whole pool may be taken: there is nothing to grow, and vLLM's alternative,
rejecting a prompt that cannot fit beside the watermark, would leave it waiting forever here.
The decision writes a plan and marks in the queues' scratch; it changes no request.
"""

from __future__ import annotations

from refimpl._numba import inline_kernel, kernel
from refimpl.kv import manager as kvm
from refimpl.kv import prefix_facade as kvp
from refimpl.sched.plan import add_decode, add_preempt, add_prefill
from refimpl.sched.queues import NUM_RUNNING, WAIT_LEN, waiting_at
from refimpl.sched.table import COMPUTED, GENERATED, PROMPT

__all__ = ["WATERMARK", "budgeted_step", "is_decoding", "uncomputed", "watermark_pages"]

WATERMARK = 0.01  # vLLM's default share of KV blocks new requests may not take


@inline_kernel
def watermark_pages(kv):
    """Pages a new request must leave free (vLLM: int(watermark * num_gpu_blocks))."""
    return int(WATERMARK * kv.num_pages)


@inline_kernel
def uncomputed(ints, i):
    """Tokens request `i` could still compute before its next output token."""
    return ints[PROMPT, i] + ints[GENERATED, i] - ints[COMPUTED, i]


@inline_kernel
def is_decoding(ints, i):
    """Whether only request `i`'s newest output token is left to compute (a decode)."""
    return ints[GENERATED, i] > 0 and uncomputed(ints, i) == 1


@kernel
def newest_unscheduled(q, epoch, fallback):
    """The newest running request this decision neither scheduled nor preempted."""
    for k in range(q.sizes[NUM_RUNNING] - 1, -1, -1):
        i = q.running[k]
        if q.marks[i] != epoch and q.marks[i] != -epoch and i != fallback:
            return i
    return fallback


@kernel
def budgeted_step(token_budget, max_num_seqs, epoch, num_order, ints, kv, q, entries, sizes):
    """Plan running requests in `q.order[:num_order]`, then waiting ones (module doc)."""
    order, marks = q.order, q.marks
    budget, free = token_budget, kvm.num_free_pages(kv)
    num_preempted = 0
    for k in range(num_order):
        if budget == 0:
            break
        i = order[k]
        if marks[i] == -epoch:  # preempted for an earlier one
            continue
        tokens = min(uncomputed(ints, i), budget)
        need = kvm.pages_needed(kv, i, ints[COMPUTED, i], tokens)
        while need > free:
            victim = newest_unscheduled(q, epoch, i)
            free += kvm.pages_released(kv, victim)  # (shared pages stay)
            add_preempt(entries, sizes, victim)
            marks[victim] = -epoch
            num_preempted += 1
            if victim == i:
                break
        if marks[i] == -epoch:
            continue
        free -= need
        budget -= tokens
        marks[i] = epoch
        if is_decoding(ints, i):
            add_decode(entries, sizes, i)
        else:
            add_prefill(entries, sizes, i, tokens)
    num_running = q.sizes[NUM_RUNNING] - num_preempted
    reserve = watermark_pages(kv)
    k = 0
    while (k < q.sizes[WAIT_LEN] and budget > 0 and num_preempted == 0
           and num_running < max_num_seqs):
        i = waiting_at(q, k)
        k += 1
        if marks[i] == -epoch:  # ended by this decision (edf's TTFT guard)
            continue
        start, pinned = ints[COMPUTED, i], 0
        if kv.prefix.enabled:  # a prefix-cache hit: less to compute, and its cached pages
            start, pinned = kvp.prefix_start(kv, i, ints[COMPUTED, i], ints[PROMPT, i])
        tokens = min(ints[PROMPT, i] + ints[GENERATED, i] - start, budget)
        need = kvp.pages_to_start(kv, i, ints[COMPUTED, i], start, pinned, tokens)
        if need > free - (reserve if num_running > 0 else 0):
            break
        num_running += 1
        free -= need
        budget -= tokens
        add_prefill(entries, sizes, i, tokens)
