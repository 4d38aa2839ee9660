"""Analytic costs of an attention kernel candidate: SRAM working set, HBM traffic, FLOPs.

A candidate is a tile choice (`PrefillTiles`, `PagedTiles`); its costs for a shape are what
the offline cost model (seed section 1: `mem_sram`, `mem_hbm`, arithmetic intensity) ranks.
The formulas mirror the kernels' loops one for one, and tests check them against the bytes and
FLOPs the kernels count while they run, so they are exact, not estimates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from refimpl.errors import KernelInputError

__all__ = [
    "FLOAT_BYTES",
    "PAGE_ID_BYTES",
    "KernelCosts",
    "PagedTiles",
    "PrefillTiles",
    "chunk_costs",
    "decode_costs",
    "paged_costs",
    "prefill_costs",
]

FLOAT_BYTES = 4  # float32: queries, outputs, scratch, float KV, quantization scales
PAGE_ID_BYTES = 4  # int32 page-table entries
KEY_ROW_BYTES = 8  # int64 row of a key in the K/V arrays, held in scratch per tile key


@dataclass(frozen=True)
class KernelCosts:
    """What one kernel call costs: analytic for a candidate, or counted by the kernel."""

    sram_bytes: int  # scratch ("SRAM") working set of one work item, i.e. of one core
    hbm_read_bytes: int  # bytes read from the big arrays (Q, K, V, scales, page tables)
    hbm_write_bytes: int  # bytes written to the output
    flops: int  # multiply-adds x 2 of the two GEMMs, on every tile element visited

    @property
    def hbm_bytes(self) -> int:
        """Main-memory traffic, both directions."""
        return self.hbm_read_bytes + self.hbm_write_bytes

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per HBM byte: above the hardware's ridge point the kernel is compute-bound."""
        return self.flops / self.hbm_bytes


def _positive(field: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise KernelInputError(field, value, "must be an integer >= 1")


def scratch_bytes(rows: int, keys: int, head_dim: int, kv_heads: int = 1) -> int:
    """Scratch of one work item: `rows` query rows against tiles of `keys` keys of each of its
    `kv_heads` KV heads."""
    floats = (
        rows * head_dim  # Q tile, pre-scaled
        + 2 * kv_heads * keys * head_dim  # K and V tiles
        + rows * keys  # scores, overwritten by probabilities
        + 2 * rows * head_dim  # output accumulator and the P @ V product
        + 3 * rows  # running max, running sum and rescale factor per row
    )
    # Each key of this tile and of the next: its row in the K/V arrays, its K and V scales.
    key_slots = 2 * kv_heads * keys
    return FLOAT_BYTES * floats + key_slots * (KEY_ROW_BYTES + 2 * FLOAT_BYTES)


@dataclass(frozen=True)
class PrefillTiles:
    """A prefill candidate: query and key tile lengths, and query heads of one KV group per tile.

    Stacking `heads_per_tile` query heads that share a KV head makes each tile GEMM taller and
    reads the K/V tile once for all of them.
    """

    tile_q: int = 64  # query positions per tile
    tile_k: int = 64  # key positions per tile
    heads_per_tile: int = 1  # query heads stacked into one tile; divides Hq // Hkv

    def __post_init__(self) -> None:
        _positive("tile_q", self.tile_q)
        _positive("tile_k", self.tile_k)
        _positive("heads_per_tile", self.heads_per_tile)

    def sram_bytes(self, head_dim: int) -> int:
        """Scratch working set of one work item."""
        return scratch_bytes(self.heads_per_tile * self.tile_q, self.tile_k, head_dim)


@dataclass(frozen=True)
class PagedTiles:
    """A decode / chunked-prefill candidate over paged KV: whole pages per key tile.

    `kv_heads_per_tile` > 1 (with whole KV groups, `heads_per_tile == Hq // Hkv`) gathers
    several KV heads of each page at once: their rows sit side by side in a page, so reading
    them together streams the page instead of striding through it.
    """

    tile_q: int = 64  # query positions per tile (decode has one)
    pages_per_tile: int = 4  # KV pages per key tile
    heads_per_tile: int = 1  # query heads stacked into one tile; divides Hq // Hkv
    kv_heads_per_tile: int = 1  # KV heads gathered into one work item; divides Hkv

    def __post_init__(self) -> None:
        _positive("tile_q", self.tile_q)
        _positive("pages_per_tile", self.pages_per_tile)
        _positive("heads_per_tile", self.heads_per_tile)
        _positive("kv_heads_per_tile", self.kv_heads_per_tile)

    def sram_bytes(self, head_dim: int, page_size: int) -> int:
        """Scratch working set of one work item."""
        keys = self.pages_per_tile * page_size
        rows = self.kv_heads_per_tile * self.heads_per_tile * self.tile_q
        return scratch_bytes(rows, keys, head_dim, self.kv_heads_per_tile)


def _check_group(heads_per_tile: int, num_q_heads: int, num_kv_heads: int,
                 kv_heads_per_tile: int = 1) -> int:
    """Work items per KV head: `(Hq // Hkv) // heads_per_tile`."""
    if num_q_heads % num_kv_heads:
        raise KernelInputError("num_q_heads", num_q_heads, f"not a multiple of {num_kv_heads=}")
    group = num_q_heads // num_kv_heads
    if group % heads_per_tile:
        raise KernelInputError("heads_per_tile", heads_per_tile,
                               f"must divide the query heads per KV head ({group})")
    if num_kv_heads % kv_heads_per_tile:
        raise KernelInputError("kv_heads_per_tile", kv_heads_per_tile,
                               f"must divide the KV heads ({num_kv_heads})")
    check_whole_groups(heads_per_tile, group, kv_heads_per_tile)
    return group // heads_per_tile


def check_whole_groups(heads_per_tile: int, group: int, kv_heads_per_tile: int) -> None:
    """A work item over several KV heads takes each one's whole group of query heads."""
    if kv_heads_per_tile > 1 and heads_per_tile != group:
        raise KernelInputError("kv_heads_per_tile", kv_heads_per_tile,
                               f"above 1 needs whole groups: heads_per_tile={group}, "
                               f"not {heads_per_tile}")


def prefill_costs(tiles: PrefillTiles, *, batch: int, num_q_heads: int, num_kv_heads: int,
                  seq_len: int, head_dim: int, causal: bool = True) -> KernelCosts:
    """Costs of `prefill_attention` with `tiles` on `(B, Hq, T, d)` queries."""
    chunks = _check_group(tiles.heads_per_tile, num_q_heads, num_kv_heads)
    kv_reads = flops = 0
    for q0 in range(0, seq_len, tiles.tile_q):  # one iteration per query tile
        rows = min(tiles.tile_q, seq_len - q0)
        keys = min(seq_len, q0 + rows) if causal else seq_len  # keys this tile attends to
        kv_reads += 2 * keys * head_dim * FLOAT_BYTES  # K and V, once per work item
        flops += 2 * 2 * tiles.heads_per_tile * rows * keys * head_dim  # QK^T and PV
    items = batch * num_kv_heads * chunks  # work items per query tile
    qo_bytes = batch * num_q_heads * seq_len * head_dim * FLOAT_BYTES
    return KernelCosts(
        sram_bytes=tiles.sram_bytes(head_dim),
        hbm_read_bytes=qo_bytes + items * kv_reads,
        hbm_write_bytes=qo_bytes,
        flops=items * flops,
    )


def paged_costs(tiles: PagedTiles, *, context_lens: Sequence[int], num_queries: int,
                num_q_heads: int, num_kv_heads: int, head_dim: int, page_size: int,
                kv_bytes: int = FLOAT_BYTES) -> KernelCosts:
    """Costs of the paged kernel: per sequence, the last `num_queries` of its context attend.

    `kv_bytes` is the bytes per cached element: 4 for float32 pages, 1 for INT8 or FP8 pages,
    which also read one float32 scale per (page, KV head) for K and for V.
    """
    kv_heads = tiles.kv_heads_per_tile
    chunks = _check_group(tiles.heads_per_tile, num_q_heads, num_kv_heads, kv_heads)
    scale_bytes = 0 if kv_bytes == FLOAT_BYTES else FLOAT_BYTES
    reads = flops = 0
    for context_len in context_lens:
        start = context_len - num_queries  # position of the first query
        for q0 in range(0, num_queries, tiles.tile_q):
            rows = min(tiles.tile_q, num_queries - q0)
            keys = start + q0 + rows  # causal: keys up to the tile's last query
            pages = -(-keys // page_size)
            reads += 2 * kv_heads * keys * head_dim * kv_bytes  # K and V rows
            reads += pages * (PAGE_ID_BYTES + 2 * kv_heads * scale_bytes)  # ids, K/V scales
            flops += 2 * 2 * kv_heads * tiles.heads_per_tile * rows * keys * head_dim
    items = num_kv_heads // kv_heads * chunks  # work items per (sequence, query tile)
    qo_bytes = len(context_lens) * num_q_heads * num_queries * head_dim * FLOAT_BYTES
    return KernelCosts(
        sram_bytes=tiles.sram_bytes(head_dim, page_size),
        hbm_read_bytes=qo_bytes + items * reads,
        hbm_write_bytes=qo_bytes,
        flops=items * flops,
    )


def decode_costs(tiles: PagedTiles, *, context_lens: Sequence[int], num_q_heads: int,
                 num_kv_heads: int, head_dim: int, page_size: int,
                 kv_bytes: int = FLOAT_BYTES) -> KernelCosts:
    """Costs of `decode_attention`: one query per sequence (`tiles.tile_q` plays no part)."""
    return paged_costs(PagedTiles(1, tiles.pages_per_tile, tiles.heads_per_tile,
                                  tiles.kv_heads_per_tile),
                       context_lens=context_lens, num_queries=1, num_q_heads=num_q_heads,
                       num_kv_heads=num_kv_heads, head_dim=head_dim, page_size=page_size,
                       kv_bytes=kv_bytes)


def chunk_costs(tiles: PagedTiles, *, start: int, num_queries: int, num_q_heads: int,
                num_kv_heads: int, head_dim: int, page_size: int,
                kv_bytes: int = FLOAT_BYTES) -> KernelCosts:
    """Costs of `chunk_attention`: queries at `[start, start + num_queries)` of one request."""
    return paged_costs(tiles, context_lens=[start + num_queries], num_queries=num_queries,
                       num_q_heads=num_q_heads, num_kv_heads=num_kv_heads, head_dim=head_dim,
                       page_size=page_size, kv_bytes=kv_bytes)
