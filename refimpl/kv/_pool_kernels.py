"""Numba kernels over the page pool's arrays; `refimpl.kv.pool.PagePool` is their only caller.

The pool is a struct of arrays (see `PagePool`): `refcount[num_pages]`, the LIFO free stack
`free_stack[num_pages]` with its height in `counters[FREE]`, and per request slot a row of
`tables[slot, :]` (page ids in order), `num_pages_of[slot]`, `lengths[slot]` (tokens held) and
`tokens_per_page[slot]` (the page size, times 2 or 4 once the request's pages are quantized).
Every mutating kernel first checks that it can finish and changes nothing when it cannot: the
pool never holds a partial allocation.
"""

from __future__ import annotations

import numpy as np

from refimpl._numba import kernel

FREE = 0  # counters[FREE]: number of free pages (height of the free stack)

# Return codes of the append kernels (>= 0 is the number of copy-on-write copies made).
NO_PAGES = -1
OVER_CONTEXT = -2


@kernel
def pages_for(num_tokens, tokens_per_page):
    """Pages that hold `num_tokens` tokens (a ceiling division)."""
    return (num_tokens + tokens_per_page - 1) // tokens_per_page


@kernel
def append_need(refcount, tables, num_pages_of, lengths, tokens_per_page, slot, num_tokens):
    """New pages one request needs to grow by `num_tokens`, copy-on-write page included."""
    tpp = tokens_per_page[slot]
    length = lengths[slot]
    need = pages_for(length + num_tokens, tpp) - num_pages_of[slot]
    # A partly filled last page shared with a fork must be copied before it is written.
    if num_tokens > 0 and length % tpp != 0 and refcount[tables[slot, num_pages_of[slot] - 1]] > 1:
        need += 1
    return need


@kernel
def _pop(free_stack, counters):
    counters[FREE] -= 1
    return free_stack[counters[FREE]]


@kernel
def _push(free_stack, counters, page):
    free_stack[counters[FREE]] = page
    counters[FREE] += 1


@kernel
def _grow(refcount, free_stack, counters, tables, num_pages_of, lengths, tokens_per_page,
          slot, num_tokens, cow_out, num_cow):
    """Append `num_tokens` to one slot whose need was already checked; returns copies made."""
    tpp = tokens_per_page[slot]
    length = lengths[slot]
    last = num_pages_of[slot] - 1
    if num_tokens > 0 and length % tpp != 0 and refcount[tables[slot, last]] > 1:
        shared = tables[slot, last]
        fresh = _pop(free_stack, counters)
        refcount[shared] -= 1
        refcount[fresh] = 1
        tables[slot, last] = fresh
        cow_out[num_cow, 0] = shared  # the caller copies the page's contents shared -> fresh
        cow_out[num_cow, 1] = fresh
        num_cow += 1
    target = pages_for(length + num_tokens, tpp)
    for i in range(num_pages_of[slot], target):
        page = _pop(free_stack, counters)
        refcount[page] = 1
        tables[slot, i] = page
    num_pages_of[slot] = target
    lengths[slot] = length + num_tokens
    return num_cow


@kernel
def append_batch(refcount, free_stack, counters, tables, num_pages_of, lengths, tokens_per_page,
                 slots, num_tokens, max_tokens, cow_out, info):
    """Grow every `slots[i]` by `num_tokens[i]`, all or nothing; returns copies or an error code.

    On an error, `info[0]` says which entry was over the context, or how many pages were needed.
    """
    need = 0
    for i in range(slots.shape[0]):
        slot = slots[i]
        if lengths[slot] + num_tokens[i] > max_tokens:
            info[0] = i
            return OVER_CONTEXT
        need += append_need(refcount, tables, num_pages_of, lengths, tokens_per_page, slot,
                            num_tokens[i])
    if need > counters[FREE]:
        info[0] = need
        return NO_PAGES
    num_cow = 0
    for i in range(slots.shape[0]):
        num_cow = _grow(refcount, free_stack, counters, tables, num_pages_of, lengths,
                        tokens_per_page, slots[i], num_tokens[i], cow_out, num_cow)
    return num_cow


@kernel
def release(refcount, free_stack, counters, tables, num_pages_of, slot, keep):
    """Drop the slot's pages from index `keep` on, last first; pages nobody holds become free.

    Pushing the last page first leaves the first page on top of the stack, so a request that
    allocates next reuses the freed pages in their old order.
    """
    for i in range(num_pages_of[slot] - 1, keep - 1, -1):
        page = tables[slot, i]
        refcount[page] -= 1
        if refcount[page] == 0:
            _push(free_stack, counters, page)
        tables[slot, i] = -1
    num_pages_of[slot] = keep


@kernel
def share(refcount, tables, num_pages_of, lengths, tokens_per_page, src, dst):
    """Give slot `dst` the pages of slot `src`, each page's refcount raised by one."""
    for i in range(num_pages_of[src]):
        page = tables[src, i]
        tables[dst, i] = page
        refcount[page] += 1
    num_pages_of[dst] = num_pages_of[src]
    lengths[dst] = lengths[src]
    tokens_per_page[dst] = tokens_per_page[src]


@kernel
def usage(num_pages_of, lengths, tokens_per_page, states, resident_state):
    """Unused token slots in the pages of resident requests (each holder counts its own)."""
    waste = 0
    for slot in range(states.shape[0]):
        if states[slot] == resident_state:
            waste += num_pages_of[slot] * tokens_per_page[slot] - lengths[slot]
    return waste


def empty_cow(num_entries: int) -> np.ndarray:
    """Room for the copy-on-write pairs `(src_page, dst_page)` of `num_entries` appends."""
    return np.empty((max(num_entries, 1), 2), dtype=np.int32)
