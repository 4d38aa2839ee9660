"""The paged KV cache: page pool, page tables, forks, and the memory-pressure ladder."""

from refimpl.kv.ladder import (
    KVCandidate,
    LadderAction,
    LadderConfig,
    LadderStep,
    PressureLadder,
)
from refimpl.kv.pool import PagePool, PoolStats, RequestState

__all__ = [
    "KVCandidate",
    "LadderAction",
    "LadderConfig",
    "LadderStep",
    "PagePool",
    "PoolStats",
    "PressureLadder",
    "RequestState",
]
