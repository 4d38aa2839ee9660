"""The page pool as schedulers see it: pages a request needs, and one batch growth per step.

Mirrors vLLM v1's KV-cache manager facade: a policy asks how many pages scheduling `n` more
tokens of a request would take, keeps its own running count of free pages while it plans, and
the engine then grows every scheduled request in one `PagePool.append_batch` call, which cannot
fail because the plan never asked for more than was free.
"""

from __future__ import annotations

import numpy as np

from refimpl.kv.pool import PagePool

__all__ = ["KVManager"]


class KVManager:
    """Request-level operations on a `PagePool` for the scheduler and the engine."""

    def __init__(self, pool: PagePool) -> None:
        self.pool = pool
        self.page_size = pool.page_size

    @property
    def num_free_pages(self) -> int:
        """Pages not held by any request."""
        return self.pool.num_free_pages

    def pages_needed(self, request, num_tokens: int) -> int:
        """New pages the request takes if `num_tokens` more of its tokens are computed."""
        slot = request.kv_slot
        if slot < 0:
            return -(-(request.num_computed + num_tokens) // self.page_size)
        tokens_per_page = int(self.pool.tokens_per_page[slot])
        held = int(self.pool.num_pages_of[slot])
        return -(-(request.num_computed + num_tokens) // tokens_per_page) - held

    def pages_held(self, request) -> int:
        """Pages the request holds now."""
        return int(self.pool.num_pages_of[request.kv_slot]) if request.kv_slot >= 0 else 0

    def pages_for_tokens(self, num_tokens: int) -> int:
        """Pages that hold `num_tokens` tokens at full precision."""
        return -(-num_tokens // self.page_size)

    def grow(self, requests, num_tokens) -> None:
        """Give every request room for its scheduled tokens, in one pool call."""
        for request in requests:
            if request.kv_slot < 0:
                self.pool.allocate(request.request_id, 0)
                request.kv_slot = self.pool.slot(request.request_id)
        slots = np.fromiter((r.kv_slot for r in requests), dtype=np.int32, count=len(requests))
        self.pool.append_batch(slots, np.asarray(num_tokens, dtype=np.int32))

    def free(self, request) -> None:
        """Release the request's pages, if it holds any."""
        if request.kv_slot >= 0:
            self.pool.free(request.request_id)
            request.kv_slot = -1

    def utilization(self) -> float:
        """Share of the pool's pages in use."""
        return self.pool.num_used_pages / self.pool.num_pages
