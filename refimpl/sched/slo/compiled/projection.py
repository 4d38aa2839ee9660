"""The compiled `slo` policy's projection of the KV cache: per-row overlays, one epoch a tick."""

from __future__ import annotations

from refimpl._numba import inline_kernel, kernel
from refimpl.kv.manager import COUNTER_FREE as FREE
from refimpl.kv.manager import COUNTER_SPILLED as SPILLED
from refimpl.kv.manager import SLOT_FREE as FREE_SLOT
from refimpl.kv.manager import SLOT_RESIDENT as RESIDENT
from refimpl.kv.manager import SLOT_SPILLED as SPILLED_SLOT
from refimpl.kv.manager import pages_released
from refimpl.sched.slo.compiled.state import (
    EPOCH,
    F_FREED,
    F_PAGES,
    F_PREEMPTED,
    F_STATE,
    F_TPP,
    PJ_CPU,
    PJ_FREE,
    PJ_TOUCHED,
)
from refimpl.sched.table import COMPUTED

__all__ = []

# ---- the KV projection (refimpl.kv.projection.Projection, no page shared) -------------------
@inline_kernel
def _flags(s, i):
    return s.pj_flags[i] if s.pj_epoch[i] == s.st[EPOCH] else 0


@inline_kernel
def _touch(s, i):
    """Row `i` gets an overlay this tick (empty at first)."""
    st = s.st
    if s.pj_epoch[i] != st[EPOCH]:
        s.pj_epoch[i] = st[EPOCH]
        s.pj_flags[i] = 0
        s.pj_touched[st[PJ_TOUCHED]] = i
        st[PJ_TOUCHED] += 1


@inline_kernel
def _holds_slot(s, kv, i):
    return (_flags(s, i) & F_FREED) == 0 and kv.slot_of[i] >= 0


@inline_kernel
def _pages_held(s, kv, i):
    if not _holds_slot(s, kv, i):
        return 0
    if _flags(s, i) & F_PAGES:
        return s.pj_pages[i]
    return kv.num_pages_of[kv.slot_of[i]]


@inline_kernel
def _num_computed(s, ints, i):
    return 0 if _flags(s, i) & F_PREEMPTED else ints[COMPUTED, i]


@inline_kernel
def _is_resident(s, kv, i):
    if not _holds_slot(s, kv, i):
        return False
    state = s.pj_state[i] if _flags(s, i) & F_STATE else kv.states[kv.slot_of[i]]
    return state == RESIDENT


@inline_kernel
def _tokens_per_page(s, kv, i):
    if _flags(s, i) & F_TPP:
        return s.pj_tpp[i]
    return kv.tokens_per_page[kv.slot_of[i]]


# The moves below (and pressure's requeue) are calls, not inlined: they run only when a request
# is preempted, quantized, spilled or restored, and every inlined copy of their nest of helpers
# was compiled again (the cold serving loop: 212 -> 184 s with them called, run side by side).
@kernel
def _release(s, kv, i):
    """Row `i` gives up all its KV; returns the pages freed."""
    resident = _is_resident(s, kv, i)
    freed = 0
    if resident:  # an untouched request may share pages (a prefix cache's): those stay
        freed = _pages_held(s, kv, i) if _flags(s, i) else pages_released(kv, i)
    if _holds_slot(s, kv, i) and not resident:
        s.st[PJ_CPU] -= _pages_held(s, kv, i)
    s.st[PJ_FREE] += freed
    _touch(s, i)
    s.pj_flags[i] |= F_FREED
    return freed


@kernel
def _preempt_kv(s, kv, i):
    freed = _release(s, kv, i)
    s.pj_flags[i] |= F_PREEMPTED
    return freed


@kernel
def _quantize_kv(s, kv, i, factor):
    tpp = _tokens_per_page(s, kv, i) * factor
    kept = -(-kv.lengths[kv.slot_of[i]] // tpp)
    freed = _pages_held(s, kv, i) - kept
    _touch(s, i)
    s.pj_flags[i] |= F_PAGES | F_TPP
    s.pj_pages[i], s.pj_tpp[i] = kept, tpp
    s.st[PJ_FREE] += freed
    return freed


@kernel
def _spill_kv(s, kv, i):
    moved = _pages_held(s, kv, i)
    s.st[PJ_FREE] += moved if _flags(s, i) else pages_released(kv, i)  # (shared pages stay)
    s.st[PJ_CPU] += moved
    _touch(s, i)
    s.pj_flags[i] |= F_STATE
    s.pj_state[i] = SPILLED_SLOT
    return moved


@kernel
def _restore_kv(s, kv, i):
    taken = -(-kv.lengths[kv.slot_of[i]] // _tokens_per_page(s, kv, i))
    s.st[PJ_CPU] -= _pages_held(s, kv, i)
    _touch(s, i)
    s.pj_flags[i] |= F_PAGES | F_STATE
    s.pj_pages[i], s.pj_state[i] = taken, RESIDENT
    s.st[PJ_FREE] -= taken
    return taken


@kernel
def _pool_arrays(s, kv):
    """(counters, num_pages_of, tokens_per_page, states) as the plan leaves them."""
    st = s.st
    if st[PJ_TOUCHED] == 0 and st[PJ_FREE] == kv.counters[FREE]:  # (no idle cached pages)
        return kv.counters, kv.num_pages_of, kv.tokens_per_page, kv.states
    held, tpp, states = kv.num_pages_of.copy(), kv.tokens_per_page.copy(), kv.states.copy()
    for k in range(st[PJ_TOUCHED]):
        i = s.pj_touched[k]
        flags, slot = s.pj_flags[i], kv.slot_of[i]
        if flags & F_PAGES:
            held[slot] = s.pj_pages[i]
        if flags & F_TPP:
            tpp[slot] = s.pj_tpp[i]
        if flags & F_STATE:
            states[slot] = s.pj_state[i]
        if flags & F_FREED and slot >= 0:
            held[slot], states[slot] = 0, FREE_SLOT
    counters = kv.counters.copy()
    counters[FREE] = st[PJ_FREE]
    counters[SPILLED] = st[PJ_CPU]
    return counters, held, tpp, states
