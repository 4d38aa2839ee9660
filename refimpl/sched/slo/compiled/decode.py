"""The compiled `slo` tick's decode batch: the knapsack, preempting while urgent ones lack pages."""

from __future__ import annotations

import numpy as np

from refimpl._numba import kernel
from refimpl.sched.slo.compiled.pressure import _preempt_decoding
from refimpl.sched.slo.compiled.state import (
    DEC_COUNT,
    DEC_HI,
    HORIZON,
    LATENESS,
    MAX_BATCH,
    PJ_FREE,
    VALUE_MODE,
)
from refimpl.sched.slo.knapsack import select_decode_batch
from refimpl.sched.table import ARRIVAL, PRIORITY


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
