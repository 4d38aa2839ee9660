"""The compiled `slo` tick's prompt chunks: the heap walked in key order, the adaptive chunk."""

from __future__ import annotations

from refimpl._numba import inline_kernel, kernel
from refimpl.costmodel.step import step_s
from refimpl.kv import prefix_facade as kvp
from refimpl.sched import plan as p
from refimpl.sched.slo.compiled.projection import (
    _flags,
    _holds_slot,
    _num_computed,
    _pages_held,
)
from refimpl.sched.slo.compiled.queues import _before
from refimpl.sched.slo.compiled.state import (
    DEC_COUNT,
    HEAP_LEN,
    MAX_BATCH,
    MAX_CHUNK,
    MAX_HEADS,
    PJ_FREE,
    WATERMARK,
)
from refimpl.sched.table import GENERATED, PROMPT, REQUEST_ID

_step_s = inline_kernel(step_s)  # the one step-time formula, compiled


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
    room = ip[MAX_BATCH] - st[DEC_COUNT]  # prompts that may still join the decodes
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
        new = not _holds_slot(s, kv, i)
        if new and (held_back or room <= 0):
            continue
        computed, held = _num_computed(s, ints, i), _pages_held(s, kv, i)
        if kv.prefix.enabled and computed == 0 and new and _flags(s, i) == 0:
            # a prefix-cache hit: its cached pages count as held, less the idle ones it pins
            computed, pinned = kvp.prefix_start(kv, i, 0, ints[PROMPT, i])
            held = computed // page_size - pinned
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
        if new:
            room -= 1
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
