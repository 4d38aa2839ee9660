"""Numba kernels over the page pool's arrays: growing, releasing, sharing and freeing pages.

The pool is a struct of arrays (see `PagePool`): `refcount[num_pages]`, the LIFO free stack
`free_stack[num_pages]` with its height in `counters[FREE]`, and per request slot a row of
`tables[slot, :]` (page ids in order), `num_pages_of[slot]`, `lengths[slot]` (tokens held),
`tokens_per_page[slot]` (the page size, times 2 or 4 once the request's pages are quantized)
and `states[slot]` (`RequestState`). `PagePool` validates and calls these; the compiled serving
engine, which holds the same arrays, calls some directly. Every mutating kernel first checks
that it can finish and changes nothing when it cannot: the pool never holds a partial
allocation. The tier moves (quantize, spill, restore) are in `_tier_kernels`.
"""

from __future__ import annotations

from refimpl._numba import inline_kernel, kernel

FREE = 0  # counters[FREE]: number of free pages (height of the free stack)
SHARED = 1  # counters[SHARED]: pages held by two or more page tables (forks share them)
SPILLED = 2  # counters[SPILLED]: CPU-tier pages held by spilled requests
# `states` values (RequestState's): the slot holds no request, its pages are in the pool, or
# they are in the CPU tier.
FREE_SLOT, RESIDENT, SPILLED_SLOT = 0, 1, 2
INFO_INDEX, INFO_EPOCH, INFO_MAX_TOKENS = 0, 1, 2  # the slots of append_batch's `info`

# Return codes of the append kernels (>= 0 is the number of copy-on-write copies made);
# on an error, `info[INFO_INDEX]` is the index of the offending entry (or the pages needed).
NO_PAGES = -1
OVER_CONTEXT = -2
BAD_SLOT = -3  # out of range, or not a resident request
DUPLICATE = -4  # the same slot twice in one batch
NEGATIVE = -5  # a negative token count


@kernel
def append_batch(refcount, free_stack, counters, tables, num_pages_of, lengths, tokens_per_page,
                 states, marks, slots, num_tokens, dry_run, cow_out, pending, info):
    """Grow every `slots[i]` by `num_tokens[i]`, all or nothing; returns copies or an error code.

    One pass checks each entry and, where its last page has room (most of a decode step),
    grows it at once; entries that need pages wait in `pending` for a second pass, which runs
    only when the whole batch fits. A refusal undoes the growths already made, so a failed
    call changes nothing. With `dry_run` nothing changes and the return value is the number of
    free pages the growth needs. `info` holds [INFO_INDEX, INFO_EPOCH, INFO_MAX_TOKENS]: where
    an error is reported, the batch counter (`marks[slot] == epoch` flags a slot already seen
    in this batch; a fresh epoch per call avoids clearing `marks`), and the longest a request
    may grow. Few arguments on purpose: Numba's dispatch costs per argument, and this runs
    every decode step.
    """
    info[INFO_EPOCH] += 1
    epoch, max_tokens = info[INFO_EPOCH], info[INFO_MAX_TOKENS]
    need = 0
    num_pending = 0
    for i in range(slots.shape[0]):
        slot = slots[i]
        grow = num_tokens[i]
        error = 0
        if slot < 0 or slot >= states.shape[0] or states[slot] != RESIDENT:
            error = BAD_SLOT
        elif marks[slot] == epoch:
            error = DUPLICATE
        elif grow < 0:
            error = NEGATIVE
        elif lengths[slot] + grow > max_tokens:
            error = OVER_CONTEXT
        if error != 0:
            _undo(slots, num_tokens, lengths, pending, num_pending, i, dry_run)
            info[INFO_INDEX] = i  # which entry, for the caller's message
            return error
        marks[slot] = epoch
        length = lengths[slot]
        tpp = tokens_per_page[slot]
        capacity = num_pages_of[slot] * tpp  # tokens its pages hold (no division: hot loop)
        # A partly filled last page shared with a fork is copied before it is written (with no
        # shared page in the pool, the common case, that needs no look at the refcounts).
        copy = (counters[SHARED] > 0 and grow > 0 and length < capacity
                and refcount[tables[slot, num_pages_of[slot] - 1]] > 1)
        if length + grow > capacity or copy:
            need += (max(length + grow - capacity, 0) + tpp - 1) // tpp + (1 if copy else 0)
            pending[num_pending] = i
            num_pending += 1
        elif not dry_run:
            lengths[slot] = length + grow  # room in its last page: grown now
    if dry_run:
        return need
    if need > counters[FREE]:
        _undo(slots, num_tokens, lengths, pending, num_pending, slots.shape[0], dry_run)
        info[INFO_INDEX] = need
        return NO_PAGES
    num_cow = 0
    for k in range(num_pending):
        i = pending[k]
        slot = slots[i]
        grow = num_tokens[i]
        length = lengths[slot]
        last = num_pages_of[slot] - 1
        capacity = num_pages_of[slot] * tokens_per_page[slot]
        if (counters[SHARED] > 0 and grow > 0 and length < capacity
                and refcount[tables[slot, last]] > 1):
            counters[FREE] -= 1
            fresh = free_stack[counters[FREE]]
            shared = tables[slot, last]
            refcount[shared] -= 1
            if refcount[shared] == 1:
                counters[SHARED] -= 1
            refcount[fresh] = 1
            tables[slot, last] = fresh
            cow_out[num_cow, 0] = shared  # the caller copies the page's contents
            cow_out[num_cow, 1] = fresh
            num_cow += 1
        take_pages(refcount, free_stack, counters, tables, num_pages_of, lengths,
                   tokens_per_page, slot, grow)
    return num_cow


@kernel
def _undo(slots, num_tokens, lengths, pending, num_pending, upto, dry_run):
    """Take back the growths `append_batch` made at once for entries before `upto`."""
    if dry_run:
        return
    k = 0
    for j in range(upto):
        if k < num_pending and pending[k] == j:
            k += 1  # a pending entry: never grown
            continue
        lengths[slots[j]] -= num_tokens[j]


@inline_kernel
def take_pages(refcount, free_stack, counters, tables, num_pages_of, lengths, tokens_per_page,
               slot, grow):
    """Grow `slot` by `grow` tokens, fresh pages off the free stack; no checks (callers check).

    Inlined into `append_batch` and into the compiled serving engine, whose plans never ask for
    more pages than are free.
    """
    tpp = tokens_per_page[slot]
    length = lengths[slot]
    target = (length + grow + tpp - 1) // tpp
    for j in range(num_pages_of[slot], target):
        counters[FREE] -= 1
        page = free_stack[counters[FREE]]
        refcount[page] = 1
        tables[slot, j] = page
    num_pages_of[slot] = target
    lengths[slot] = length + grow


@inline_kernel
def release_slot(refcount, free_stack, counters, tables, num_pages_of, slot, keep):
    """Drop `slot`'s pages from index `keep` on, last first; pages nobody holds become free.

    Pushing the last page first leaves the first page on top of the stack, so a request that
    allocates next reuses the freed pages in their old order. Inlined into the free and tier
    kernels and into the compiled serving engine.
    """
    for i in range(num_pages_of[slot] - 1, keep - 1, -1):
        page = tables[slot, i]
        refcount[page] -= 1
        if refcount[page] == 0:
            free_stack[counters[FREE]] = page
            counters[FREE] += 1
        elif refcount[page] == 1:
            counters[SHARED] -= 1
        tables[slot, i] = -1
    num_pages_of[slot] = keep


@kernel
def free_slots(refcount, free_stack, counters, tables, num_pages_of, lengths, states, slots):
    """Free each slot's request, all or nothing; returns 0, or BAD_SLOT or DUPLICATE.

    A resident request's pages are released (`release_slot`, in the order given); a spilled
    one's CPU-tier pages leave `counters[SPILLED]`. A first pass checks every slot and marks it
    seen by negating its state (states are >= 0), which finds a slot named twice without a
    scratch array; a refusal negates the marks back.
    """
    for i in range(slots.shape[0]):
        slot = slots[i]
        refusal = 0
        if slot < 0 or slot >= states.shape[0] or states[slot] == FREE_SLOT:
            refusal = BAD_SLOT
        elif states[slot] < 0:
            refusal = DUPLICATE
        if refusal != 0:
            for j in range(i):
                states[slots[j]] = -states[slots[j]]
            return refusal
        states[slot] = -states[slot]
    for slot in slots:
        if -states[slot] == RESIDENT:
            release_slot(refcount, free_stack, counters, tables, num_pages_of, slot, 0)
        else:
            counters[SPILLED] -= num_pages_of[slot]
            num_pages_of[slot] = 0
        lengths[slot] = 0
        states[slot] = FREE_SLOT
    return 0


@kernel
def share(refcount, counters, tables, num_pages_of, lengths, tokens_per_page, src, dst):
    """Give slot `dst` the pages of slot `src`, each page's refcount raised by one."""
    for i in range(num_pages_of[src]):
        page = tables[src, i]
        tables[dst, i] = page
        refcount[page] += 1
        if refcount[page] == 2:
            counters[SHARED] += 1
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
