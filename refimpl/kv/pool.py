"""The paged KV cache: a pool of fixed-size pages, page tables, refcounts and forks.

Mirrors vLLM's block manager (PagedAttention, Kwon et al. 2023) and the seed's section 4: a page
holds the K and V of `page_size` tokens in every layer; a request owns a page table (its page ids
in order) and grows one page at a time; forks share pages by refcount and copy a shared last
page before writing to it. All state lives in NumPy arrays that Numba kernels update, so a whole
decode batch grows in one call; request ids map to array rows ("slots") through one dict. This
module holds the page bookkeeping (allocate/free/fork, queries); the slot table (request ids
to rows) is in `refimpl.kv.slots`, real K/V data in `refimpl.kv.attach`, growth (`append`,
the decode batch's `append_batch`) in `refimpl.kv.batch`, the quantize/spill/restore tiers
in `refimpl.kv.tiers`.

Invariants (checked by the tests after every operation): used + free = total pages; a page's
refcount equals the number of page tables holding it; a page is free exactly when its refcount
is 0; a failed call changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from refimpl.config.model import ModelConfig
from refimpl.errors import CapacityError, KVCacheError
from refimpl.kv import _pool_kernels as K
from refimpl.kv._checks import check_count, pages_for
from refimpl.kv.attach import StorageAttachment
from refimpl.kv.batch import BatchGrowth
from refimpl.kv.slots import SlotTable
from refimpl.kv.storage import KVStorage
from refimpl.kv.tiers import PageTiers

__all__ = ["PagePool", "PoolStats", "RequestState"]


class RequestState(IntEnum):
    """Where a request's KV lives."""

    FREE = 0  # the slot holds no request
    RESIDENT = 1  # pages in the pool, ready to run
    SPILLED = 2  # pages moved to the CPU tier; must be restored before it runs


# The states as plain ints for the hot paths: comparing NumPy scalars with an IntEnum member
# goes through the enum machinery and costs about a microsecond each time.
_FREE, _RESIDENT, _SPILLED = (int(state) for state in RequestState)
assert (K.FREE_SLOT, K.RESIDENT, K.SPILLED_SLOT) == (_FREE, _RESIDENT, _SPILLED)  # kernels' copy


@dataclass(frozen=True)
class PoolStats:
    """A snapshot of the pool, cheap enough to take every scheduler tick."""

    num_pages: int
    num_used_pages: int
    num_free_pages: int
    utilization: float  # used / total pages
    wasted_token_slots: int  # unused slots in resident requests' last pages
    num_resident: int
    num_spilled: int
    num_spilled_pages: int  # pages held in the CPU tier


class PagePool(SlotTable, StorageAttachment, BatchGrowth, PageTiers):
    """A pool of `num_pages` KV pages of `page_size` tokens, with per-request page tables.

    The free list is a LIFO stack: fresh pages come out in ascending order, and freed pages are
    reused first (their memory is the most likely to be in cache). `SlotTable` maps request ids
    to array rows, `StorageAttachment` adds real K/V data, `BatchGrowth` growth (`append`, the
    batch hot path `append_batch`), `PageTiers` the quantize/spill/restore moves.
    """

    def __init__(
        self,
        num_pages: int,
        page_size: int,
        *,
        max_context: int | None = None,
        cpu_tier_pages: int = 0,
        initial_slots: int = 64,
    ) -> None:
        self.num_pages = check_count("num_pages", num_pages, 1)
        self.page_size = check_count("page_size", page_size, 1)
        limit = self.num_pages * self.page_size if max_context is None else max_context
        self.max_context = check_count("max_context", limit, 1)
        self.cpu_tier_pages = check_count("cpu_tier_pages", cpu_tier_pages, 0)
        self.refcount = np.zeros(self.num_pages, dtype=np.int32)
        # Pages come off the top: page 0 first.
        self.free_stack = np.arange(self.num_pages - 1, -1, -1, dtype=np.int32)
        # [K.FREE, K.SHARED, K.SPILLED]: free, shared and CPU-tier pages
        self.counters = np.array([self.num_pages, 0, 0], dtype=np.int64)
        self._init_growth(self.max_context)
        self.max_pages_per_request = pages_for(self.max_context, self.page_size)
        self._slot_of: dict[int, int] = {}
        self._free_slots: list[int] = []
        self._alloc_slots(check_count("initial_slots", initial_slots, 1))
        self.storage: KVStorage | None = None  # the K/V arrays, when the pool owns real data

    @classmethod
    def for_model(
        cls, model: ModelConfig, memory_bytes: int, page_size: int = 16, **options: int
    ) -> PagePool:
        """A pool filling `memory_bytes` with pages of `page_size` tokens of `model`'s KV."""
        page_size = check_count("page_size", page_size, 1)
        page_bytes = page_size * model.kv_bytes_per_token()
        num_pages = int(memory_bytes) // page_bytes
        if num_pages < 1:
            raise CapacityError(
                "memory_bytes", memory_bytes, f"holds no page of {page_bytes} bytes "
                f"({page_size} tokens of {model.name})"
            )
        options.setdefault("max_context", model.max_context)
        return cls(num_pages, page_size, **options)

    # ---- queries -----------------------------------------------------------------------
    @property
    def num_free_pages(self) -> int:
        """Pages on the free list."""
        return int(self.counters[K.FREE])

    @property
    def num_used_pages(self) -> int:
        """Pages held by at least one request."""
        return self.num_pages - self.num_free_pages

    def page_table(self, request_id: int) -> list[int]:
        """The request's page ids, in token order."""
        slot = self.slot(request_id)
        return self.tables[slot, : self.num_pages_of[slot]].tolist()

    def length(self, request_id: int) -> int:
        """Tokens of KV the request holds."""
        return int(self.lengths[self.slot(request_id)])

    def state(self, request_id: int) -> RequestState:
        """Whether the request is resident or spilled."""
        return RequestState(int(self.states[self.slot(request_id)]))

    def pages_needed(self, num_tokens: int) -> int:
        """Pages a new request of `num_tokens` tokens takes."""
        return pages_for(check_count("num_tokens", num_tokens, 0), self.page_size)

    def can_allocate(self, num_tokens: int) -> bool:
        """Whether `allocate` of `num_tokens` would succeed now (changes nothing)."""
        return (
            check_count("num_tokens", num_tokens, 0) <= self.max_context
            and self.pages_needed(num_tokens) <= self.num_free_pages
        )

    def stats(self) -> PoolStats:
        """Used and free pages, utilization, waste and requests per state."""
        used = self.num_used_pages
        waste = int(K.usage(self.num_pages_of, self.lengths, self.tokens_per_page, self.states,
                            _RESIDENT))
        return PoolStats(
            num_pages=self.num_pages,
            num_used_pages=used,
            num_free_pages=self.num_free_pages,
            utilization=used / self.num_pages,
            wasted_token_slots=waste,
            num_resident=int(np.count_nonzero(self.states == _RESIDENT)),
            num_spilled=int(np.count_nonzero(self.states == _SPILLED)),
            num_spilled_pages=self.num_spilled_pages,
        )

    # ---- operations --------------------------------------------------------------------
    def allocate(self, request_id: int, num_tokens: int) -> list[int]:
        """Pages for a new request's `num_tokens` prompt tokens; returns its page table."""
        num_tokens = check_count("num_tokens", num_tokens, 0)
        self._check_fits(request_id, num_tokens, self.pages_needed(num_tokens))
        slot = self._new_slot(request_id)
        self._bind(request_id, slot)
        self._grow_slots(np.array([slot], np.int32), np.array([num_tokens], np.int32))
        return self.page_table(request_id)

    def _check_fits(self, request_id: int, num_tokens: int, need: int) -> None:
        if num_tokens > self.max_context:
            raise CapacityError("num_tokens", num_tokens, f"request {request_id} would exceed "
                                f"the model's max context of {self.max_context} tokens")
        if need > self.num_free_pages:
            raise CapacityError("num_tokens", num_tokens, f"request {request_id} needs {need} "
                                f"pages, {self.num_free_pages} are free")

    def free(self, request_id: int) -> None:
        """Release a request's pages (resident) or its CPU-tier copy (spilled)."""
        self.free_batch([request_id])

    def free_batch(self, request_ids: Sequence[int]) -> None:
        """Free many requests at once, their pages released in one kernel call."""
        slots = [self.slot(r) for r in request_ids]
        refusal = K.free_slots(self.refcount, self.free_stack, self.counters, self.tables,
                               self.num_pages_of, self.lengths, self.states,
                               np.asarray(slots, dtype=np.int32))
        if refusal == K.DUPLICATE:  # the only refusal left: every slot came from `slot()`
            raise KVCacheError("request_ids", list(request_ids), "names a request twice")
        for request_id, slot in zip(request_ids, slots, strict=True):
            del self._slot_of[request_id]
            self._free_slots.append(slot)
            if self.storage is not None:
                self.storage.on_free(request_id)

    def fork(self, src_id: int, dst_id: int) -> list[int]:
        """Start request `dst_id` sharing all of `src_id`'s pages (e.g. a shared prompt)."""
        src = self._resident_slot(src_id)
        dst = self._new_slot(dst_id)
        self._bind(dst_id, dst)
        K.share(self.refcount, self.counters, self.tables, self.num_pages_of, self.lengths,
                self.tokens_per_page, src, dst)
        if self.storage is not None:
            self.storage.on_fork(src_id, dst_id)
        return self.page_table(dst_id)

    def free_all(self) -> None:
        """Free every request in the pool."""
        self.free_batch(list(self._slot_of))
