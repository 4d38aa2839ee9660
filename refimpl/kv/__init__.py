"""The paged KV cache: page pool, page tables, forks, and the memory-pressure ladder."""

from refimpl.kv.pool import PagePool, PoolStats, RequestState

__all__ = ["PagePool", "PoolStats", "RequestState"]
