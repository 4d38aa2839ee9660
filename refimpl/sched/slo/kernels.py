"""The `slo` policy's kernel picks: the cost table's fastest candidate for each part of a step.

Each decode micro-batch (one per length bucket) and the prefill chunk get the fastest
candidate within the SRAM budget; the names go into the plan. A micro-batch is looked up at its
size and its bucket's upper edge (the longest context the bucket holds), the chunk at the next
power of two of its tokens, so the answers repeat and are memoized.
"""

from __future__ import annotations

import numpy as np

__all__ = ["KernelPicks"]


class KernelPicks:
    """Memoized cost-table look-ups; no table, no names."""

    def __init__(self, cost_table, first_bucket_tokens: int) -> None:
        self.cost_table = cost_table
        self.first_bucket_tokens = first_bucket_tokens
        self._picks: dict[tuple[str, int, int], str] = {}

    def names(self, buckets: np.ndarray, chunks: list[tuple[int, int]]) -> tuple[str, ...]:
        """The picks for a decode batch of these `buckets` and these prompt `chunks`."""
        if self.cost_table is None:
            return ()
        names = []
        if len(buckets):
            counts = np.bincount(buckets)
            for bucket in np.flatnonzero(counts):
                edge = self.first_bucket_tokens << int(bucket)  # [edge/2, edge) for bucket > 0
                names.append(self.lookup("decode", int(counts[bucket]), edge))
        if chunks:
            tokens = sum(t for _, t in chunks)
            names.append(self.lookup("prefill", 1, 1 << (tokens - 1).bit_length()))
        return tuple(names)

    def lookup(self, phase: str, batch: int, seq_len: int) -> str:
        """The cost table's pick for (phase, B, T), memoized."""
        key = (phase, batch, seq_len)
        name = self._picks.get(key)
        if name is None:
            name = self._picks[key] = self.cost_table.lookup(phase, batch, seq_len,
                                                             clamp=True)[0]
        return name
