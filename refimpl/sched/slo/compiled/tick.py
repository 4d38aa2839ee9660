"""The compiled `slo` tick: decode batch, prefill chunks, kernel picks; `plan_slo` and its hooks."""

from __future__ import annotations

from refimpl._numba import kernel
from refimpl.kv.manager import COUNTER_SPILLED as SPILLED
from refimpl.kv.manager import num_free_pages
from refimpl.sched import plan as p
from refimpl.sched.slo.budget import (
    decode_slack_s,
    learned_output,
    learned_quiet_share,
    stretch_s,
)
from refimpl.sched.slo.compiled.decode import _preempt_outside
from refimpl.sched.slo.compiled.prefill import _choose_prefill, _partial_victim, _step_s
from refimpl.sched.slo.compiled.pressure import _relieve, _requeue
from refimpl.sched.slo.compiled.projection import _num_computed, _preempt_kv
from refimpl.sched.slo.compiled.queues import _decode_add, _decode_remove, _push, _remove
from refimpl.sched.slo.compiled.state import (
    BASE_S,
    C_KV,
    C_SEQ,
    DEC_COUNT,
    DEC_HI,
    EPOCH,
    FIRST_BUCKET,
    HAS_LADDER,
    HAS_PICKS,
    HEAP_LEN,
    HORIZON,
    LAST_BUDGET,
    LATENESS,
    LOAN_QUANTILE,
    MAX_BATCH,
    MAX_CHUNK,
    MAX_TICK,
    MIN_CHUNK,
    MIN_TICK,
    NUM_STEPS,
    OUTPUT_QUANTILE,
    PJ_CPU,
    PJ_FREE,
    PJ_TOUCHED,
    QUEUE_NEW_ABOVE,
    QUIET_SHARE,
    SPILL_LEN,
    VALUE_MODE,
    _deadline,
)
from refimpl.sched.slo.knapsack import (
    BUCKET_COUNT,
    BUCKETS,
    EST_S,
    KV_NEED,
    select_into,
    tick_inputs_into,
)
from refimpl.sched.table import (
    COMPUTED,
    FINISHED,
    FIRST_TOKEN,
    GENERATED,
    PROMPT,
    STATUS,
    TPOT_SLO,
    WEIGHT,
)

__all__ = ["plan_slo", "slo_add", "slo_update"]


@kernel
def _pick_kernels(out, buckets, counts, pick_decode, pick_prefill, count, sizes, kernels,
                  prefill_tokens):
    """The cost table's picks: one per decode bucket (ascending), then the chunk's."""
    if count > 0:
        width = pick_decode.shape[1]
        counts[:width] = 0
        for k in range(count):
            counts[min(buckets[out[k]], width - 1)] += 1
        for bucket in range(width):
            if counts[bucket] > 0:
                p.add_kernel(kernels, sizes, pick_decode[counts[bucket], bucket])
    if prefill_tokens > 0:
        bits = 0
        while (1 << bits) < prefill_tokens:
            bits += 1
        p.add_kernel(kernels, sizes, pick_prefill[bits])


@kernel
def _stretch(s, coefficients, ints, floats, est_s, budget_s, tick_s, urgent_s, base_s, now):
    """The budget, stretched while the most urgent prompt would miss its deadline at the
    decodes' per-token pace, as far as their mean-pace slack reaches."""
    h = s.heap[0]
    computed = _num_computed(s, ints, h)
    left = min(ints[PROMPT, h] + ints[GENERATED, h] - computed, s.ip[MAX_CHUNK])
    whole_s = _step_s(coefficients, left, left * computed + left * (left + 1) // 2, 0, 0) \
        - base_s
    wanted_s = stretch_s(budget_s, tick_s, urgent_s, base_s, whole_s, s.key_deadline[h], now)
    if wanted_s <= 0:
        return budget_s
    slack = decode_slack_s(s.rows, s.active, s.st[DEC_HI], est_s, floats[FIRST_TOKEN],
                           ints[GENERATED], floats[TPOT_SLO], now, base_s, s.fp[QUIET_SHARE],
                           s.fp[OUTPUT_QUANTILE])
    return max(budget_s, min(wanted_s, slack, s.fp[MAX_TICK]))


# Every compiled call pays two reference-count updates per array it is handed (SLOState and
# KVState are tuples of arrays), so the tick calls helpers only when they have work: the
# ladder when the pool is over its mark or rows are spilled, the preemption only when urgent
# decodes lack pages; hot helpers are handed the arrays they read, not the whole state.
@kernel
def plan_slo(s, coefficients, ints, floats, kv, entries, sizes, kernels, now):
    """`SLOPolicy.schedule` (the module doc): fill the plan, taking the tick's own moves."""
    st, fp, ip, work = s.st, s.fp, s.ip, s.work
    est_s, buckets, kv_need = work.floats[EST_S], work.ints[BUCKETS], work.ints[KV_NEED]
    st[EPOCH] += 1
    st[PJ_FREE], st[PJ_CPU], st[PJ_TOUCHED] = num_free_pages(kv), kv.counters[SPILLED], 0
    base_s = fp[BASE_S]
    min_chunk = ip[MIN_CHUNK]
    num_pages = kv.num_pages
    while True:
        if ip[HAS_LADDER] and (st[SPILL_LEN] > 0 or (num_pages - st[PJ_FREE]) / num_pages
                               > fp[QUEUE_NEW_ABOVE]):
            _relieve(s, ints, floats, kv, entries, sizes, now)
        waiting = st[HEAP_LEN] > 0
        hi = st[DEC_HI]
        tick_s, urgent_s = tick_inputs_into(
            s.context, s.deadline_s, s.active, hi, now, fp[MIN_TICK], fp[MAX_TICK],
            fp[HORIZON], fp[C_SEQ], fp[C_KV], kv.page_size, ip[FIRST_BUCKET], est_s, buckets,
            kv_need)
        reserve_s = (_step_s(coefficients, min_chunk, min_chunk * (min_chunk + 1) // 2, 0, 0)
                     - base_s) if waiting else 0.0
        budget_s = max(tick_s, base_s + urgent_s * (1 + 1e-9) + reserve_s)
        if waiting and st[DEC_COUNT] > 0:
            budget_s = _stretch(s, coefficients, ints, floats, est_s, budget_s, tick_s,
                                urgent_s, base_s, now)
        window_s = budget_s - reserve_s - base_s
        count = decode_pages = 0
        while st[DEC_COUNT] > 0:  # the batch; again after each preemption urgent ones need
            count = select_into(s.deadline_s, est_s, s.weight, buckets, kv_need, s.active, hi,
                                now, fp[HORIZON] * tick_s, max(window_s, 0.0), st[PJ_FREE],
                                ip[MAX_BATCH], ip[VALUE_MODE], fp[LATENESS], s.out, s.stats,
                                work)
            decode_pages = s.stats[0]
            if s.stats[1] <= st[PJ_FREE] - decode_pages or not _preempt_outside(
                    s, ints, floats, kv, entries, sizes, count):
                break
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
                    _remove(s.heap, s.pos, s.key_deadline, s.key_left, s.st, ints, floats, victim)
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
        _pick_kernels(s.out, buckets, work.per_bucket[BUCKET_COUNT], s.pick_decode,
                      s.pick_prefill, count, sizes, kernels, prefill_tokens)


@kernel
def slo_add(s, ints, floats, i):
    """`SLOPolicy.add_request`: queue admitted row `i` for prefill."""
    _push(s.heap, s.pos, s.key_deadline, s.key_left, s.st, ints, floats, i, 0)


@kernel
def slo_update(s, ints, floats, entries, sizes):
    """`SLOPolicy.update_from_output` once the plan is committed; returns the rows waiting."""
    heap, pos, key_deadline, key_left, st = s.heap, s.pos, s.key_deadline, s.key_left, s.st
    slot_of, deadline_s, context = s.slot_of, s.deadline_s, s.context
    num_prefill = sizes[p.NUM_PREFILL]
    fp = s.fp
    fp[NUM_STEPS] += 1
    fp[QUIET_SHARE] = learned_quiet_share(fp[QUIET_SHARE], num_prefill == 0, fp[NUM_STEPS])
    for k in range(num_prefill):  # prompts computed: out of the queue, back in below
        i = entries[p.PREFILL, k]
        if pos[i] >= 0:
            _remove(heap, pos, key_deadline, key_left, st, ints, floats, i)
    for k in range(sizes[p.NUM_DECODE]):
        i = entries[p.DECODE, k]
        if ints[STATUS, i] >= FINISHED:
            _decode_remove(s, i)
            fp[OUTPUT_QUANTILE] = learned_output(fp[OUTPUT_QUANTILE], ints[GENERATED, i],
                                                 fp[LOAN_QUANTILE])
        else:
            slot = slot_of[i]
            deadline_s[slot] = _deadline(ints, floats, i)
            context[slot] = ints[COMPUTED, i]
    for k in range(num_prefill):
        i = entries[p.PREFILL, k]
        if ints[STATUS, i] >= FINISHED:
            continue
        if ints[GENERATED, i] > 0 and ints[PROMPT, i] + ints[GENERATED, i] - ints[
                COMPUTED, i] == 1:  # its prompt is done
            _decode_add(s, i, _deadline(ints, floats, i), ints[COMPUTED, i],
                        floats[WEIGHT, i])
        else:
            _push(heap, pos, key_deadline, key_left, st, ints, floats, i, ints[COMPUTED, i])
    return st[HEAP_LEN]
