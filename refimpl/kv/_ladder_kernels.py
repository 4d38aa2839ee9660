"""The pressure ladder's decision as a Numba kernel: the actions that would relieve the pool.

`plan_relief` is the one definition of `refimpl.kv.ladder.PressureLadder`'s rules (which step
fires, whom it picks, what it frees); `PressureLadder.relieve` then applies the actions, in
order, through `PagePool`, and a compiled serving loop holding the pool's arrays may call it
directly. It reads the pool's arrays (`_pool_kernels` describes them) and never writes them:
it projects the pool as it goes on its own copies, since each action changes what the next
can do (a page shared with a fork frees only when its last holder lets go; a quantized
request is not quantized again; the CPU tier fills). Candidates come as a struct of arrays.
"""

from __future__ import annotations

import numpy as np

from refimpl._numba import kernel
from refimpl.kv._pool_kernels import FREE, FREE_SLOT, RESIDENT, SHARED, SPILLED, SPILLED_SLOT
from refimpl.kv._tier_kernels import has_shared_page, is_quantized, pages_for, tier_has_room

QUEUE_NEW, CAP_LENGTH, QUANTIZE, SPILL, PREEMPT = range(5)  # step codes, `LadderStep`'s order
STEP, CANDIDATE, PAGES_FREED = range(3)  # columns of `plan_relief`'s `actions`
OUT_TOO_SMALL = -1  # `plan_relief`: the output arrays hold fewer than 2 actions per candidate


@kernel
def _sorted_by(order, key):
    """`order` stably re-sorted by `key[order]`, ascending."""
    return order[np.argsort(key[order], kind="mergesort")]


@kernel
def victim_orders(eligible, cappable, priorities, context_tokens, slack_s, arrival_s,
                  request_ids):
    """Candidate indices in each step's victim order, least valuable first.

    cap (`cappable` only): (-priority, -context_tokens, request_id); quantize and spill
    ("tolerant"): (-priority, -slack_s, -context_tokens, request_id); preempt ("newest"):
    (-priority, -arrival_s, -request_id). Stable sorts from the last key to the first give
    the lexicographic order with ties in candidate order, as Python's `sorted` does (slack_s
    and arrival_s must not be NaN). Returns (cap, tolerant, newest).
    """
    base = np.flatnonzero(eligible)
    cap = _sorted_by(np.flatnonzero(cappable), request_ids)
    cap = _sorted_by(cap, -context_tokens)
    tolerant = _sorted_by(base, request_ids)
    tolerant = _sorted_by(tolerant, -context_tokens)
    tolerant = _sorted_by(tolerant, -slack_s)
    newest = _sorted_by(base, -request_ids)
    newest = _sorted_by(newest, -arrival_s)
    return (_sorted_by(cap, -priorities), _sorted_by(tolerant, -priorities),
            _sorted_by(newest, -priorities))


@kernel
def _drop(refs, is_shared, tables, held, slot, keep):
    """Project the release of `slot`'s pages from index `keep` on; returns the pages freed.

    With no shared page in the pool every page is held once and all of them free; otherwise
    `refs` (a copy of the refcounts) counts down and only pages reaching 0 free.
    """
    freed = np.int64(held[slot] - keep)
    if is_shared:
        freed = 0
        for i in range(keep, held[slot]):
            page = tables[slot, i]
            refs[page] -= 1
            if refs[page] == 0:
                freed += 1
    held[slot] = keep
    return freed


@kernel
def _take_step(step, slot, refs, is_shared, tables, lengths, held, tpp, state, num_spilled,
               page_size, cpu_tier_pages, quantize_factor):
    """Project `step` on resident `slot`: (pages freed, pages moved to the CPU tier), or
    (-1, 0) where it does not apply."""
    if step == QUANTIZE:
        if is_quantized(tpp, slot, page_size):
            return np.int64(-1), np.int64(0)
        if is_shared and has_shared_page(refs, tables, held, slot):
            return np.int64(-1), np.int64(0)  # a fork reads these pages: not in place
        keep = pages_for(lengths[slot], tpp[slot] * quantize_factor)
        if keep == held[slot]:
            return np.int64(-1), np.int64(0)  # nothing to gain: it would free no page
        tpp[slot] *= quantize_factor
        return _drop(refs, is_shared, tables, held, slot, keep), np.int64(0)
    moved = np.int64(0)
    if step == SPILL:
        moved = np.int64(held[slot])
        if moved == 0 or not tier_has_room(num_spilled, moved, cpu_tier_pages):
            return np.int64(-1), np.int64(0)
        state[slot] = SPILLED_SLOT
    else:
        state[slot] = FREE_SLOT  # capped or preempted: it leaves the pool
    return _drop(refs, is_shared, tables, held, slot, 0), moved


@kernel
def plan_relief(refcount, counters, tables, num_pages_of, lengths, tokens_per_page, states,
                page_size, cpu_tier_pages, slots, priorities, context_tokens, slack_s,
                arrival_s, request_ids, cap_above, quantize_above, spill_above, preempt_above,
                low_priority, long_context_tokens, quantize_factor, need_pages, page_bytes,
                host_bandwidth_bytes_s, actions, transfer_s):
    """Write the ladder's actions into `actions` and `transfer_s`; returns their count.

    Candidate `c` is `slots[c]` (-1 when not in the pool), with its priority, context tokens,
    slack and arrival (seconds) and request id (int64/float64 arrays, one entry each). Each
    step (CAP_LENGTH, QUANTIZE, SPILL, PREEMPT) goes through its victims while utilization
    with `need_pages` more is above its threshold or fewer than `need_pages` pages are free.
    Only candidates resident now take part, and each leaves (cap, spill, preempt) at most
    once. Row `k` of `actions` (2 * len(slots), 3) int64 is [STEP, CANDIDATE, PAGES_FREED];
    `transfer_s[k]` is a spill's copy time (pages * page_bytes / host_bandwidth_bytes_s).
    Returns OUT_TOO_SMALL, writing nothing, when the outputs cannot hold every action.
    """
    n = slots.shape[0]
    if actions.shape[0] < 2 * n or transfer_s.shape[0] < 2 * n:
        return OUT_TOO_SMALL  # each candidate is quantized at most once and leaves once
    eligible = np.zeros(n, np.bool_)
    for c in range(n):
        eligible[c] = 0 <= slots[c] < states.shape[0] and states[slots[c]] == RESIDENT
    cappable = eligible & (priorities >= low_priority) & (context_tokens >= long_context_tokens)
    cap, tolerant, newest = victim_orders(eligible, cappable, priorities, context_tokens,
                                          slack_s, arrival_s, request_ids)
    # The projected pool: the per-slot arrays the actions change, and the refcounts when a
    # page is shared (without one, every page a request drops frees and none needs counting).
    is_shared = counters[SHARED] > 0
    refs = refcount.copy() if is_shared else refcount  # written only when `is_shared`
    held, tpp, state = num_pages_of.copy(), tokens_per_page.copy(), states.copy()
    num_free, num_spilled = counters[FREE], counters[SPILLED]
    num_pages = refcount.shape[0]
    thresholds = (cap_above, quantize_above, spill_above, preempt_above)
    count = 0
    for step in range(CAP_LENGTH, PREEMPT + 1):
        victims = cap if step == CAP_LENGTH else newest if step == PREEMPT else tolerant
        for c in victims:
            level = (num_pages - num_free + need_pages) / num_pages
            if level <= thresholds[step - CAP_LENGTH] and num_free >= need_pages:
                break
            slot = slots[c]
            if state[slot] != RESIDENT:
                continue  # already capped, spilled or preempted
            freed, moved = _take_step(step, slot, refs, is_shared, tables, lengths, held, tpp,
                                      state, num_spilled, page_size, cpu_tier_pages,
                                      quantize_factor)
            if freed < 0:
                continue  # this victim cannot take this step
            num_free += freed
            num_spilled += moved
            actions[count, STEP] = step
            actions[count, CANDIDATE] = c
            actions[count, PAGES_FREED] = freed
            transfer_s[count] = (moved * page_bytes / host_bandwidth_bytes_s if step == SPILL
                                 else 0.0)
            count += 1
    return count
