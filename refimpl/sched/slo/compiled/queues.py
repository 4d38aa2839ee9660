"""The compiled `slo` policy's two queues: the prefill heap and the decode set's slots."""

from __future__ import annotations

from refimpl._numba import inline_kernel, kernel
from refimpl.sched.slo.compiled.state import DEC_COUNT, DEC_HI, FREE_TOP, HEAP_LEN, _deadline
from refimpl.sched.table import ARRIVAL, GENERATED, PRIORITY, PROMPT, REQUEST_ID

__all__ = []

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


# The queue's moves are handed the heap's own arrays, not the whole SLOState: each array a
# compiled call is handed costs two reference-count updates, and these run per queued row.
@kernel
def _push(heap, pos, key_deadline, key_left, st, ints, floats, i, num_computed):
    """Queue row `i` under its key with `num_computed` tokens cached."""
    key_deadline[i] = _deadline(ints, floats, i)
    key_left[i] = ints[PROMPT, i] + ints[GENERATED, i] - num_computed
    size = st[HEAP_LEN]
    heap[size] = i
    pos[i] = size
    st[HEAP_LEN] = size + 1
    _sift(heap, pos, key_deadline, key_left, ints, floats, size + 1, size)


@kernel
def _remove(heap, pos, key_deadline, key_left, st, ints, floats, i):
    """Take row `i` out of the queue."""
    k = pos[i]
    size = st[HEAP_LEN] - 1
    st[HEAP_LEN] = size
    pos[i] = -1
    if k == size:
        return
    heap[k] = heap[size]
    pos[heap[k]] = k
    _sift(heap, pos, key_deadline, key_left, ints, floats, size, k)


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
