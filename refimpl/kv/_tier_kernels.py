"""Numba kernels that move a request's KV between tiers: quantize, spill and restore.

The seed's section 4 tiers, over the page pool's arrays (described in `_pool_kernels`): a
request's pages are repacked denser in place (`quantize`: `tokens_per_page[slot]` grows by
`factor` and the tail pages go back to the free stack), moved to the CPU tier (`spill`: its
pool pages are released, `num_pages_of[slot]` then counts CPU-tier pages, totalled in
`counters[SPILLED]`), and brought back into fresh pages (`restore`). `PagePool` validates and
calls these; a compiled caller holding the same arrays (the serving loop) may call them
directly. Each checks that it can finish first and changes nothing when it cannot, returning a
negative code; the `*_refusal` helpers are those checks alone, for `can_*` queries and for the
pressure ladder's plan (`_ladder_kernels`), so each rule has one definition.
"""

from __future__ import annotations

from refimpl._numba import inline_kernel, kernel
from refimpl.kv._pool_kernels import (
    BAD_SLOT,
    FREE,
    NO_PAGES,
    RESIDENT,
    SHARED,
    SPILLED,
    SPILLED_SLOT,
    release_slot,
    take_pages,
)

# Refusals (the append kernels' codes, BAD_SLOT and NO_PAGES, keep their meaning here).
SHARED_PAGE = -6  # quantize: a page is shared with a fork, so it cannot be rewritten in place
NO_TIER_ROOM = -7  # spill: the CPU tier cannot hold the request's pages
BAD_FACTOR = -8  # quantize: a factor below 2 would not make the pages denser


@inline_kernel
def pages_for(num_tokens, tokens_per_page):
    """Pages that hold `num_tokens` tokens (a ceiling division)."""
    return -(-num_tokens // tokens_per_page)


@inline_kernel
def is_quantized(tokens_per_page, slot, page_size):
    """Whether `quantize` repacked `slot`'s pages (a page then holds more than `page_size`)."""
    return tokens_per_page[slot] > page_size


@inline_kernel
def has_shared_page(refcount, tables, num_pages_of, slot):
    """Whether a page of `slot` is also held by another page table."""
    i = 0  # a scan that stops at the first shared page (Numba compiles no `any(generator)`)
    while i < num_pages_of[slot] and refcount[tables[slot, i]] <= 1:
        i += 1
    return i < num_pages_of[slot]


@inline_kernel
def tier_has_room(num_spilled_pages, num_pages, cpu_tier_pages):
    """Whether the CPU tier, holding `num_spilled_pages`, can take `num_pages` more."""
    return num_spilled_pages + num_pages <= cpu_tier_pages


@inline_kernel
def _in_state(states, slot, state):
    return 0 <= slot < states.shape[0] and states[slot] == state


@inline_kernel
def quantize_refusal(refcount, counters, tables, num_pages_of, states, slot):
    """0 if `slot` can be quantized in place, else BAD_SLOT (not resident) or SHARED_PAGE."""
    if not _in_state(states, slot, RESIDENT):
        return BAD_SLOT
    # With no shared page in the pool (the common case) the refcounts need no look.
    if counters[SHARED] > 0 and has_shared_page(refcount, tables, num_pages_of, slot):
        return SHARED_PAGE
    return 0


@kernel
def quantize(refcount, free_stack, counters, tables, num_pages_of, lengths, tokens_per_page,
             states, slot, factor):
    """Repack `slot` `factor` times denser, keeping its first pages; returns the pages freed.

    Pages keep their size in bytes, so each holds `factor` times the tokens: the request keeps
    `ceil(length / (tokens_per_page * factor))` pages and releases the rest, last first (none
    is shared, so all go back to the free stack). Refusals: BAD_FACTOR, BAD_SLOT, SHARED_PAGE.
    """
    if factor < 2:
        return BAD_FACTOR
    refusal = quantize_refusal(refcount, counters, tables, num_pages_of, states, slot)
    if refusal != 0:
        return refusal
    dense = tokens_per_page[slot] * factor
    keep = pages_for(lengths[slot], dense)
    freed = num_pages_of[slot] - keep
    tokens_per_page[slot] = dense
    release_slot(refcount, free_stack, counters, tables, num_pages_of, slot, keep)
    return freed


@inline_kernel
def spill_refusal(counters, num_pages_of, states, slot, cpu_tier_pages):
    """0 if `slot` can be spilled, else BAD_SLOT (not resident) or NO_TIER_ROOM."""
    if not _in_state(states, slot, RESIDENT):
        return BAD_SLOT
    if not tier_has_room(counters[SPILLED], num_pages_of[slot], cpu_tier_pages):
        return NO_TIER_ROOM
    return 0


@kernel
def spill(refcount, free_stack, counters, tables, num_pages_of, states, slot, cpu_tier_pages):
    """Move `slot`'s pages to the CPU tier; returns the pages moved (or BAD_SLOT, NO_TIER_ROOM).

    Its pool pages are released (a page shared with a fork stays for the fork: the CPU-tier
    copy is private), and `num_pages_of[slot]` then counts its CPU-tier pages.
    """
    refusal = spill_refusal(counters, num_pages_of, states, slot, cpu_tier_pages)
    if refusal != 0:
        return refusal
    moved = num_pages_of[slot]
    release_slot(refcount, free_stack, counters, tables, num_pages_of, slot, 0)
    num_pages_of[slot] = moved
    counters[SPILLED] += moved
    states[slot] = SPILLED_SLOT
    return moved


@inline_kernel
def restore_refusal(counters, num_pages_of, states, slot):
    """0 if `slot` can come back from the CPU tier, else BAD_SLOT (not spilled) or NO_PAGES."""
    if not _in_state(states, slot, SPILLED_SLOT):
        return BAD_SLOT
    if num_pages_of[slot] > counters[FREE]:
        return NO_PAGES
    return 0


@kernel
def restore(refcount, free_stack, counters, tables, num_pages_of, lengths, tokens_per_page,
            states, slot):
    """Bring spilled `slot` back into fresh pages; returns the pages taken (or a refusal).

    It keeps its `tokens_per_page` (a quantized request comes back quantized), so it takes
    back as many pages as it holds in the CPU tier, in free-stack order like any growth.
    """
    refusal = restore_refusal(counters, num_pages_of, states, slot)
    if refusal != 0:
        return refusal
    taken = num_pages_of[slot]
    counters[SPILLED] -= taken
    length = lengths[slot]
    num_pages_of[slot] = 0
    lengths[slot] = 0
    states[slot] = RESIDENT
    take_pages(refcount, free_stack, counters, tables, num_pages_of, lengths, tokens_per_page,
               slot, length)
    return taken
