"""The compiled `slo` tick's moves: preemption and requeue, restores, the ladder's relief."""

from __future__ import annotations

import numpy as np

from refimpl._numba import kernel
from refimpl.kv.ladder import relief_kernel as LK
from refimpl.sched import plan as p
from refimpl.sched.slo.compiled.projection import (
    _holds_slot,
    _pages_held,
    _pool_arrays,
    _preempt_kv,
    _quantize_kv,
    _release,
    _restore_kv,
    _spill_kv,
)
from refimpl.sched.slo.compiled.queues import _decode_add, _decode_remove, _push
from refimpl.sched.slo.compiled.state import (
    CAP_ABOVE,
    COUNTS,
    DEC_COUNT,
    DEC_HI,
    HOLDING,
    LONG_CONTEXT,
    LOW_PRIORITY,
    PJ_FREE,
    PREEMPT_ABOVE,
    QUANTIZE_ABOVE,
    QUANTIZE_FACTOR,
    QUEUE_NEW_ABOVE,
    SPILL_ABOVE,
    SPILL_HEAD,
    SPILL_LEN,
    _deadline,
)
from refimpl.sched.table import ARRIVAL, COMPUTED, LENGTH_CAPPED, PRIORITY, REQUEST_ID, WEIGHT

__all__ = []

# ---- the tick's moves ------------------------------------------------------------------------
@kernel
def _requeue(s, ints, floats, entries, sizes, i):
    """Row `i` is preempted: it recomputes from scratch, queued under its new key. Its
    quantization or restore earlier in this plan is taken back (`_take_back`)."""
    p.add_preempt(entries, sizes, i)
    if sizes[p.NUM_QUANTIZE] + sizes[p.NUM_RESTORE] > 0:
        _take_back(s.st, entries, sizes, i)
    _push(s.heap, s.pos, s.key_deadline, s.key_left, s.st, ints, floats, i, 0)


@kernel
def _take_back(st, entries, sizes, i):
    """Take row `i`'s quantization (uncounted) and restore out of the plan: a preemption
    supersedes them (refimpl.engine.commit.drop_superseded)."""
    for rows, count in ((p.QUANTIZE, p.NUM_QUANTIZE), (p.RESTORE, p.NUM_RESTORE)):
        n = sizes[count]
        for k in range(n):
            if entries[rows, k] == i:
                for m in range(k, n - 1):
                    entries[rows, m] = entries[rows, m + 1]
                    if rows == p.QUANTIZE:
                        entries[p.QUANTIZE_FACTOR, m] = entries[p.QUANTIZE_FACTOR, m + 1]
                sizes[count] = n - 1
                if rows == p.QUANTIZE:
                    st[COUNTS + LK.QUANTIZE] -= 1
                break


@kernel
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
