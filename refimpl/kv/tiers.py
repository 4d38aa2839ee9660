"""The page pool's memory tiers: quantize pages in place, spill them to the CPU, restore them.

The seed's section 4 cheaper-than-preemption moves, which the pressure ladder
(`refimpl.kv.ladder`) takes under memory pressure: repacking a request's KV `factor` times
denser (16-bit to INT8/FP8) frees the tail of its page table; spilling moves its pages to a
CPU tier of `cpu_tier_pages` (it cannot decode until restored); restoring brings it back into
fresh pages. `PageTiers` is a part of `PagePool` (`refimpl.kv.pool`): each method validates,
calls its kernel in `_tier_kernels` (the one definition of the move) and then tells the pool's
`storage`, if it has real K/V data, what happened.
"""

from __future__ import annotations

from refimpl.errors import CapacityError, KVCacheError
from refimpl.kv import _pool_kernels as K
from refimpl.kv import _tier_kernels as T
from refimpl.kv._checks import check_count
from refimpl.kv.storage import QUANTIZE_FACTOR

__all__ = ["PageTiers"]


class PageTiers:
    """`PagePool`'s tier moves and their queries.

    Uses the pool's arrays (`refcount`, `free_stack`, `counters`, `tables`, `num_pages_of`,
    `lengths`, `tokens_per_page`, `states`), `page_size`, `cpu_tier_pages`, `storage` and its
    lookups (`slot`, `_resident_slot`, `page_table`, `num_free_pages`). The storage hooks run
    after the kernel, with the page table from before it: a released page keeps its data
    until a later growth takes it, and nothing grows in between.
    """

    @property
    def num_spilled_pages(self) -> int:
        """Pages held in the CPU tier."""
        return int(self.counters[K.SPILLED])

    def is_quantized(self, request_id: int) -> bool:
        """Whether the request's pages were repacked by `quantize`."""
        return bool(T.is_quantized(self.tokens_per_page, self.slot(request_id), self.page_size))

    def can_quantize(self, request_id: int) -> bool:
        """Whether `quantize` would succeed now: resident, with no page shared (changes nothing)."""
        return T.quantize_refusal(self.refcount, self.counters, self.tables, self.num_pages_of,
                                  self.states, self.slot(request_id)) == 0

    def quantize(self, request_id: int, factor: int) -> list[int]:
        """Repack a request's tokens `factor` times denser (e.g. 2 for 16-bit -> INT8).

        Pages keep their size in bytes, so a page now holds `factor` times more tokens; the
        request keeps the first pages of its table and frees the rest. Only pages the request
        owns alone can be rewritten in place: a request sharing pages is refused.
        Returns the pages freed.
        """
        slot = self._resident_slot(request_id)
        factor = check_count("factor", factor, 2)
        if not self.can_quantize(request_id):
            raise KVCacheError("request_id", request_id, "shares pages with a fork; only "
                               "pages held alone can be quantized in place")
        if self.storage is not None and (factor, self.is_quantized(request_id)) != (
                QUANTIZE_FACTOR, False):
            raise KVCacheError("factor", factor, f"pages with real data quantize once, from "
                               f"float32 to 8 bits: factor {QUANTIZE_FACTOR}")
        table, length = self.page_table(request_id), int(self.lengths[slot])
        freed = T.quantize(self.refcount, self.free_stack, self.counters, self.tables,
                           self.num_pages_of, self.lengths, self.tokens_per_page, self.states,
                           slot, factor)
        self._check_done(freed, request_id)
        if self.storage is not None:
            self.storage.on_quantize(request_id, table, length)
        return table[len(table) - freed :]  # the released tail

    def can_spill(self, request_id: int) -> bool:
        """Whether `spill` would succeed now: resident, and the CPU tier has room."""
        return T.spill_refusal(self.counters, self.num_pages_of, self.states,
                               self.slot(request_id), self.cpu_tier_pages) == 0

    def spill(self, request_id: int) -> int:
        """Move a resident request's pages to the CPU tier; returns the pages moved.

        Pages shared with a fork stay in the pool for the fork; the spilled copy is private,
        so a restored request no longer shares them.
        """
        slot = self._resident_slot(request_id)
        table, length = self.page_table(request_id), int(self.lengths[slot])
        moved = T.spill(self.refcount, self.free_stack, self.counters, self.tables,
                        self.num_pages_of, self.states, slot, self.cpu_tier_pages)
        if moved == T.NO_TIER_ROOM:
            raise CapacityError("request_id", request_id, f"needs {len(table)} CPU-tier pages, "
                                f"{self.cpu_tier_pages - self.num_spilled_pages} are free")
        self._check_done(moved, request_id)
        if self.storage is not None:
            self.storage.on_spill(request_id, table, length)
        return int(moved)

    def can_restore(self, request_id: int) -> bool:
        """Whether `restore` would succeed now (changes nothing)."""
        return T.restore_refusal(self.counters, self.num_pages_of, self.states,
                                 self.slot(request_id)) == 0

    def restore(self, request_id: int) -> list[int]:
        """Bring a spilled request back into fresh pages; returns its new page table."""
        slot = self.slot(request_id)
        taken = T.restore(self.refcount, self.free_stack, self.counters, self.tables,
                          self.num_pages_of, self.lengths, self.tokens_per_page, self.states,
                          slot)
        if taken == K.BAD_SLOT:
            raise KVCacheError("request_id", request_id, "is not spilled")
        if taken == K.NO_PAGES:
            raise CapacityError("request_id", request_id, f"needs {int(self.num_pages_of[slot])} "
                                f"pages to come back, {self.num_free_pages} are free")
        if self.storage is not None:
            self.storage.on_restore(request_id, self.page_table(request_id),
                                    int(self.lengths[slot]))
        return self.page_table(request_id)

    @staticmethod
    def _check_done(code: int, request_id: int) -> None:
        # The checks before each call cover every refusal; one here is a bug, not bad input.
        if code < 0:
            raise KVCacheError("request_id", request_id, f"refused by a tier kernel (code "
                               f"{code}) after passing its checks")
