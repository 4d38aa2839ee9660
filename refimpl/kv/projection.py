"""The KV cache as a plan being drafted will leave it: what a policy plans a step against.

`schedule` changes nothing, so each step of the plan (a ladder action, a preemption, a
restore) is applied here instead, to a projection over the live KV state: the free pages,
the CPU tier's room, and per request its pages, page density, residency and computed tokens.
Later steps of the same plan read the projection, as they read the pool when the plan's
actions were carried out at once: a request preempted in the plan holds no page and has
computed nothing, so the same plan may start its prompt again from scratch. Pages freed
follow the pool's rules: a request's pages go back to the pool only where it holds them alone
(a page shared with a fork loses one holder).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from refimpl.kv import _pool_kernels as K
from refimpl.kv.pool import RequestState

if TYPE_CHECKING:
    from refimpl.kv.view import KVView

__all__ = ["Projection", "cpu_tier"]

FREE, RESIDENT, SPILLED = (int(state) for state in RequestState)


def cpu_tier(kv: KVView) -> tuple[int, int]:
    """(pages the CPU tier holds, pages it holds at most) of the run's KV cache."""
    state = kv._kv
    return int(state.counters[K.SPILLED]), int(state.cpu_tier_pages)


class Projection:
    """The live KV state with the drafted plan's changes on top; changes nothing itself."""

    def __init__(self, kv: KVView, num_computed: np.ndarray) -> None:
        self._s = kv._kv
        self.page_size, self.num_pages = kv.page_size, kv.num_pages
        self.free = kv.num_free_pages  # free pages after the plan's actions so far
        self._num_computed = num_computed
        self._cpu: tuple[int, int] | None = None  # CPU-tier pages used and in all, when read
        self._kv = kv
        self.freed: set[int] = set()  # requests whose pages the plan releases
        self.preempted: set[int] = set()  # requests that recompute from scratch
        self._pages: dict[int, int] = {}  # pages held, where the plan changed them
        self._tpp: dict[int, int] = {}  # tokens per page, where the plan quantized
        self._state: dict[int, int] = {}  # residency, where the plan spilled or restored
        self._dropped: dict[int, int] = {}  # shared pages -> holders the plan took away
        self._fresh: set[int] = set()  # requests the plan restores: fresh pages, none shared

    # ---- reading ---------------------------------------------------------------------------
    @property
    def used(self) -> int:
        """Pages in use."""
        return self.num_pages - self.free

    def utilization(self) -> float:
        """Share of the pool's pages in use (as `KVView.utilization`)."""
        return (self.num_pages - self.free) / self.num_pages

    def slot(self, i: int) -> int:
        """Request `i`'s pool row, -1 while it holds no KV."""
        return -1 if i in self.freed else int(self._s.slot_of[i])

    def slots(self, rows: np.ndarray) -> np.ndarray:
        """`slot` of each of `rows`."""
        slots = self._s.slot_of[rows].astype(np.int64)
        for k in np.flatnonzero(np.isin(rows, list(self.freed))) if self.freed else ():
            slots[k] = -1
        return slots

    def holds_slot(self, i: int) -> bool:
        """Whether request `i` holds KV (resident or spilled)."""
        return i not in self.freed and self._s.slot_of[i] >= 0

    def pages_held(self, i: int) -> int:
        """Pages request `i` holds (in the pool, or in the CPU tier when spilled)."""
        if not self.holds_slot(i):
            return 0
        pages = self._pages.get(i)
        return int(self._s.num_pages_of[self._s.slot_of[i]]) if pages is None else pages

    def num_computed(self, i: int) -> int:
        """Tokens of request `i` whose KV is cached."""
        return 0 if i in self.preempted else int(self._num_computed[i])

    def is_resident(self, i: int) -> bool:
        """Whether request `i`'s pages are in the pool."""
        if not self.holds_slot(i):
            return False
        state = self._state.get(i)
        return (int(self._s.states[self._s.slot_of[i]]) if state is None else state) == RESIDENT

    def tokens_per_page(self, i: int) -> int:
        """Tokens a page of request `i` holds (more than `page_size` once quantized)."""
        tpp = self._tpp.get(i)
        return int(self._s.tokens_per_page[self._s.slot_of[i]]) if tpp is None else tpp

    def length(self, i: int) -> int:
        """Tokens of KV request `i` holds."""
        return int(self._s.lengths[self._s.slot_of[i]])

    def cpu_room(self) -> int:
        """Pages the CPU tier can still take."""
        if self._cpu is None:
            self._cpu = cpu_tier(self._kv)
        return self._cpu[1] - self._cpu[0]

    def cpu_capacity(self) -> int:
        """Pages the CPU tier holds at most."""
        self.cpu_room()
        return self._cpu[1]

    def arrays(self) -> tuple[np.ndarray, ...]:
        """The pool's arrays as the plan leaves them (the pool's own while it changes
        nothing): refcount, counters, tables, num_pages_of, lengths, tokens_per_page, states.
        Only what the ladder reads of them: a restore's fresh pages are not in the tables."""
        s = self._s
        if not (self.freed or self._pages or self._tpp or self._state
                or self.free != s.counters[K.FREE]):  # (idle prefix-cache pages count free)
            return (s.refcount, s.counters, s.tables, s.num_pages_of, s.lengths,
                    s.tokens_per_page, s.states)
        held, tpp, states = s.num_pages_of.copy(), s.tokens_per_page.copy(), s.states.copy()
        for i, pages in self._pages.items():
            held[s.slot_of[i]] = pages
        for i, tokens in self._tpp.items():
            tpp[s.slot_of[i]] = tokens
        for i, state in self._state.items():
            states[s.slot_of[i]] = state
        for i in self.freed:
            slot = s.slot_of[i]
            if slot >= 0:
                held[slot], states[slot] = 0, FREE
        refcount, counters = s.refcount, s.counters.copy()
        if self._dropped:
            refcount = refcount.copy()
            for page, holders in self._dropped.items():
                refcount[page] -= holders
            counters[K.SHARED] = np.count_nonzero(refcount > 1)
        counters[K.FREE] = self.free
        if self._cpu is not None:
            counters[K.SPILLED] = self._cpu[0]
        return refcount, counters, s.tables, held, s.lengths, tpp, states

    def _holders(self, page: int) -> int:
        return int(self._s.refcount[page]) - self._dropped.get(page, 0)

    def _shared(self, i: int) -> bool:
        """Whether request `i` may share pages (some page in the pool is shared)."""
        return bool(self._s.counters[K.SHARED] > 0) and i not in self._fresh

    def shares_a_page(self, i: int) -> bool:
        """Whether a page of request `i` is held by another request too."""
        if not self._shared(i):
            return False
        table = self._s.tables[self._s.slot_of[i], :self.pages_held(i)]
        return any(self._holders(page) > 1 for page in table.tolist())

    # ---- the plan's actions ----------------------------------------------------------------
    def _drop_pages(self, i: int, keep: int = 0) -> int:
        """Request `i` lets go of its pages from `keep` on; returns those that become free."""
        held = self.pages_held(i)
        if not self._shared(i):
            return held - keep
        freed = 0
        for page in self._s.tables[self._s.slot_of[i], keep:held].tolist():
            if self._holders(page) == 1:
                freed += 1
            self._dropped[page] = self._dropped.get(page, 0) + 1
        return freed

    def release(self, i: int) -> int:
        """Request `i` gives up all its KV (a length cap); returns the pages freed."""
        freed = self._drop_pages(i) if self.is_resident(i) else 0
        if self.holds_slot(i) and not self.is_resident(i):
            self._cpu_add(-self.pages_held(i))
        self.free += freed
        self.freed.add(i)
        return freed

    def preempt(self, i: int) -> int:
        """Request `i` gives up its KV and recomputes from scratch; returns the pages freed."""
        freed = self.release(i)
        self.preempted.add(i)
        return freed

    def quantize(self, i: int, factor: int) -> int:
        """Repack request `i`'s pages `factor` times denser; returns the pages freed."""
        tpp = self.tokens_per_page(i) * factor
        kept = -(-self.length(i) // tpp)
        freed = self._drop_pages(i, kept)
        self._pages[i], self._tpp[i] = kept, tpp
        self.free += freed
        return freed

    def spill(self, i: int) -> tuple[int, int]:
        """Move request `i`'s pages to the CPU tier; returns (pages freed, pages moved)."""
        moved = self.pages_held(i)
        freed = self._drop_pages(i)
        self.free += freed
        self._cpu_add(moved)
        self._state[i] = SPILLED
        return freed, moved

    def restore(self, i: int) -> int:
        """Bring spilled request `i` back into fresh pages; returns the pages it takes."""
        taken = -(-self.length(i) // self.tokens_per_page(i))
        self._cpu_add(-self.pages_held(i))
        self._pages[i] = taken
        self._state[i] = RESIDENT
        self._fresh.add(i)
        self.free -= taken
        return taken

    def _cpu_add(self, pages: int) -> None:
        self.cpu_room()  # read the tier first
        used, capacity = self._cpu
        self._cpu = (used + pages, capacity)
