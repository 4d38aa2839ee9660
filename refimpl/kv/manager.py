"""The KV cache as the serving loop sees it: one facade keyed by request, over a page pool.

Mirrors vLLM v1's KV-cache manager over its block pool: the scheduler asks how many pages
scheduling `n` more tokens of a request takes, and the commit grows, frees, spills, restores
or quantizes a request's pages. The facade owns the request-to-slot map (`slot_of[i]`, the
pool row of request `i`, -1 while it holds no pages) and a stack of free slots; nothing
outside `refimpl/kv/` touches the pool's arrays. `KVState` is the facade's data (the pool's
own arrays, shared, not copied) and the compiled functions here are its operations, the one
definition each: compiled policies and the commit call them directly, and `KVView`
(refimpl.kv.view) is the same facade for plain-Python policies (read-only).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from refimpl._numba import inline_kernel, kernel
from refimpl.kv import _pool_kernels as K
from refimpl.kv import _tier_kernels as T
from refimpl.kv import prefix as P
from refimpl.kv import prefix_index as PI
from refimpl.kv.pool import PagePool, RequestState
from refimpl.kv.prefix import PrefixState, no_prefix_state

__all__ = ["COUNTER_FREE", "COUNTER_SPILLED", "SLOT_FREE", "SLOT_RESIDENT", "SLOT_SPILLED",
           "KVState", "fitting_rows", "new_kv_state", "pages_needed_of", "pages_needed_rows"]

# The layout of a `KVState`, for compiled code that reads it: entries of `counters`, values of
# `states` (refimpl.kv._pool_kernels owns them; these are the names the rest of refimpl uses).
COUNTER_FREE, COUNTER_SPILLED = K.FREE, K.SPILLED
SLOT_FREE, SLOT_RESIDENT, SLOT_SPILLED = K.FREE_SLOT, K.RESIDENT, K.SPILLED_SLOT

_FREE_SLOT, _RESIDENT = int(RequestState.FREE), int(RequestState.RESIDENT)


class KVState(NamedTuple):
    """A `PagePool`'s arrays, the request-to-slot map and the free slots, for compiled code."""

    refcount: np.ndarray
    free_stack: np.ndarray
    counters: np.ndarray
    tables: np.ndarray
    num_pages_of: np.ndarray
    lengths: np.ndarray
    tokens_per_page: np.ndarray
    states: np.ndarray
    slot_of: np.ndarray  # (n requests,) int64: the pool row of request i, -1 for none
    free_slots: np.ndarray  # (num slots + 1,) int64: a stack, its height in the last entry
    page_size: int
    num_pages: int
    cpu_tier_pages: int
    prefix: PrefixState  # the prefix cache (refimpl.kv.prefix), disabled where none


def new_kv_state(pool: PagePool, num_requests: int, max_holders: int,
                 prefix: PrefixState | None = None) -> KVState:
    """The facade over an empty `pool` for a run of `num_requests` requests, at most
    `max_holders` of them holding pages at once, with a prefix cache where given."""
    pool.reserve_slots(max(max_holders, 1))
    free = np.flatnonzero(pool.states == _FREE_SLOT)[::-1]  # lowest slot on top, as the pool
    free_slots = np.append(free, len(free)).astype(np.int64)
    return KVState(pool.refcount, pool.free_stack, pool.counters, pool.tables, pool.num_pages_of,
                   pool.lengths, pool.tokens_per_page, pool.states,
                   np.full(max(num_requests, 1), -1, np.int64), free_slots, pool.page_size,
                   pool.num_pages, pool.cpu_tier_pages,
                   no_prefix_state() if prefix is None else prefix)


# ---- queries ---------------------------------------------------------------------------------
@inline_kernel
def pages_for(num_tokens, tokens_per_page):
    """Pages that hold `num_tokens` tokens (a ceiling division)."""
    return _pages_needed_of(0, tokens_per_page, 0, num_tokens)


@inline_kernel
def num_free_pages(kv):
    """Pages not held by any request: free, or idle in the prefix cache (evicted on demand)."""
    return kv.counters[K.FREE] + PI.stat(kv.prefix, P.IDLE_PAGES)


@inline_kernel
def pages_held(kv, i):
    """Pages request `i` holds now (in the pool, or in the CPU tier when spilled)."""
    slot = kv.slot_of[i]
    return kv.num_pages_of[slot] if slot >= 0 else 0


def pages_needed_of(num_held, tokens_per_page, num_computed, num_tokens):
    """New pages a request holding `num_held` pages of `tokens_per_page` tokens takes if
    `num_tokens` more of its tokens are computed: the one formula, run by Python (`KVView`)
    and compiled into the policies (`pages_needed`)."""
    return -(-(num_computed + num_tokens) // tokens_per_page) - num_held


_pages_needed_of = inline_kernel(pages_needed_of)


@kernel
def pages_needed_rows(slot_of, num_pages_of, tokens_per_page, num_computed, page_size, rows,
                      tokens, out):
    """`pages_needed_of` for each request `rows[k]` computing `tokens[k]` more tokens, into
    `out` (`KVView.pages_needed` on arrays: one compiled call instead of a dozen NumPy ones);
    returns the first k whose row is out of range, -1 if none."""
    for k in range(rows.shape[0]):
        i = rows[k]
        if i < 0 or i >= slot_of.shape[0]:
            return k
        slot = slot_of[i]
        held = num_pages_of[slot] if slot >= 0 else 0
        per_page = tokens_per_page[slot] if slot >= 0 else page_size
        out[k] = _pages_needed_of(held, per_page, num_computed[i], tokens[k])
    return -1


@kernel
def fitting_rows(slot_of, num_pages_of, tokens_per_page, num_computed, page_size, rows, tokens,
                 free):
    """How many of the entries, in order, fit: those before the first that computes no token
    or whose `pages_needed_of`, summed with the ones before it, passes `free` pages
    (`KVView.num_fitting`: one compiled call instead of a pages query and five NumPy ones);
    -1 - k where row `rows[k]` is out of range (every row is checked)."""
    n, taken = rows.shape[0], 0
    for k in range(rows.shape[0]):
        i = rows[k]
        if i < 0 or i >= slot_of.shape[0]:
            return -1 - k
        if k >= n:
            continue
        if tokens[k] <= 0:
            n = k
            continue
        slot = slot_of[i]
        held = num_pages_of[slot] if slot >= 0 else 0
        per_page = tokens_per_page[slot] if slot >= 0 else page_size
        taken += _pages_needed_of(held, per_page, num_computed[i], tokens[k])
        if taken > free:
            n = k
    return n


@inline_kernel
def pages_released(kv, i):
    """Pages freeing request `i` now gives back: those it holds alone (a page shared with
    another request, a fork or a cached prefix, stays); all it holds where none is shared."""
    slot = kv.slot_of[i]
    if slot < 0:
        return 0
    if kv.counters[K.SHARED] == 0 or kv.states[slot] != _RESIDENT:
        return kv.num_pages_of[slot]
    alone = 0
    for j in range(kv.num_pages_of[slot]):
        alone += kv.refcount[kv.tables[slot, j]] == 1
    return alone


@inline_kernel
def pages_needed(kv, i, num_computed, num_tokens):
    """New pages request `i` takes if `num_tokens` more of its tokens are computed."""
    slot = kv.slot_of[i]
    if slot < 0:  # a request without pages starts in full-precision pages
        return _pages_needed_of(0, kv.page_size, num_computed, num_tokens)
    return _pages_needed_of(kv.num_pages_of[slot], kv.tokens_per_page[slot], num_computed,
                            num_tokens)


@inline_kernel
def utilization(kv):
    """Share of the pool's pages in use."""
    return (kv.num_pages - num_free_pages(kv)) / kv.num_pages


# ---- changes (the commit's only way into the pool) -------------------------------------------
@kernel
def take_slot(kv, i):
    """A free slot for request `i` (`PagePool.allocate` of no tokens)."""
    height = kv.free_slots.shape[0] - 1
    kv.free_slots[height] -= 1
    slot = kv.free_slots[kv.free_slots[height]]
    kv.states[slot] = _RESIDENT
    kv.tokens_per_page[slot] = kv.page_size
    kv.slot_of[i] = slot
    return slot


@kernel
def grow(kv, rows, num_tokens, count):
    """Give each request `rows[k]` room for `num_tokens[k]` more tokens, k < `count` (the
    plan checked the pages): a slot on first use, fresh pages where the last one is full.

    One call for the whole step, the arrays bound once: per-request calls with the facade
    would update the reference count of each of its arrays every time (atomic operations
    that cost more than the work).
    """
    slot_of, lengths, num_pages_of, tokens_per_page = (kv.slot_of, kv.lengths, kv.num_pages_of,
                                                       kv.tokens_per_page)
    refcount, free_stack, counters, tables = kv.refcount, kv.free_stack, kv.counters, kv.tables
    for k in range(count):
        i, tokens = rows[k], num_tokens[k]
        slot = slot_of[i]
        if slot >= 0 and lengths[slot] + tokens <= num_pages_of[slot] * tokens_per_page[slot]:
            lengths[slot] += tokens  # room in the pages held (most decodes): none to take
            continue
        if slot < 0:
            slot = take_slot(kv, i)
        tpp = tokens_per_page[slot]
        need = (lengths[slot] + tokens + tpp - 1) // tpp - num_pages_of[slot]
        if need > counters[K.FREE]:  # room first, from the oldest idle prefix-cache blocks
            P.evict(kv.prefix, free_stack, counters, K.FREE, need)
        K.take_pages(refcount, free_stack, counters, tables, num_pages_of, lengths,
                     tokens_per_page, slot, tokens)


@kernel
def free(kv, i):
    """Release request `i`'s pages (or its CPU-tier copy) and its slot, if it holds any."""
    slot = kv.slot_of[i]
    if slot < 0:
        return
    if kv.states[slot] == _RESIDENT:
        start = kv.counters[K.FREE]
        K.release_slot(kv.refcount, kv.free_stack, kv.counters, kv.tables, kv.num_pages_of,
                       slot, 0)
        if kv.prefix.enabled:
            P.park(kv.prefix, kv.free_stack, kv.counters, K.FREE, start)
    else:  # spilled: its pages are in the CPU tier
        kv.counters[K.SPILLED] -= kv.num_pages_of[slot]
        kv.num_pages_of[slot] = 0
    kv.lengths[slot] = 0
    kv.states[slot] = _FREE_SLOT
    height = kv.free_slots.shape[0] - 1
    kv.free_slots[kv.free_slots[height]] = slot
    kv.free_slots[height] += 1
    kv.slot_of[i] = -1


@kernel
def spill(kv, i):
    """Move request `i`'s pages to the CPU tier; returns the pages moved (< 0: refused)."""
    slot = kv.slot_of[i]
    if slot < 0:
        return K.BAD_SLOT
    start = kv.counters[K.FREE]
    moved = T.spill(kv.refcount, kv.free_stack, kv.counters, kv.tables, kv.num_pages_of,
                    kv.states, slot, kv.cpu_tier_pages)
    if moved >= 0 and kv.prefix.enabled:
        P.park(kv.prefix, kv.free_stack, kv.counters, K.FREE, start)
    return moved


@kernel
def restore(kv, i):
    """Bring spilled request `i` back into fresh pages; returns the pages taken (< 0: refused)."""
    slot = kv.slot_of[i]
    if slot < 0:
        return K.BAD_SLOT
    if kv.states[slot] == K.SPILLED_SLOT and PI.stat(kv.prefix, P.IDLE_PAGES) > 0:
        P.evict(kv.prefix, kv.free_stack, kv.counters, K.FREE, kv.num_pages_of[slot])
    return T.restore(kv.refcount, kv.free_stack, kv.counters, kv.tables, kv.num_pages_of,
                     kv.lengths, kv.tokens_per_page, kv.states, slot)


@kernel
def quantize(kv, i, factor):
    """Repack request `i`'s pages `factor` times denser; returns the pages freed (< 0: refused)."""
    slot = kv.slot_of[i]
    if slot < 0:
        return K.BAD_SLOT
    if kv.prefix.enabled and factor >= 2 and T.quantize_refusal(
            kv.refcount, kv.counters, kv.tables, kv.num_pages_of, kv.states, slot) == 0:
        P.unpublish(kv.prefix, kv.tables, kv.num_pages_of[slot], slot)  # pages rewritten
    return T.quantize(kv.refcount, kv.free_stack, kv.counters, kv.tables, kv.num_pages_of,
                      kv.lengths, kv.tokens_per_page, kv.states, slot, factor)
