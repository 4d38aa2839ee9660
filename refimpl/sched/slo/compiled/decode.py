"""The compiled `slo` tick's decode preemption: when urgent decodes lack pages."""

from __future__ import annotations

import numpy as np

from refimpl._numba import kernel
from refimpl.sched.slo.compiled.pressure import _preempt_decoding
from refimpl.sched.slo.compiled.state import DEC_HI
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
def _preempt_outside(s, ints, floats, kv, entries, sizes, count):
    """Preempt the least important decoding row outside the batch; False when none is."""
    victim = _decode_victim(s, ints, floats, count)
    if victim < 0:
        return False
    _preempt_decoding(s, ints, floats, kv, entries, sizes, victim, False)
    return True
