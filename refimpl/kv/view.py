"""The KV facade for plain-Python policies and gates: `KVView`, read-only, over a `KVState`.

The same queries the compiled policies make through `refimpl.kv.manager` (the one definition
of each), in Python: a policy reads `ctx.kv`. On int64 arrays of rows, the page queries run as
one compiled call each (`pages_needed_rows`, `fitting_rows`) rather than a dozen NumPy calls,
which is most of what a plain-Python policy's step costs.
"""

from __future__ import annotations

import numpy as np

from refimpl.kv import _pool_kernels as K
from refimpl.kv import prefix as P
from refimpl.kv.manager import KVState, fitting_rows, pages_needed_of, pages_needed_rows

__all__ = ["KVView"]


class KVView:
    """The facade, read-only, for plain-Python policies and gates."""

    def __init__(self, kv: KVState, num_computed: np.ndarray) -> None:
        self._kv = kv
        self._num_computed = num_computed  # the request table's row, read live
        self.page_size = kv.page_size
        self.num_pages = kv.num_pages

    @property
    def num_free_pages(self) -> int:
        """Pages not held by any request (free, or idle in the prefix cache)."""
        prefix = self._kv.prefix
        return int(self._kv.counters[K.FREE] + prefix.buf[prefix.stats_at + P.IDLE_PAGES])

    def utilization(self) -> float:
        """Share of the pool's pages in use."""
        return (self.num_pages - self.num_free_pages) / self.num_pages

    def pages_held(self, i: int | np.ndarray) -> int | np.ndarray:
        """Pages request `i` (or each row in an array) holds now."""
        slot = self._kv.slot_of[i]
        return np.where(slot >= 0, self._kv.num_pages_of[slot], 0)[()]

    def pages_needed(self, i: int | np.ndarray,
                     num_tokens: int | np.ndarray) -> int | np.ndarray:
        """New pages request `i` takes if `num_tokens` more of its tokens are computed (or,
        for arrays of rows and token counts, each of them)."""
        kv = self._kv
        if _int64_rows(i, num_tokens):
            out = np.empty(len(i), np.int64)
            bad = pages_needed_rows(kv.slot_of, kv.num_pages_of, kv.tokens_per_page,
                                    self._num_computed, self.page_size, i, num_tokens, out)
            if bad >= 0:
                raise self._not_a_row(i[bad])
            return out
        slot = kv.slot_of[i]
        held = np.where(slot >= 0, kv.num_pages_of[slot], 0)
        tokens_per_page = np.where(slot >= 0, kv.tokens_per_page[slot], self.page_size)
        return pages_needed_of(held, tokens_per_page, self._num_computed[i], num_tokens)[()]

    def num_fitting(self, i: np.ndarray, num_tokens: np.ndarray) -> int:
        """How many of the requests `i` (an array of rows, in order), each computing
        `num_tokens[k]` more tokens, fit now: those before the first that computes no token
        or whose new pages, added to those before it, pass `num_free_pages` (one compiled
        call on int64 arrays)."""
        if not _int64_rows(i, num_tokens):
            i, num_tokens = np.asarray(i, np.int64), np.asarray(num_tokens, np.int64)
            if i.ndim != 1 or i.shape != num_tokens.shape:
                raise IndexError(f"rows of shape {i.shape} and token counts of shape "
                                 f"{num_tokens.shape}: one count for each row")
        kv = self._kv
        n = fitting_rows(kv.slot_of, kv.num_pages_of, kv.tokens_per_page, self._num_computed,
                         self.page_size, i, num_tokens, self.num_free_pages)
        if n < 0:
            raise self._not_a_row(i[-1 - n])
        return n

    def _not_a_row(self, i: int) -> IndexError:
        return IndexError(f"row {int(i)} is not a request of this run "
                          f"(rows 0..{len(self._kv.slot_of) - 1})")

    def pages_for_tokens(self, num_tokens: int) -> int:
        """Pages that hold `num_tokens` tokens at full precision."""
        return pages_needed_of(0, self.page_size, 0, num_tokens)


_INT64 = np.dtype(np.int64)  # dtypes of built-in types are singletons: `is` compares cheaply


def _int64_rows(i: object, num_tokens: object) -> bool:
    """Whether `i` and `num_tokens` are one-dimensional int64 arrays of one length (what the
    compiled page queries take as they are)."""
    return (type(i) is np.ndarray and type(num_tokens) is np.ndarray and i.dtype is _INT64
            and num_tokens.dtype is _INT64 and i.ndim == 1 and i.shape == num_tokens.shape)
