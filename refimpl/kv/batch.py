"""The page pool's growth and its decode hot path: a whole batch grown in one kernel call.

Mirrors vLLM's per-step `allocate_slots` over a batch: a decode step grows every running
request by a token, which `append_batch` checks and applies in one Numba call
(`_pool_kernels.append_batch`), all or nothing; `append` is the batch of one. `BatchGrowth`
is a part of `PagePool` (`refimpl.kv.pool`): it owns the call's scratch buffers and turns the
kernel's return codes into the pool's errors; `allocate` grows through it too.
"""

from __future__ import annotations

import numpy as np

from refimpl.errors import CapacityError, KVCacheError
from refimpl.kv import _pool_kernels as K
from refimpl.kv._checks import check_count

__all__ = ["BatchGrowth"]

_INT32 = np.dtype(np.int32)  # dtypes of built-in types are singletons: `is` compares cheaply
_NO_COPIES = np.empty((0, 2), dtype=np.int32)  # what a growth without copy-on-write returns
_NO_COPIES.flags.writeable = False


class BatchGrowth:
    """`PagePool`'s growth: `append`, `append_batch` and the growth `allocate` uses.

    Uses the pool's `_state` (its arrays in the kernel's argument order, rebound whenever the
    slot arrays grow), `lengths`, `max_context`, `num_free_pages`, `storage`, `_slot_of` and
    `_resident_slot`.
    The buffers below are reused from call to call: a decode step allocates nothing.
    """

    def _init_growth(self, max_context: int) -> None:
        # append_batch's [error index, batch counter, max context]; see the kernel's docstring
        self._info = np.array([0, 0, max_context], dtype=np.int64)
        self._pending = np.empty(64, dtype=np.int32)  # the kernel's scratch: entries to grow
        self._cow = np.empty((64, 2), dtype=np.int32)  # reused output of copy-on-write pairs
        self._uniform = np.empty(64, dtype=np.int32)  # reused token counts of a uniform batch
        self._uniform_value = None  # the count `_uniform` holds

    def append(self, request_id: int, num_tokens: int = 1) -> list[tuple[int, int]]:
        """Grow a request by `num_tokens`; returns copy-on-write copies `(src, dst)` made."""
        slot = self._resident_slot(request_id)
        tokens = np.array([_token_count(num_tokens, self.max_context)], np.int32)
        cow = self._grow_slots(np.array([slot], np.int32), tokens)
        return [(int(a), int(b)) for a, b in cow]

    def can_append(self, request_id: int, num_tokens: int = 1) -> bool:
        """Whether `append` would succeed now (changes nothing)."""
        slot = self._resident_slot(request_id)
        num_tokens = check_count("num_tokens", num_tokens, 0)
        if self.lengths[slot] + num_tokens > self.max_context:
            return False
        need = self._run_append(np.array([slot], np.int32), np.array([num_tokens], np.int32),
                                True, self._cow)
        return need <= self.num_free_pages

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
                _token_count(num_tokens, self.max_context)
                self._uniform = np.full(max(2 * slots.shape[0], self._uniform.shape[0]),
                                        num_tokens, dtype=np.int32)
                self._uniform_value = num_tokens
            tokens = self._uniform[: slots.shape[0]]
        else:
            tokens = _token_counts(num_tokens, self.max_context)
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


def _token_count(num_tokens: object, max_tokens: int) -> int:
    """One growth's token count: an integer from 0 to `max_tokens` (so int32 holds it)."""
    num_tokens = check_count("num_tokens", num_tokens, 0)
    if num_tokens > max_tokens:
        raise CapacityError("num_tokens", num_tokens, f"exceeds the pool's max context of "
                            f"{max_tokens} tokens")
    return num_tokens


def _token_counts(values: object, max_tokens: int) -> np.ndarray:
    """A batch's token counts as int32, checked before the cast (which would wrap or
    truncate): integers from 0 to `max_tokens`."""
    array = np.asarray(values)
    if array.dtype.kind not in "iu":
        raise KVCacheError("num_tokens", str(array.dtype), "must be an integer array")
    if array.size and array.min() < 0:
        raise KVCacheError("num_tokens", int(array.min()), "must be >= 0")
    if array.size and array.max() > max_tokens:
        raise CapacityError("num_tokens", int(array.max()), f"exceeds the pool's max context "
                            f"of {max_tokens} tokens")
    return np.ascontiguousarray(array, dtype=np.int32)
