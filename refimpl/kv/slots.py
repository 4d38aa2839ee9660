"""The page pool's slot table: request ids mapped to array rows, and the per-slot arrays.

Every array of `PagePool` indexed by request (page tables, page counts, lengths, tokens per
page, states) has one row per slot; a request takes a free slot when it is allocated or
forked and gives it back when freed, and the arrays double in height when no slot is free.
`SlotTable` is a part of `PagePool` (`refimpl.kv.pool`): it owns those arrays, the id-to-row
dict and the free-slot list; the page bookkeeping stays in the pool.
"""

from __future__ import annotations

import numpy as np

from refimpl.errors import KVCacheError
from refimpl.kv import _pool_kernels as K
from refimpl.kv._checks import check_count

__all__ = ["SlotTable"]


class SlotTable:
    """`PagePool`'s slots: `slot`, `reserve_slots`, membership and the slot arrays' growth.

    Uses the pool's `refcount`, `free_stack`, `counters`, `page_size`,
    `max_pages_per_request`, `_slot_of` and `_free_slots`.
    """

    def _alloc_slots(self, num_slots: int) -> None:
        old = getattr(self, "states", np.zeros(0, dtype=np.int8)).shape[0]
        width = self.max_pages_per_request

        def grow(array: np.ndarray | None, shape: tuple[int, ...], fill: int, dtype) -> np.ndarray:
            fresh = np.full(shape, fill, dtype=dtype)
            if array is not None:
                fresh[:old] = array
            return fresh

        self.tables = grow(getattr(self, "tables", None), (num_slots, width), -1, np.int32)
        self.num_pages_of = grow(getattr(self, "num_pages_of", None), (num_slots,), 0, np.int32)
        self.lengths = grow(getattr(self, "lengths", None), (num_slots,), 0, np.int32)
        self.tokens_per_page = grow(
            getattr(self, "tokens_per_page", None), (num_slots,), self.page_size, np.int32
        )
        self.states = grow(getattr(self, "states", None), (num_slots,), 0, np.int8)
        self._marks = grow(getattr(self, "_marks", None), (num_slots,), 0, np.int64)
        # The arrays every append passes first, bound once: the decode hot path saves the
        # attribute look-ups (rebound here whenever the slot arrays are reallocated).
        self._state = (self.refcount, self.free_stack, self.counters, self.tables,
                       self.num_pages_of, self.lengths, self.tokens_per_page, self.states,
                       self._marks)
        self._free_slots.extend(range(num_slots - 1, old - 1, -1))

    def reserve_slots(self, num_requests: int) -> None:
        """Slots for `num_requests` requests at once (for a compiled engine that takes its own)."""
        if self.states.shape[0] < num_requests:
            self._alloc_slots(check_count("num_requests", num_requests, 1))

    def _new_slot(self, request_id: int) -> int:
        if isinstance(request_id, bool) or not isinstance(request_id, (int, np.integer)):
            raise KVCacheError("request_id", request_id, "must be an integer")
        if request_id in self._slot_of:
            raise KVCacheError("request_id", request_id, "already holds pages in this pool")
        if not self._free_slots:
            self._alloc_slots(2 * self.states.shape[0])
        return self._free_slots[-1]  # taken for real by _bind, once nothing can fail

    def _bind(self, request_id: int, slot: int) -> None:
        self._free_slots.pop()
        self._slot_of[int(request_id)] = slot
        self.states[slot] = K.RESIDENT
        self.tokens_per_page[slot] = self.page_size

    def slot(self, request_id: int) -> int:
        """The array row of a request (for batch calls); `KVCacheError` if it holds nothing."""
        try:
            return self._slot_of[request_id]
        except (KeyError, TypeError):
            raise KVCacheError(
                "request_id", request_id, "holds no pages in this pool (never allocated, "
                "or already freed)"
            ) from None

    def _resident_slot(self, request_id: int) -> int:
        slot = self.slot(request_id)
        if self.states[slot] != K.RESIDENT:
            raise KVCacheError("request_id", request_id, "is spilled to the CPU tier; "
                               "restore it first")
        return slot

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._slot_of

    def request_ids(self) -> list[int]:
        """Ids of the requests holding pages (resident or spilled), in allocation order."""
        return list(self._slot_of)
