"""The `slo` policy's whole tick compiled: `plan_slo`, and its hooks `slo_add` and `slo_update`.

The same decision as `SLOPolicy.schedule` (refimpl.sched.slo.policy, the oracle it is tested
against), over arrays the loop passes on (`SLOState`): the prefill queue as an indexed binary
heap over request rows, keyed as `PrefillQueue` (next-token deadline, prompt tokens left,
priority, arrival, request id, row); the decode set as slot arrays with `DecodeSet`'s slot
assignment (a LIFO stack of freed slots, fresh slots in increasing order: knapsack ties go to
the lower slot); the spilled rows in spill order; the ladder's holding flag and counts; the
parameters, the decode-cost fit and the cost table's kernel picks, looked up once at bind.

The Python policy drafts a tick on views and adopts the draft once the plan is committed. The
loop commits every plan that does something, and an empty plan carries no move of the queues
(only the ladder's holding flag and counts, which stand either way), so the compiled decision
takes its own queue moves at once; the KV cache it plans against is a projection kept in
per-row overlay arrays stamped with the tick's epoch (refimpl.kv.projection's rules, no page
shared: the loop never forks). The step time is the compiled roofline, so the policy runs
here only with a roofline executor; any other step model runs the Python policy.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from refimpl._numba import inline_kernel, kernel
from refimpl.costmodel.step import roofline_step_s
from refimpl.kv import _ladder_kernels as LK
from refimpl.kv._pool_kernels import FREE, FREE_SLOT, RESIDENT, SPILLED, SPILLED_SLOT
from refimpl.sched import plan as p
from refimpl.sched.slo.knapsack import select_decode_batch, tick_inputs
from refimpl.sched.table import (
    ARRIVAL,
    COMPUTED,
    FINISHED,
    GENERATED,
    LAST_TOKEN,
    LENGTH_CAPPED,
    PRIORITY,
    PROMPT,
    REQUEST_ID,
    STATUS,
    TPOT_SLO,
    TTFT_SLO,
    WEIGHT,
)

__all__ = ["SLOState", "new_slo_state", "no_slo_state", "plan_slo", "slo_add", "slo_update"]

MAX_HEADS = 64  # refimpl.sched.slo.prefill.MAX_HEADS
# Entries of `SLOState.ip` (int parameters) and `fp` (float parameters).
(MAX_BATCH, MIN_CHUNK, MAX_CHUNK, FIRST_BUCKET, VALUE_MODE, HAS_LADDER, LOW_PRIORITY,
 LONG_CONTEXT, QUANTIZE_FACTOR, HAS_PICKS) = range(10)
NUM_IP = 10
(MIN_TICK, MAX_TICK, HORIZON, LATENESS, WATERMARK, QUEUE_NEW_ABOVE, CAP_ABOVE,
 QUANTIZE_ABOVE, SPILL_ABOVE, PREEMPT_ABOVE, BASE_S, C_SEQ, C_KV, LAST_BUDGET) = range(14)
NUM_FP = 14
# Entries of `SLOState.st` (the state's counters); COUNTS.. are the ladder's, by step code.
(HEAP_LEN, DEC_HI, DEC_COUNT, FREE_TOP, SPILL_HEAD, SPILL_LEN, HOLDING, EPOCH, PJ_FREE, PJ_CPU,
 PJ_TOUCHED, COUNTS) = range(12)
NUM_ST = COUNTS + 5
# Overlay flags of the projection.
F_FREED, F_PREEMPTED, F_PAGES, F_TPP, F_STATE = 1, 2, 4, 8, 16

_step_s = inline_kernel(roofline_step_s)


class SLOState(NamedTuple):
    """The compiled `slo` policy's parameters and state (module doc); per-row arrays are
    indexed by request row, per-slot ones by decode slot."""

    ip: np.ndarray  # (NUM_IP,) int64
    fp: np.ndarray  # (NUM_FP,) float64
    st: np.ndarray  # (NUM_ST,) int64
    heap: np.ndarray  # rows in heap order
    pos: np.ndarray  # per row: its heap position, -1 when not queued
    key_deadline: np.ndarray  # per row: the deadline of its key (float64)
    key_left: np.ndarray  # per row: the prompt tokens left of its key
    rows: np.ndarray  # per slot: the row, -1 for none
    deadline_s: np.ndarray  # per slot
    context: np.ndarray  # per slot
    weight: np.ndarray  # per slot
    active: np.ndarray  # per slot (bool)
    slot_of: np.ndarray  # per row: its decode slot, -1 for none
    free: np.ndarray  # the stack of freed slots
    spilled: np.ndarray  # a ring of rows in spill order
    pj_epoch: np.ndarray  # per row: the tick whose overlay it holds
    pj_flags: np.ndarray  # per row
    pj_pages: np.ndarray  # per row
    pj_tpp: np.ndarray  # per row
    pj_state: np.ndarray  # per row
    pj_touched: np.ndarray  # rows with an overlay this tick
    out: np.ndarray  # per slot: the knapsack's output
    stats: np.ndarray  # (2,) the knapsack's stats
    frontier: np.ndarray  # the heap walk's frontier (heap positions)
    pick_decode: np.ndarray  # (max_batch + 1, buckets) kernel code per (batch, bucket)
    pick_prefill: np.ndarray  # (64,) kernel code per power of two of the chunk's tokens


def new_slo_state(n: int, ip: np.ndarray, fp: np.ndarray, pick_decode: np.ndarray,
                  pick_prefill: np.ndarray) -> SLOState:
    """An empty state for a run of `n` requests."""
    n = max(n, 1)

    def ints(fill=0):
        return np.full(n, fill, np.int64)

    return SLOState(ip.astype(np.int64), fp.astype(np.float64), np.zeros(NUM_ST, np.int64),
                    ints(), ints(-1), np.zeros(n), ints(), ints(-1), np.zeros(n), ints(),
                    np.zeros(n), np.zeros(n, np.bool_), ints(-1), ints(), ints(), ints(-1),
                    ints(), ints(), ints(), ints(), ints(), ints(), np.zeros(2, np.int64),
                    np.zeros(n + 2, np.int64), pick_decode.astype(np.int64),
                    pick_prefill.astype(np.int64))


def no_slo_state() -> SLOState:
    """A tiny state for runs of other policies (the loop's signature is the same)."""
    return new_slo_state(1, np.zeros(NUM_IP), np.zeros(NUM_FP), np.zeros((1, 1)),
                         np.zeros(1))


# ---- the request table ---------------------------------------------------------------------
@inline_kernel
def _deadline(ints, floats, i):
    """Request `i`'s next-token deadline (its TTFT deadline before the first token)."""
    if ints[GENERATED, i] == 0:
        return floats[ARRIVAL, i] + floats[TTFT_SLO, i]
    return floats[LAST_TOKEN, i] + floats[TPOT_SLO, i]


# ---- the prefill queue: an indexed binary heap --------------------------------------------
@inline_kernel
def _before(a, b, key_deadline, key_left, ints, floats):
    """Whether row `a`'s key comes before row `b`'s."""
    if key_deadline[a] != key_deadline[b]:
        return key_deadline[a] < key_deadline[b]
    if key_left[a] != key_left[b]:
        return key_left[a] < key_left[b]
    if ints[PRIORITY, a] != ints[PRIORITY, b]:
        return ints[PRIORITY, a] < ints[PRIORITY, b]
    if floats[ARRIVAL, a] != floats[ARRIVAL, b]:
        return floats[ARRIVAL, a] < floats[ARRIVAL, b]
    if ints[REQUEST_ID, a] != ints[REQUEST_ID, b]:
        return ints[REQUEST_ID, a] < ints[REQUEST_ID, b]
    return a < b


@kernel
def _sift(heap, pos, key_deadline, key_left, ints, floats, size, k):
    """Restore the heap order around position `k` (up, then down)."""
    i = heap[k]
    while k > 0:
        parent = (k - 1) // 2
        j = heap[parent]
        if not _before(i, j, key_deadline, key_left, ints, floats):
            break
        heap[k], pos[j] = j, k
        k = parent
    while True:
        child = 2 * k + 1
        if child >= size:
            break
        if child + 1 < size and _before(heap[child + 1], heap[child], key_deadline, key_left,
                                        ints, floats):
            child += 1
        j = heap[child]
        if not _before(j, i, key_deadline, key_left, ints, floats):
            break
        heap[k], pos[j] = j, k
        k = child
    heap[k], pos[i] = i, k


@inline_kernel
def _push(s, ints, floats, i, num_computed):
    """Queue row `i` under its key with `num_computed` tokens cached."""
    s.key_deadline[i] = _deadline(ints, floats, i)
    s.key_left[i] = ints[PROMPT, i] + ints[GENERATED, i] - num_computed
    size = s.st[HEAP_LEN]
    s.heap[size] = i
    s.pos[i] = size
    s.st[HEAP_LEN] = size + 1
    _sift(s.heap, s.pos, s.key_deadline, s.key_left, ints, floats, size + 1, size)


@inline_kernel
def _remove(s, ints, floats, i):
    """Take row `i` out of the queue."""
    heap, pos = s.heap, s.pos
    k = pos[i]
    size = s.st[HEAP_LEN] - 1
    s.st[HEAP_LEN] = size
    pos[i] = -1
    if k == size:
        return
    heap[k] = heap[size]
    pos[heap[k]] = k
    _sift(heap, pos, s.key_deadline, s.key_left, ints, floats, size, k)


# ---- the decode set ------------------------------------------------------------------------
@inline_kernel
def _decode_add(s, i, deadline_s, context, weight):
    """Row `i` decodes from now on, in the slot `DecodeSet.add` gives it."""
    st = s.st
    if st[FREE_TOP] > 0:
        st[FREE_TOP] -= 1
        slot = s.free[st[FREE_TOP]]
    else:
        slot = st[DEC_HI]
        st[DEC_HI] += 1
    s.slot_of[i] = slot
    s.rows[slot] = i
    s.deadline_s[slot] = deadline_s
    s.context[slot] = context
    s.weight[slot] = weight
    s.active[slot] = True
    st[DEC_COUNT] += 1


@inline_kernel
def _decode_remove(s, i):
    """Row `i` stops decoding; its slot is the next one given out."""
    st = s.st
    slot = s.slot_of[i]
    s.slot_of[i] = -1
    s.rows[slot] = -1
    s.active[slot] = False
    s.free[st[FREE_TOP]] = slot
    st[FREE_TOP] += 1
    st[DEC_COUNT] -= 1


# ---- the KV projection (refimpl.kv.projection.Projection, no page shared) -------------------
@inline_kernel
def _flags(s, i):
    return s.pj_flags[i] if s.pj_epoch[i] == s.st[EPOCH] else 0


@inline_kernel
def _touch(s, i):
    """Row `i` gets an overlay this tick (empty at first)."""
    st = s.st
    if s.pj_epoch[i] != st[EPOCH]:
        s.pj_epoch[i] = st[EPOCH]
        s.pj_flags[i] = 0
        s.pj_touched[st[PJ_TOUCHED]] = i
        st[PJ_TOUCHED] += 1


@inline_kernel
def _holds_slot(s, kv, i):
    return (_flags(s, i) & F_FREED) == 0 and kv.slot_of[i] >= 0


@inline_kernel
def _pages_held(s, kv, i):
    if not _holds_slot(s, kv, i):
        return 0
    if _flags(s, i) & F_PAGES:
        return s.pj_pages[i]
    return kv.num_pages_of[kv.slot_of[i]]


@inline_kernel
def _num_computed(s, ints, i):
    return 0 if _flags(s, i) & F_PREEMPTED else ints[COMPUTED, i]


@inline_kernel
def _is_resident(s, kv, i):
    if not _holds_slot(s, kv, i):
        return False
    state = s.pj_state[i] if _flags(s, i) & F_STATE else kv.states[kv.slot_of[i]]
    return state == RESIDENT


@inline_kernel
def _tokens_per_page(s, kv, i):
    if _flags(s, i) & F_TPP:
        return s.pj_tpp[i]
    return kv.tokens_per_page[kv.slot_of[i]]


@inline_kernel
def _release(s, kv, i):
    """Row `i` gives up all its KV; returns the pages freed."""
    resident = _is_resident(s, kv, i)
    freed = _pages_held(s, kv, i) if resident else 0
    if _holds_slot(s, kv, i) and not resident:
        s.st[PJ_CPU] -= _pages_held(s, kv, i)
    s.st[PJ_FREE] += freed
    _touch(s, i)
    s.pj_flags[i] |= F_FREED
    return freed


@inline_kernel
def _preempt_kv(s, kv, i):
    freed = _release(s, kv, i)
    s.pj_flags[i] |= F_PREEMPTED
    return freed


@inline_kernel
def _quantize_kv(s, kv, i, factor):
    tpp = _tokens_per_page(s, kv, i) * factor
    kept = -(-kv.lengths[kv.slot_of[i]] // tpp)
    freed = _pages_held(s, kv, i) - kept
    _touch(s, i)
    s.pj_flags[i] |= F_PAGES | F_TPP
    s.pj_pages[i], s.pj_tpp[i] = kept, tpp
    s.st[PJ_FREE] += freed
    return freed


@inline_kernel
def _spill_kv(s, kv, i):
    moved = _pages_held(s, kv, i)
    s.st[PJ_FREE] += moved
    s.st[PJ_CPU] += moved
    _touch(s, i)
    s.pj_flags[i] |= F_STATE
    s.pj_state[i] = SPILLED_SLOT
    return moved


@inline_kernel
def _restore_kv(s, kv, i):
    taken = -(-kv.lengths[kv.slot_of[i]] // _tokens_per_page(s, kv, i))
    s.st[PJ_CPU] -= _pages_held(s, kv, i)
    _touch(s, i)
    s.pj_flags[i] |= F_PAGES | F_STATE
    s.pj_pages[i], s.pj_state[i] = taken, RESIDENT
    s.st[PJ_FREE] -= taken
    return taken


@kernel
def _pool_arrays(s, kv):
    """(counters, num_pages_of, tokens_per_page, states) as the plan leaves them."""
    st = s.st
    if st[PJ_TOUCHED] == 0:
        return kv.counters, kv.num_pages_of, kv.tokens_per_page, kv.states
    held, tpp, states = kv.num_pages_of.copy(), kv.tokens_per_page.copy(), kv.states.copy()
    for k in range(st[PJ_TOUCHED]):
        i = s.pj_touched[k]
        flags, slot = s.pj_flags[i], kv.slot_of[i]
        if flags & F_PAGES:
            held[slot] = s.pj_pages[i]
        if flags & F_TPP:
            tpp[slot] = s.pj_tpp[i]
        if flags & F_STATE:
            states[slot] = s.pj_state[i]
        if flags & F_FREED and slot >= 0:
            held[slot], states[slot] = 0, FREE_SLOT
    counters = kv.counters.copy()
    counters[FREE] = st[PJ_FREE]
    counters[SPILLED] = st[PJ_CPU]
    return counters, held, tpp, states


# ---- the tick's moves ------------------------------------------------------------------------
@inline_kernel
def _requeue(s, ints, floats, entries, sizes, i):
    """Row `i` is preempted: it recomputes from scratch, queued under its new key."""
    p.add_preempt(entries, sizes, i)
    _push(s, ints, floats, i, 0)


@inline_kernel
def _preempt_decoding(s, ints, floats, kv, entries, sizes, i, freed):
    _decode_remove(s, i)
    if not freed:
        _preempt_kv(s, kv, i)
    _requeue(s, ints, floats, entries, sizes, i)


@kernel
def _restore_in(s, ints, floats, entries, sizes, i):
    """Spilled row `i` (the first in the tier) came back: it decodes."""
    st = s.st
    st[SPILL_HEAD] = (st[SPILL_HEAD] + 1) % s.spilled.shape[0]
    st[SPILL_LEN] -= 1
    num_spill = sizes[p.NUM_SPILL]
    at = -1
    for k in range(num_spill):
        if entries[p.SPILL, k] == i:
            at = k
            break
    if at >= 0:  # spilled earlier in this very plan: the two cancel out
        for k in range(at, num_spill - 1):
            entries[p.SPILL, k] = entries[p.SPILL, k + 1]
        sizes[p.NUM_SPILL] = num_spill - 1
    else:
        p.add_restore(entries, sizes, i)
    _decode_add(s, i, _deadline(ints, floats, i), ints[COMPUTED, i], floats[WEIGHT, i])


@kernel
def _relieve(s, ints, floats, kv, entries, sizes, now):
    """`SLOPolicy._relieve_pressure`: restores below the mark, else the ladder's moves."""
    st, fp, ip = s.st, s.fp, s.ip
    num_pages = kv.num_pages
    if (num_pages - st[PJ_FREE]) / num_pages <= fp[QUEUE_NEW_ABOVE]:
        limit = fp[QUEUE_NEW_ABOVE]
        while st[SPILL_LEN] > 0:
            i = s.spilled[st[SPILL_HEAD]]
            if (num_pages - st[PJ_FREE] + _pages_held(s, kv, i)) / num_pages > limit:
                break
            _restore_kv(s, kv, i)
            _restore_in(s, ints, floats, entries, sizes, i)
        return
    if st[HOLDING] == 0:
        st[HOLDING] = 1
        st[COUNTS + LK.QUEUE_NEW] += 1
    m = st[DEC_COUNT]
    if m == 0:
        return
    rows = np.empty(m, np.int64)
    c = 0
    for slot in range(st[DEC_HI]):
        if s.active[slot]:
            rows[c] = s.rows[slot]
            c += 1
    slots, priorities, computed, ids = (np.empty(m, np.int64), np.empty(m, np.int64),
                                        np.empty(m, np.int64), np.empty(m, np.int64))
    slack, arrival = np.empty(m), np.empty(m)
    for c in range(m):
        i = rows[c]
        slots[c] = kv.slot_of[i] if _holds_slot(s, kv, i) else -1
        priorities[c], computed[c], ids[c] = ints[PRIORITY, i], ints[COMPUTED, i], ints[
            REQUEST_ID, i]
        slack[c] = _deadline(ints, floats, i) - now
        arrival[c] = floats[ARRIVAL, i]
    counters, held, tpp, states = _pool_arrays(s, kv)
    actions = np.empty((2 * m, 3), np.int64)
    transfer_s = np.empty(2 * m)
    factor = ip[QUANTIZE_FACTOR]
    count = LK.plan_relief(kv.refcount, counters, kv.tables, held, kv.lengths, tpp, states,
                           kv.page_size, kv.cpu_tier_pages, slots, priorities, computed, slack,
                           arrival, ids, fp[CAP_ABOVE], fp[QUANTIZE_ABOVE], fp[SPILL_ABOVE],
                           fp[PREEMPT_ABOVE], ip[LOW_PRIORITY], ip[LONG_CONTEXT], factor, 0, 1,
                           1.0, actions, transfer_s)
    for k in range(count):
        step, i = actions[k, LK.STEP], rows[actions[k, LK.CANDIDATE]]
        if step == LK.QUANTIZE:
            _quantize_kv(s, kv, i, factor)
            p.add_quantize(entries, sizes, i, factor)
        elif step == LK.SPILL:
            _spill_kv(s, kv, i)
        elif step == LK.PREEMPT:
            _preempt_kv(s, kv, i)
        else:
            _release(s, kv, i)
        st[COUNTS + step] += 1
    for k in range(count):
        if actions[k, LK.STEP] == LK.CAP_LENGTH:
            i = rows[actions[k, LK.CANDIDATE]]
            _decode_remove(s, i)
            p.add_finish(entries, sizes, i, LENGTH_CAPPED)
    for k in range(count):
        if actions[k, LK.STEP] == LK.PREEMPT:
            _preempt_decoding(s, ints, floats, kv, entries, sizes,
                              rows[actions[k, LK.CANDIDATE]], True)
    for k in range(count):
        if actions[k, LK.STEP] == LK.SPILL:
            i = rows[actions[k, LK.CANDIDATE]]
            _decode_remove(s, i)
            p.add_spill(entries, sizes, i)
            ring = s.spilled.shape[0]
            s.spilled[(st[SPILL_HEAD] + st[SPILL_LEN]) % ring] = i
            st[SPILL_LEN] += 1


@kernel
def _decode_victim(s, ints, floats, count):
    """The least important decoding row outside the batch `s.out[:count]`, -1 for none."""
    hi = s.st[DEC_HI]
    exclude = np.zeros(hi, np.bool_)
    for k in range(count):
        exclude[s.out[k]] = True
    best, best_slot = -1, -1
    for slot in range(hi):
        if not s.active[slot] or exclude[slot]:
            continue
        i = s.rows[slot]
        if best >= 0:
            b = best
            if ints[PRIORITY, i] != ints[PRIORITY, b]:
                if ints[PRIORITY, i] < ints[PRIORITY, b]:
                    continue
            elif floats[ARRIVAL, i] != floats[ARRIVAL, b]:
                if floats[ARRIVAL, i] < floats[ARRIVAL, b]:
                    continue
            elif slot < best_slot:
                continue
        best, best_slot = i, slot
    return best


@kernel
def _choose_decodes(s, ints, floats, kv, entries, sizes, tick_s, window_s, est_s, buckets,
                    kv_need, now):
    """`choose_decodes`: (batch size in `s.out`, pages it takes)."""
    st, fp, ip = s.st, s.fp, s.ip
    if st[DEC_COUNT] == 0:
        return 0, 0
    horizon_s = fp[HORIZON] * tick_s
    window_s = max(window_s, 0.0)
    stats = s.stats
    while True:
        hi = st[DEC_HI]
        count = select_decode_batch(s.deadline_s[:hi], est_s, s.weight[:hi], buckets, kv_need,
                                    s.active[:hi], now, horizon_s, window_s, st[PJ_FREE],
                                    ip[MAX_BATCH], ip[VALUE_MODE], fp[LATENESS], s.out, stats)
        if stats[1] <= st[PJ_FREE] - stats[0]:
            return count, stats[0]
        victim = _decode_victim(s, ints, floats, count)
        if victim < 0:
            return count, stats[0]
        _preempt_decoding(s, ints, floats, kv, entries, sizes, victim, False)


@inline_kernel
def _frontier_push(frontier, size, at, heap, key_deadline, key_left, ints, floats):
    """Push heap position `at` on the walk's frontier (a heap of positions); returns the size."""
    k = size
    i = heap[at]
    while k > 0:
        parent = (k - 1) // 2
        if not _before(i, heap[frontier[parent]], key_deadline, key_left, ints, floats):
            break
        frontier[k] = frontier[parent]
        k = parent
    frontier[k] = at
    return size + 1


@inline_kernel
def _frontier_pop(frontier, size, heap, key_deadline, key_left, ints, floats):
    """Pop the frontier's first position; returns it (the size drops by one)."""
    top = frontier[0]
    size -= 1
    last = frontier[size]
    i = heap[last]
    k = 0
    while True:
        child = 2 * k + 1
        if child >= size:
            break
        if child + 1 < size and _before(heap[frontier[child + 1]], heap[frontier[child]],
                                        key_deadline, key_left, ints, floats):
            child += 1
        if not _before(heap[frontier[child]], i, key_deadline, key_left, ints, floats):
            break
        frontier[k] = frontier[child]
        k = child
    if size > 0:
        frontier[k] = last
    return top


@kernel
def _choose_prefill(s, coefficients, ints, floats, kv, entries, sizes, budget_s, num_decode,
                    decode_context, pages_left, hold_new):
    """`choose_prefill`: the prompt chunks, written to the plan; returns how many."""
    st, fp, ip = s.st, s.fp, s.ip
    num_pages = kv.num_pages
    held_back = hold_new and (num_pages - st[PJ_FREE]) / num_pages > fp[WATERMARK]
    page_size, max_chunk = kv.page_size, ip[MAX_CHUNK]
    heap, key_deadline, key_left, frontier = s.heap, s.key_deadline, s.key_left, s.frontier
    size = st[HEAP_LEN]
    tokens = pairs = pages = 0
    looked = num_chunks = 0
    num_frontier = 0
    if size > 0:
        num_frontier = _frontier_push(frontier, 0, 0, heap, key_deadline, key_left, ints,
                                      floats)
    while num_frontier > 0:
        at = _frontier_pop(frontier, num_frontier, heap, key_deadline, key_left, ints, floats)
        num_frontier -= 1
        for child in (2 * at + 1, 2 * at + 2):
            if child < size:
                num_frontier = _frontier_push(frontier, num_frontier, child, heap,
                                              key_deadline, key_left, ints, floats)
        i = heap[at]
        if tokens >= max_chunk or looked >= MAX_HEADS:
            break
        looked += 1
        if held_back and not _holds_slot(s, kv, i):
            continue
        computed, held = _num_computed(s, ints, i), _pages_held(s, kv, i)
        uncomputed = ints[PROMPT, i] + ints[GENERATED, i] - computed
        low, high = 0, min(uncomputed, max_chunk - tokens)
        cut_short = not _fits(coefficients, high, tokens, pairs, pages, computed, held,
                              page_size, pages_left, num_decode, decode_context, budget_s)
        if cut_short:
            while low < high:
                mid = (low + high + 1) // 2
                if _fits(coefficients, mid, tokens, pairs, pages, computed, held, page_size,
                         pages_left, num_decode, decode_context, budget_s):
                    low = mid
                else:
                    high = mid - 1
        if high == 0:
            break
        p.add_prefill(entries, sizes, i, high)
        num_chunks += 1
        tokens += high
        pairs += high * computed + high * (high + 1) // 2
        pages += -(-(computed + high) // page_size) - held
        if cut_short:
            break
    return num_chunks


@inline_kernel
def _fits(coefficients, take, tokens, pairs, pages, computed, held, page_size, pages_left,
          num_decode, decode_context, budget_s):
    more_pairs = take * computed + take * (take + 1) // 2
    more_pages = -(-(computed + take) // page_size) - held
    return (pages + more_pages <= pages_left
            and _step_s(coefficients, tokens + take, pairs + more_pairs, num_decode,
                        decode_context) <= budget_s)


@kernel
def _partial_victim(s, ints, kv):
    """`partial_prefill_victim`: the last-queued prompt holding pages, -1 unless two do."""
    holders, best = 0, -1
    for k in range(s.st[HEAP_LEN]):
        i = s.heap[k]
        if not _holds_slot(s, kv, i):
            continue
        holders += 1
        if best >= 0:
            b = best
            if s.key_deadline[i] != s.key_deadline[b]:
                if s.key_deadline[i] < s.key_deadline[b]:
                    continue
            elif ints[REQUEST_ID, i] != ints[REQUEST_ID, b]:
                if ints[REQUEST_ID, i] < ints[REQUEST_ID, b]:
                    continue
            elif i < b:
                continue
        best = i
    return best if holders >= 2 else -1


@kernel
def _pick_kernels(s, buckets, count, entries, sizes, kernels, prefill_tokens):
    """The cost table's picks: one per decode bucket (ascending), then the chunk's."""
    out = s.out
    if count > 0:
        width = s.pick_decode.shape[1]
        counts = np.zeros(width, np.int64)
        for k in range(count):
            counts[min(buckets[out[k]], width - 1)] += 1
        for bucket in range(width):
            if counts[bucket] > 0:
                p.add_kernel(kernels, sizes, s.pick_decode[counts[bucket], bucket])
    if prefill_tokens > 0:
        bits = 0
        while (1 << bits) < prefill_tokens:
            bits += 1
        p.add_kernel(kernels, sizes, s.pick_prefill[bits])


@kernel
def plan_slo(s, coefficients, ints, floats, kv, entries, sizes, kernels, now):
    """`SLOPolicy.schedule` (the module doc): fill the plan, taking the tick's own moves."""
    st, fp, ip = s.st, s.fp, s.ip
    st[EPOCH] += 1
    st[PJ_FREE], st[PJ_CPU], st[PJ_TOUCHED] = kv.counters[FREE], kv.counters[SPILLED], 0
    base_s = fp[BASE_S]
    min_chunk = ip[MIN_CHUNK]
    while True:
        if ip[HAS_LADDER]:
            _relieve(s, ints, floats, kv, entries, sizes, now)
        waiting = st[HEAP_LEN] > 0
        hi = st[DEC_HI]
        est_s, buckets, kv_need, tick_s, urgent_s = tick_inputs(
            s.context[:hi], s.deadline_s[:hi], s.active[:hi], now, fp[MIN_TICK], fp[MAX_TICK],
            fp[HORIZON], fp[C_SEQ], fp[C_KV], kv.page_size, ip[FIRST_BUCKET])
        reserve_s = (_step_s(coefficients, min_chunk, min_chunk * (min_chunk + 1) // 2, 0, 0)
                     - base_s) if waiting else 0.0
        budget_s = max(tick_s, base_s + urgent_s * (1 + 1e-9) + reserve_s)
        window_s = budget_s - reserve_s - base_s
        count, decode_pages = _choose_decodes(s, ints, floats, kv, entries, sizes, tick_s,
                                              window_s, est_s, buckets, kv_need, now)
        num_chunks = 0
        if waiting:
            decode_context = 0
            for k in range(count):
                decode_context += s.context[s.out[k]] + 1
            num_chunks = _choose_prefill(s, coefficients, ints, floats, kv, entries, sizes,
                                         budget_s, count, decode_context,
                                         st[PJ_FREE] - decode_pages, count > 0)
            if count == 0 and num_chunks == 0:
                victim = _partial_victim(s, ints, kv)
                if victim >= 0:  # the pool was full of half-done prompts: free one, again
                    _remove(s, ints, floats, victim)
                    _preempt_kv(s, kv, victim)
                    _requeue(s, ints, floats, entries, sizes, victim)
                    continue
        break
    fp[LAST_BUDGET] = budget_s
    for k in range(count):
        p.add_decode(entries, sizes, s.rows[s.out[k]])
    if ip[HAS_PICKS]:
        prefill_tokens = 0
        for k in range(sizes[p.NUM_PREFILL]):
            prefill_tokens += entries[p.PREFILL_TOKENS, k]
        _pick_kernels(s, buckets, count, entries, sizes, kernels, prefill_tokens)


@kernel
def slo_add(s, ints, floats, i):
    """`SLOPolicy.add_request`: queue admitted row `i` for prefill."""
    _push(s, ints, floats, i, 0)


@kernel
def slo_update(s, ints, floats, entries, sizes):
    """`SLOPolicy.update_from_output` once the plan is committed; returns the rows waiting."""
    num_prefill = sizes[p.NUM_PREFILL]
    for k in range(num_prefill):  # prompts computed: out of the queue, back in below
        i = entries[p.PREFILL, k]
        if s.pos[i] >= 0:
            _remove(s, ints, floats, i)
    for k in range(sizes[p.NUM_DECODE]):
        i = entries[p.DECODE, k]
        if ints[STATUS, i] >= FINISHED:
            _decode_remove(s, i)
        else:
            slot = s.slot_of[i]
            s.deadline_s[slot] = _deadline(ints, floats, i)
            s.context[slot] = ints[COMPUTED, i]
    for k in range(num_prefill):
        i = entries[p.PREFILL, k]
        if ints[STATUS, i] >= FINISHED:
            continue
        if ints[GENERATED, i] > 0 and ints[PROMPT, i] + ints[GENERATED, i] - ints[
                COMPUTED, i] == 1:  # its prompt is done
            _decode_add(s, i, _deadline(ints, floats, i), ints[COMPUTED, i],
                        floats[WEIGHT, i])
        else:
            _push(s, ints, floats, i, ints[COMPUTED, i])
    return s.st[HEAP_LEN]
