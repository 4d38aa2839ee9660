"""Kernel candidates: every tile choice the attention kernels offer, and its analytic costs.

Seed section 1's `k`: for each candidate and shape `(B, T)` the kernels' own cost formulas
give `mem_sram`, `mem_hbm`, FLOPs and arithmetic intensity; `tile_steps` counts the tile
iterations (the per-tile overhead a regression needs beside FLOPs and bytes). The kernels have
no split-KV (flash-decoding) variant, so decode candidates differ only in their tiles.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from refimpl.config import ModelConfig
from refimpl.errors import ConfigError
from refimpl.kernels import (
    KernelCosts,
    PagedTiles,
    PrefillTiles,
    chunk_costs,
    decode_costs,
    prefill_costs,
)
from refimpl.kernels.costs import FLOAT_BYTES

__all__ = [
    "PHASES",
    "RAGGED_DECODE",
    "AttentionDims",
    "Candidate",
    "enumerate_candidates",
    "ragged_context_lens",
]

# What (B, T) means in each phase:
# - prefill: B sequences of T prompt tokens, causal, contiguous K/V;
# - chunk: one request's chunk of B new tokens after a prefix of T cached tokens (paged K/V);
# - decode: B sequences of T context tokens each, one new query per sequence (paged K/V); a
#   ragged decode shape has B sequences of `ragged_context_lens(B, T)` tokens, T on average.
PHASES = ("prefill", "chunk", "decode")
RAGGED_DECODE = "decode_ragged"  # what reports call the ragged decode shapes

TILE_Q = (16, 32, 64, 128)  # query rows per prefill / chunk tile
TILE_K = (32, 64, 128, 256)  # keys per prefill tile
PAGES_PER_TILE = (1, 2, 4, 8, 16)  # KV pages per paged tile


def ragged_context_lens(batch: int, seq_len: int) -> list[int]:
    """Context lengths of a ragged decode batch: B draws, uniform from T/4 to 7T/4 (mean T),
    seeded by the shape, so most sequences end inside a page, as in a server's batch."""
    rng = np.random.default_rng([batch, seq_len])
    return rng.integers(max(1, seq_len // 4), 7 * seq_len // 4 + 1, batch).tolist()


def context_lens(batch: int, seq_len: int, ragged: bool) -> list[int]:
    """The context length of each sequence of decode shape (B, T), ragged or not."""
    return ragged_context_lens(batch, seq_len) if ragged else [seq_len] * batch


@dataclass(frozen=True)
class AttentionDims:
    """The per-layer attention shape the kernels see: heads, head width, KV page size."""

    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    page_size: int = 16  # tokens per KV page (vLLM's default block size)

    @classmethod
    def of(cls, model: ModelConfig, page_size: int = 16) -> AttentionDims:
        """The attention dimensions of `model`."""
        return cls(model.num_heads, model.num_kv_heads, model.head_dim, page_size)

    @property
    def group_size(self) -> int:
        """Query heads per KV head."""
        return self.num_q_heads // self.num_kv_heads


@dataclass(frozen=True)
class Candidate:
    """One kernel at one tile choice, for one phase."""

    phase: str
    tiles: PrefillTiles | PagedTiles

    @property
    def name(self) -> str:
        """A short unique label, e.g. 'prefill/q64-k64-h2' or 'decode/p4-h1'."""
        t = self.tiles
        if isinstance(t, PrefillTiles):
            return f"{self.phase}/q{t.tile_q}-k{t.tile_k}-h{t.heads_per_tile}"
        kv = f"-kv{t.kv_heads_per_tile}" if t.kv_heads_per_tile > 1 else ""
        if self.phase == "decode":
            return f"{self.phase}/p{t.pages_per_tile}-h{t.heads_per_tile}{kv}"
        return f"{self.phase}/q{t.tile_q}-p{t.pages_per_tile}-h{t.heads_per_tile}{kv}"

    def params(self) -> dict[str, int]:
        """The tile parameters as plain numbers (what the kernel wrappers take)."""
        t = self.tiles
        if isinstance(t, PrefillTiles):
            return {"tile_q": t.tile_q, "tile_k": t.tile_k, "heads_per_tile": t.heads_per_tile}
        paged = {"pages_per_tile": t.pages_per_tile, "heads_per_tile": t.heads_per_tile,
                 "kv_heads_per_tile": t.kv_heads_per_tile}
        return paged if self.phase == "decode" else {"tile_q": t.tile_q, **paged}

    def sram_bytes(self, dims: AttentionDims) -> int:
        """`mem_sram(k)`: scratch bytes of one work item; the same for every shape."""
        if isinstance(self.tiles, PrefillTiles):
            return self.tiles.sram_bytes(dims.head_dim)
        return self._paged_tiles().sram_bytes(dims.head_dim, dims.page_size)

    def _paged_tiles(self) -> PagedTiles:
        t = self.tiles
        if self.phase == "decode":
            return PagedTiles(1, t.pages_per_tile, t.heads_per_tile, t.kv_heads_per_tile)
        return t

    def costs(self, dims: AttentionDims, batch: int, seq_len: int,
              ragged: bool = False) -> KernelCosts:
        """`mem_sram`, `mem_hbm` and FLOPs of one kernel call on shape (B, T) of this phase
        (`ragged`: a ragged decode shape)."""
        heads = {"num_q_heads": dims.num_q_heads, "num_kv_heads": dims.num_kv_heads,
                 "head_dim": dims.head_dim}
        self._check_ragged(ragged)
        if self.phase == "prefill":
            return prefill_costs(self.tiles, batch=batch, seq_len=seq_len, **heads)
        if self.phase == "decode":
            return decode_costs(self.tiles, context_lens=context_lens(batch, seq_len, ragged),
                                page_size=dims.page_size, **heads)
        return chunk_costs(self.tiles, start=seq_len, num_queries=batch,
                           page_size=dims.page_size, **heads)

    def footprint_bytes(self, dims: AttentionDims, batch: int, seq_len: int,
                        ragged: bool = False) -> int:
        """Distinct bytes one call on (B, T) touches: queries, outputs and the K/V it reads
        (paged K/V in whole pages), each once however often the tiles re-read it."""
        return sum(self.sequence_footprints(dims, batch, seq_len, ragged))

    def sequence_footprints(self, dims: AttentionDims, batch: int, seq_len: int,
                            ragged: bool = False) -> list[int]:
        """`footprint_bytes` of each sequence of the call: the bytes its tiles re-read."""
        self._check_ragged(ragged)
        if self.phase == "prefill":
            shapes = [(seq_len, seq_len)] * batch  # (queries, K/V token slots read)
        elif self.phase == "decode":
            shapes = [(1, _whole_pages(n, dims.page_size))
                      for n in context_lens(batch, seq_len, ragged)]
        else:
            shapes = [(batch, _whole_pages(seq_len + batch, dims.page_size))]
        return [(2 * queries * dims.num_q_heads + 2 * kv_tokens * dims.num_kv_heads)
                * dims.head_dim * FLOAT_BYTES for queries, kv_tokens in shapes]

    def tile_steps(self, dims: AttentionDims, batch: int, seq_len: int,
                   ragged: bool = False) -> tuple[int, int]:
        """(work items, tile iterations) of one call, mirroring the kernels' loops."""
        self._check_ragged(ragged)
        if self.phase == "prefill":
            tile_q, tile_k = self.tiles.tile_q, self.tiles.tile_k
            # (queries, cached keys before them, sequences of that shape)
            shapes = [(seq_len, 0, batch)]
        else:
            tiles = self._paged_tiles()
            tile_q, tile_k = tiles.tile_q, tiles.pages_per_tile * dims.page_size
            if self.phase == "decode":
                shapes = [(1, n - 1, 1) for n in context_lens(batch, seq_len, ragged)]
            else:
                shapes = [(batch, seq_len, 1)]
        kv_heads = 1 if self.phase == "prefill" else self._paged_tiles().kv_heads_per_tile
        items_per_tile = dims.num_q_heads // (self.tiles.heads_per_tile * kv_heads)
        q_tiles = key_tiles = 0
        for num_queries, start, copies in shapes:
            for q0 in range(0, num_queries, tile_q):
                keys = start + min(num_queries, q0 + tile_q)  # causal: up to its last query
                q_tiles += copies
                key_tiles += copies * -(-keys // tile_k)
        return items_per_tile * q_tiles, items_per_tile * key_tiles

    def _check_ragged(self, ragged: bool) -> None:
        if ragged and self.phase != "decode":
            raise ConfigError("ragged", ragged, f"only decode shapes are ragged, not {self.phase}")


def _whole_pages(tokens: int, page_size: int) -> int:
    """Token slots of the pages holding `tokens` tokens."""
    return -(-tokens // page_size) * page_size


def _divisors(n: int) -> list[int]:
    return [h for h in range(1, n + 1) if n % h == 0]


def enumerate_candidates(phase: str, dims: AttentionDims, *,
                         tile_q: tuple[int, ...] = TILE_Q,
                         tile_k: tuple[int, ...] = TILE_K,
                         pages_per_tile: tuple[int, ...] = PAGES_PER_TILE) -> list[Candidate]:
    """Every candidate of `phase`: tile sizes times the ways to stack a KV group's query heads
    (and, for decode, whole groups of all KV heads at once, which stream each page)."""
    if phase not in PHASES:
        raise ConfigError("phase", phase, "unknown phase", choices=PHASES)
    heads = _divisors(dims.group_size)
    if phase == "prefill":
        return [Candidate(phase, PrefillTiles(q, k, h)) for q in tile_q for k in tile_k
                for h in heads]
    if phase == "decode":
        kv_choices = [(h, 1) for h in heads]
        if dims.num_kv_heads > 1:
            kv_choices.append((dims.group_size, dims.num_kv_heads))
        return [Candidate(phase, PagedTiles(1, p, h, kv)) for p in pages_per_tile
                for h, kv in kv_choices]
    return [Candidate(phase, PagedTiles(q, p, h)) for q in tile_q for p in pages_per_tile
            for h in heads]
