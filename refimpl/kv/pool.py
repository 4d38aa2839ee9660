"""The paged KV cache: a pool of fixed-size pages, page tables, refcounts and forks.

Mirrors vLLM's block manager (PagedAttention, Kwon et al. 2023) and the seed's section 4: a page
holds the K and V of `page_size` tokens in every layer; a request owns a page table (its page ids
in order) and grows one page at a time; forks share pages by refcount and copy a shared last
page before writing to it. All state lives in NumPy arrays that Numba kernels update, so a whole
decode batch grows in one call; request ids map to array rows ("slots") through one dict.

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
from refimpl.errors import CapacityError, ConfigError, KVCacheError
from refimpl.kv import _pool_kernels as K
from refimpl.kv.storage import QUANTIZE_FACTOR, KVStorage

__all__ = ["PagePool", "PoolStats", "RequestState"]


class RequestState(IntEnum):
    """Where a request's KV lives."""

    FREE = 0  # the slot holds no request
    RESIDENT = 1  # pages in the pool, ready to run
    SPILLED = 2  # pages moved to the CPU tier; must be restored before it runs


# The states as plain ints for the hot paths: comparing NumPy scalars with an IntEnum member
# goes through the enum machinery and costs about a microsecond each time.
_FREE, _RESIDENT, _SPILLED = (int(state) for state in RequestState)
assert K.RESIDENT == _RESIDENT  # the kernels read the state as a constant


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


_INT32 = np.dtype(np.int32)  # dtypes of built-in types are singletons: `is` compares cheaply
_NO_COPIES = np.empty((0, 2), dtype=np.int32)  # what a growth without copy-on-write returns
_NO_COPIES.flags.writeable = False


def _pages_for(num_tokens: int, tokens_per_page: int) -> int:
    """Pages that hold `num_tokens` tokens."""
    return -(-num_tokens // tokens_per_page)


def _check_count(field: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ConfigError(field, value, "must be an integer")
    if value < minimum:
        raise ConfigError(field, value, f"must be at least {minimum}")
    return int(value)


class PagePool:
    """A pool of `num_pages` KV pages of `page_size` tokens, with per-request page tables.

    The free list is a LIFO stack: fresh pages come out in ascending order, and freed pages are
    reused first (their memory is the most likely to be in cache).
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
        self.num_pages = _check_count("num_pages", num_pages, 1)
        self.page_size = _check_count("page_size", page_size, 1)
        limit = self.num_pages * self.page_size if max_context is None else max_context
        self.max_context = _check_count("max_context", limit, 1)
        self.cpu_tier_pages = _check_count("cpu_tier_pages", cpu_tier_pages, 0)
        self.refcount = np.zeros(self.num_pages, dtype=np.int32)
        # Pages come off the top: page 0 first.
        self.free_stack = np.arange(self.num_pages - 1, -1, -1, dtype=np.int32)
        self.counters = np.array([self.num_pages, 0], dtype=np.int64)  # free, shared pages
        # append_batch's [error index, batch counter, max context]; see its docstring
        self._info = np.array([0, 0, self.max_context], dtype=np.int64)
        self._pending = np.empty(64, dtype=np.int32)  # append_batch's scratch: entries to grow
        self._cow = np.empty((64, 2), dtype=np.int32)  # reused output of copy-on-write pairs
        self._uniform = np.empty(64, dtype=np.int32)  # reused token counts of a uniform batch
        self._uniform_value = None  # the count `_uniform` holds
        self.max_pages_per_request = _pages_for(self.max_context, self.page_size)
        self._slot_of: dict[int, int] = {}
        self._free_slots: list[int] = []
        self._alloc_slots(_check_count("initial_slots", initial_slots, 1))
        self._spilled_pages = 0
        self.storage: KVStorage | None = None  # the K/V arrays, when the pool owns real data

    @classmethod
    def for_model(
        cls, model: ModelConfig, memory_bytes: int, page_size: int = 16, **options: int
    ) -> PagePool:
        """A pool filling `memory_bytes` with pages of `page_size` tokens of `model`'s KV."""
        page_size = _check_count("page_size", page_size, 1)
        page_bytes = page_size * model.kv_bytes_per_token()
        num_pages = int(memory_bytes) // page_bytes
        if num_pages < 1:
            raise CapacityError(
                "memory_bytes", memory_bytes, f"holds no page of {page_bytes} bytes "
                f"({page_size} tokens of {model.name})"
            )
        options.setdefault("max_context", model.max_context)
        return cls(num_pages, page_size, **options)

    def attach_storage(self, num_layers: int, num_kv_heads: int, head_dim: int,
                       quantized_format: str = "int8") -> KVStorage:
        """Give the pool real K/V arrays in the kernels' layout; returns them."""
        if self._slot_of:
            raise KVCacheError("storage", "attach", "must be attached while the pool is empty")
        self.storage = KVStorage(
            _check_count("num_layers", num_layers, 1), self.num_pages, self.page_size,
            _check_count("num_kv_heads", num_kv_heads, 1),
            _check_count("head_dim", head_dim, 1), quantized_format,
        )
        return self.storage

    # ---- slots -------------------------------------------------------------------------
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
            self._alloc_slots(_check_count("num_requests", num_requests, 1))

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
        self.states[slot] = _RESIDENT
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
        if self.states[slot] != _RESIDENT:
            raise KVCacheError("request_id", request_id, "is spilled to the CPU tier; "
                               "restore it first")
        return slot

    # ---- queries -----------------------------------------------------------------------
    @property
    def num_free_pages(self) -> int:
        """Pages on the free list."""
        return int(self.counters[K.FREE])

    @property
    def num_used_pages(self) -> int:
        """Pages held by at least one request."""
        return self.num_pages - self.num_free_pages

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._slot_of

    def request_ids(self) -> list[int]:
        """Ids of the requests holding pages (resident or spilled), in allocation order."""
        return list(self._slot_of)

    def page_table(self, request_id: int) -> list[int]:
        """The request's page ids, in token order."""
        slot = self.slot(request_id)
        return self.tables[slot, : self.num_pages_of[slot]].tolist()

    def write(self, request_id: int, layer: int, start: int, k_rows: np.ndarray,
              v_rows: np.ndarray) -> None:
        """Store K/V rows (n, Hkv, d) of `layer` at positions [start, start + n)."""
        self._require_storage().write(request_id, self.page_table(request_id),
                                      self.length(request_id), layer, start, k_rows, v_rows)

    def read(self, request_id: int, layer: int) -> tuple[np.ndarray, np.ndarray]:
        """The request's K and V rows of `layer`, float32 (length, Hkv, d)."""
        return self._require_storage().read(request_id, self.page_table(request_id),
                                            self.length(request_id), layer)

    def _require_storage(self) -> KVStorage:
        if self.storage is None:
            raise KVCacheError("storage", None, "this pool only keeps accounts; call "
                               "attach_storage() for real K/V arrays")
        return self.storage

    def length(self, request_id: int) -> int:
        """Tokens of KV the request holds."""
        return int(self.lengths[self.slot(request_id)])

    def state(self, request_id: int) -> RequestState:
        """Whether the request is resident or spilled."""
        return RequestState(int(self.states[self.slot(request_id)]))

    def pages_needed(self, num_tokens: int) -> int:
        """Pages a new request of `num_tokens` tokens takes."""
        return _pages_for(_check_count("num_tokens", num_tokens, 0), self.page_size)

    def can_allocate(self, num_tokens: int) -> bool:
        """Whether `allocate` of `num_tokens` would succeed now (changes nothing)."""
        return (
            _check_count("num_tokens", num_tokens, 0) <= self.max_context
            and self.pages_needed(num_tokens) <= self.num_free_pages
        )

    def can_append(self, request_id: int, num_tokens: int = 1) -> bool:
        """Whether `append` would succeed now (changes nothing)."""
        slot = self._resident_slot(request_id)
        num_tokens = _check_count("num_tokens", num_tokens, 0)
        if self.lengths[slot] + num_tokens > self.max_context:
            return False
        need = self._run_append(np.array([slot], np.int32), np.array([num_tokens], np.int32),
                                True, self._cow)
        return need <= self.num_free_pages

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
            num_spilled_pages=self._spilled_pages,
        )

    # ---- operations --------------------------------------------------------------------
    def allocate(self, request_id: int, num_tokens: int) -> list[int]:
        """Pages for a new request's `num_tokens` prompt tokens; returns its page table."""
        num_tokens = _check_count("num_tokens", num_tokens, 0)
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

    def append(self, request_id: int, num_tokens: int = 1) -> list[tuple[int, int]]:
        """Grow a request by `num_tokens`; returns copy-on-write copies `(src, dst)` made."""
        slot = self._resident_slot(request_id)
        tokens = np.array([_check_count("num_tokens", num_tokens, 0)], np.int32)
        cow = self._grow_slots(np.array([slot], np.int32), tokens)
        return [(int(a), int(b)) for a, b in cow]

    def append_batch(self, slots: np.ndarray, num_tokens: np.ndarray | int = 1) -> np.ndarray:
        """Grow many resident requests at once (slots from `slot()`), all or nothing.

        The hot path of a decode step: one Numba call checks and grows the whole batch.
        Returns the copy-on-write pairs as an `(n, 2)` int32 array of `(src, dst)` pages.
        """
        if not (type(slots) is np.ndarray and slots.dtype is _INT32 and slots.ndim == 1
                and slots.flags.c_contiguous):  # the engine's own arrays skip the conversion
            slots = np.asarray(slots)
            if slots.ndim != 1 or slots.dtype.kind not in "iu":
                raise KVCacheError("slots", f"{slots.dtype} rank {slots.ndim}",
                                   "must be a one-dimensional integer array")
            slots = np.ascontiguousarray(slots, dtype=np.int32)
        if isinstance(num_tokens, (int, np.integer)):
            if self._uniform.shape[0] < slots.shape[0] or self._uniform_value != num_tokens:
                # reused while the count repeats (a decode step is all 1s): np.full costs us
                self._uniform = np.full(max(2 * slots.shape[0], self._uniform.shape[0]),
                                        num_tokens, dtype=np.int32)
                self._uniform_value = num_tokens
            tokens = self._uniform[: slots.shape[0]]
        else:
            tokens = np.ascontiguousarray(num_tokens, dtype=np.int32)
            if tokens.shape != slots.shape:
                raise KVCacheError("num_tokens", tokens.shape, f"must match slots {slots.shape}")
        return self._grow_slots(slots, tokens)

    def _run_append(self, slots: np.ndarray, tokens: np.ndarray, dry_run: bool,
                    cow: np.ndarray) -> int:
        if self._pending.shape[0] < slots.shape[0]:
            self._pending = np.empty(2 * slots.shape[0], dtype=np.int32)
        return K.append_batch(*self._state, slots, tokens, dry_run, cow, self._pending,
                              self._info)

    def _grow_slots(self, slots: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        if self._cow.shape[0] < slots.shape[0]:
            self._cow = np.empty((2 * slots.shape[0], 2), dtype=np.int32)
        done = self._run_append(slots, tokens, False, self._cow)
        if done == 0:
            return _NO_COPIES
        if done > 0:
            copies = self._cow[:done].copy()  # (src, dst) page pairs; the buffer is reused
            if self.storage is not None:
                self.storage.on_copy(copies)
            return copies
        i = int(self._info[K.INFO_INDEX])
        if done == K.NO_PAGES:
            raise CapacityError("num_tokens", int(tokens.sum()), f"growing {slots.shape[0]} "
                                f"request(s) needs {i} pages, {self.num_free_pages} are free")
        if done == K.BAD_SLOT:
            raise KVCacheError("slots", int(slots[i]), "is not the slot of a resident request")
        if done == K.DUPLICATE:
            raise KVCacheError("slots", int(slots[i]), "appears twice in one batch")
        if done == K.NEGATIVE:
            raise KVCacheError("num_tokens", int(tokens[i]), "must be >= 0")
        raise CapacityError("num_tokens", int(tokens[i]), f"request "
                            f"{self._request_of(int(slots[i]))} holds "
                            f"{int(self.lengths[slots[i]])} tokens; the model's max context "
                            f"is {self.max_context}")

    def _request_of(self, slot: int) -> int:
        return next(r for r, s in self._slot_of.items() if s == slot)

    def free(self, request_id: int) -> None:
        """Release a request's pages (resident) or its CPU-tier copy (spilled)."""
        self.free_batch([request_id])

    def free_batch(self, request_ids: Sequence[int]) -> None:
        """Free many requests at once, their pages released in one kernel call."""
        slots = [self.slot(r) for r in request_ids]
        if len(set(slots)) != len(slots):
            raise KVCacheError("request_ids", list(request_ids), "names a request twice")
        resident = [s for s in slots if self.states[s] == _RESIDENT]
        self._release(resident, 0)
        for request_id, slot in zip(request_ids, slots, strict=True):
            if self.states[slot] == _SPILLED:
                self._spilled_pages -= int(self.num_pages_of[slot])
                self.num_pages_of[slot] = 0
            del self._slot_of[request_id]
            self.lengths[slot] = 0
            self.states[slot] = _FREE
            self._free_slots.append(slot)
            if self.storage is not None:
                self.storage.on_free(request_id)

    def _release(self, slots: Sequence[int], keep: int) -> None:
        K.release(self.refcount, self.free_stack, self.counters, self.tables, self.num_pages_of,
                  np.asarray(slots, dtype=np.int32), keep)

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

    def can_quantize(self, request_id: int) -> bool:
        """Whether `quantize` would succeed now: resident, with no page shared (changes nothing)."""
        slot = self.slot(request_id)
        owned = self.refcount[self.tables[slot, : self.num_pages_of[slot]]]
        return bool(self.states[slot] == _RESIDENT and not np.any(owned > 1))

    def quantize(self, request_id: int, factor: int) -> list[int]:
        """Repack a request's tokens `factor` times denser (e.g. 2 for 16-bit -> INT8).

        Pages keep their size in bytes, so a page now holds `factor` times more tokens; the
        request keeps the first pages of its table and frees the rest. Only pages the request
        owns alone can be rewritten in place: a request sharing pages is refused.
        Returns the pages freed.
        """
        slot = self._resident_slot(request_id)
        factor = _check_count("factor", factor, 2)
        if not self.can_quantize(request_id):
            raise KVCacheError("request_id", request_id, "shares pages with a fork; only "
                               "pages held alone can be quantized in place")
        if self.storage is not None and (factor, self.is_quantized(request_id)) != (
                QUANTIZE_FACTOR, False):
            raise KVCacheError("factor", factor, f"pages with real data quantize once, from "
                               f"float32 to 8 bits: factor {QUANTIZE_FACTOR}")
        new_tpp = int(self.tokens_per_page[slot]) * factor
        keep = _pages_for(int(self.lengths[slot]), new_tpp)
        freed = self.tables[slot, keep : self.num_pages_of[slot]].tolist()
        if self.storage is not None:
            self.storage.on_quantize(request_id, self.page_table(request_id),
                                     int(self.lengths[slot]))
        self.tokens_per_page[slot] = new_tpp
        self._release([slot], keep)
        return freed

    def is_quantized(self, request_id: int) -> bool:
        """Whether the request's pages were repacked by `quantize`."""
        return bool(self.tokens_per_page[self.slot(request_id)] > self.page_size)

    def can_spill(self, request_id: int) -> bool:
        """Whether `spill` would succeed now: resident, and the CPU tier has room."""
        slot = self.slot(request_id)
        return bool(self.states[slot] == _RESIDENT
                    and self._spilled_pages + self.num_pages_of[slot] <= self.cpu_tier_pages)

    def spill(self, request_id: int) -> int:
        """Move a resident request's pages to the CPU tier; returns the pages moved.

        Pages shared with a fork stay in the pool for the fork; the spilled copy is private,
        so a restored request no longer shares them.
        """
        slot = self._resident_slot(request_id)
        moved = int(self.num_pages_of[slot])
        if self._spilled_pages + moved > self.cpu_tier_pages:
            raise CapacityError("request_id", request_id, f"needs {moved} CPU-tier pages, "
                                f"{self.cpu_tier_pages - self._spilled_pages} are free")
        if self.storage is not None:
            self.storage.on_spill(request_id, self.page_table(request_id),
                                  int(self.lengths[slot]))
        self._release([slot], 0)
        self.num_pages_of[slot] = moved  # now counts CPU-tier pages
        self._spilled_pages += moved
        self.states[slot] = _SPILLED
        return moved

    def can_restore(self, request_id: int) -> bool:
        """Whether `restore` would succeed now (changes nothing)."""
        slot = self.slot(request_id)
        return (self.states[slot] == _SPILLED
                and int(self.num_pages_of[slot]) <= self.num_free_pages)

    def restore(self, request_id: int) -> list[int]:
        """Bring a spilled request back into fresh pages; returns its new page table."""
        slot = self.slot(request_id)
        if self.states[slot] != _SPILLED:
            raise KVCacheError("request_id", request_id, "is not spilled")
        need = int(self.num_pages_of[slot])
        if need > self.num_free_pages:
            raise CapacityError("request_id", request_id, f"needs {need} pages to come back, "
                                f"{self.num_free_pages} are free")
        self._spilled_pages -= need
        length = int(self.lengths[slot])
        self.num_pages_of[slot] = 0
        self.lengths[slot] = 0
        self.states[slot] = _RESIDENT
        self._grow_slots(np.array([slot], np.int32), np.array([length], np.int32))
        if self.storage is not None:
            self.storage.on_restore(request_id, self.page_table(request_id), length)
        return self.page_table(request_id)

    def free_all(self) -> None:
        """Free every request in the pool."""
        self.free_batch(list(self._slot_of))
