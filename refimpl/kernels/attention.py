"""Public attention entry points: validate, plan tiles within the SRAM budget, run a kernel.

Each wrapper checks its arrays (`KernelInputError` before any kernel runs), normalises them to
the one C-contiguous layout the kernels are compiled for, picks how many query heads of a KV
group share a tile so the scratch fits the budget `S` (`CapacityError` if a tile cannot),
allocates the output and calls the serial or the parallel kernel with BLAS held to one thread.
With `return_costs=True` it also returns the bytes and FLOPs the kernel counted.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import numpy as np

from refimpl.errors import CapacityError, KernelInputError
from refimpl.kernels import _paged, _prefill, _tile
from refimpl.kernels._tile import FLOPS, NUM_COUNTERS, READ_BYTES, SRAM_BYTES, WRITE_BYTES
from refimpl.kernels.costs import KernelCosts, PagedTiles, PrefillTiles, check_whole_groups
from refimpl.kernels.quant import FP8_E4M3_MAX, FP8_E4M3_NAN, QuantizedPages
from refimpl.kernels.validate import (
    check_finite,
    check_heads,
    check_same,
    check_scores_fit,
    float_array,
    index_array,
    positive_int,
)

__all__ = ["chunk_attention", "decode_attention", "default_sram_budget", "prefill_attention"]

T = TypeVar("T")

_NO_SCALES = np.zeros((0, 0), np.float32)  # float pages carry no scales


@functools.cache
def default_sram_budget() -> int:
    """The budget `S` when none is given: this machine's L2 per core (`cpu-local` preset)."""
    # The caches alone, not the whole preset: its bandwidth and GEMM probe took 1.25 s of a
    # process's first kernel call, to read a size the OS states.
    from refimpl.config.probe import sram_bytes

    return sram_bytes()


@functools.cache
def _blas_controller():
    import scipy.linalg.cython_blas  # noqa: F401  (load SciPy's BLAS, which Numba's np.dot calls)
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def _run(pair, parallel: bool | None, max_rows: int, kv_heads: int, *args) -> None:
    """Call the serial build, or the parallel one with a worker per Numba thread; BLAS single.

    Tile GEMMs are small: a multi-threaded BLAS spends more on waking threads than it saves
    (5x slower measured at 256x128x64), and inside `prange` it would oversubscribe the cores.
    Holding BLAS to one thread costs ~30 us a call, so it is skipped when no tile of at most
    `max_rows` query rows over `kv_heads` KV heads calls BLAS (every decode step).
    """
    use_parallel = pair.default is pair.parallel if parallel is None else parallel
    if use_parallel:
        import numba

        args = (*args, numba.get_num_threads())
    else:
        args = (*args, 1)
    run = pair.parallel if use_parallel else pair.serial
    if not _tile.uses_blas(max_rows, kv_heads):
        run(*args)
        return
    with _blas_controller().limit(limits=1, user_api="blas"):
        run(*args)


def _divisor_choices(field: str, given: int | None, total: int, what: str) -> list[int]:
    """The given count if it divides `total`, else every divisor of `total`, largest first."""
    if given is None:
        return [h for h in range(total, 0, -1) if total % h == 0]
    given = positive_int(field, given)
    if total % given:
        raise KernelInputError(field, given, f"must divide the {what} ({total})")
    return [given]


def _plan(choices: list[T], sram_bytes: Callable[[T], int], budget: int | None,
          describe: Callable[[T], str]) -> T:
    """The first choice whose scratch fits the budget `S` (default: `default_sram_budget()`)."""
    budget = default_sram_budget() if budget is None else positive_int("sram_budget_bytes", budget)
    for choice in choices:
        if sram_bytes(choice) <= budget:
            return choice
    need = sram_bytes(choices[-1])
    raise CapacityError("sram_bytes", need, f"a tile with {describe(choices[-1])} needs "
                        f"{need} B of scratch, over the SRAM budget of {budget} B")


def _plan_heads(group: int, heads_per_tile: int | None, sram_bytes: Callable[[int], int],
                budget: int | None) -> int:
    """Query heads per tile: the given number if it fits, else the most that fit the budget."""
    choices = _divisor_choices("heads_per_tile", heads_per_tile, group, "query heads per KV head")
    return _plan(choices, sram_bytes, budget, lambda h: f"{h} query head(s)")


def _plan_paged_heads(group: int, num_kv_heads: int, heads_per_tile: int | None,
                      kv_heads_per_tile: int | None, sram_bytes: Callable[[int, int], int],
                      budget: int | None) -> tuple[int, int]:
    """(query heads per KV head, KV heads) of a paged work item: the most that fit the budget,
    KV heads beyond one only with whole groups (see `PagedTiles`)."""
    heads = _divisor_choices("heads_per_tile", heads_per_tile, group, "query heads per KV head")
    kv_heads = _divisor_choices("kv_heads_per_tile", kv_heads_per_tile, num_kv_heads,
                                "KV heads")
    if heads_per_tile is not None and kv_heads_per_tile is not None:
        check_whole_groups(heads_per_tile, group, kv_heads_per_tile)
    choices = [(h, kv) for h in heads for kv in kv_heads if kv == 1 or h == group]
    return _plan(choices, lambda c: sram_bytes(*c), budget,
                 lambda c: f"{c[0]} query head(s) per KV head and {c[1]} KV head(s)")


def _costs(counters: np.ndarray) -> KernelCosts:
    """Sum the per-work-item counters into the costs of the call."""
    return KernelCosts(
        sram_bytes=int(counters[:, SRAM_BYTES].max()),
        hbm_read_bytes=int(counters[:, READ_BYTES].sum()),
        hbm_write_bytes=int(counters[:, WRITE_BYTES].sum()),
        flops=int(counters[:, FLOPS].sum()),
    )


def prefill_attention(q, k, v, *, tile_q=64, tile_k=64, heads_per_tile=None, causal=True,
                      sram_budget_bytes=None, parallel=None, check_inputs_finite=True,
                      return_costs=False):
    """Tiled attention with online softmax over contiguous K/V.

    Args:
        q: (B, Hq, T, d) float32 queries; k, v: (B, Hkv, T, d) float32, Hq a multiple of Hkv.
        tile_q, tile_k: query and key positions per tile.
        heads_per_tile: query heads of one KV group stacked into a tile; None picks the most
            that fit `sram_budget_bytes` (default: `default_sram_budget()`).
        causal: mask keys after each query's position.
        parallel: run the `prange` build; None follows `REFIMPL_PARALLEL`.
        check_inputs_finite: reject NaN and infinity, and magnitudes whose float32 scores
            could overflow (sqrt(d) max|q| max|k| or T max|v| over 3.4e38): a pass over the
            inputs.
        return_costs: also return the `KernelCosts` the kernel counted.

    Returns:
        (B, Hq, T, d) float32, or (output, KernelCosts) with `return_costs`.
    """
    q = float_array("q", q, 4)
    k = float_array("k", k, 4)
    v = float_array("v", v, 4)
    batch, num_q_heads, seq_len, head_dim = q.shape
    for name, x in (("k", k), ("v", v)):
        check_same(f"{name}.shape[0] (batch)", x.shape[0], "q.shape[0]", batch)
        check_same(f"{name}.shape[2] (tokens)", x.shape[2], "q.shape[2]", seq_len)
        check_same(f"{name}.shape[3] (head dim)", x.shape[3], "q.shape[3]", head_dim)
    check_same("v.shape[1] (KV heads)", v.shape[1], "k.shape[1]", k.shape[1])
    check_heads("q.shape[1]", num_q_heads, "k.shape[1] (KV heads)", k.shape[1])
    if check_inputs_finite:
        for name, x in (("q", q), ("k", k), ("v", v)):
            check_finite(name, x)
        check_scores_fit(*(float(np.abs(x).max()) for x in (q, k, v)), head_dim, seq_len)
    tile_q = positive_int("tile_q", tile_q)
    tile_k = positive_int("tile_k", tile_k)
    heads = _plan_heads(num_q_heads // k.shape[1], heads_per_tile,
                        lambda h: PrefillTiles(tile_q, tile_k, h).sram_bytes(head_dim),
                        sram_budget_bytes)
    num_items = batch * num_q_heads // heads * -(-seq_len // tile_q)
    out = np.empty_like(q)
    counters = np.zeros((num_items, NUM_COUNTERS), np.int64)
    _run(_prefill.prefill_kernel, parallel, heads * min(tile_q, seq_len), 1, q, k, v, out, tile_q,
         tile_k, heads, bool(causal), counters)
    return (out, _costs(counters)) if return_costs else out


def _cache_parts(name: str, cache) -> tuple[np.ndarray, np.ndarray]:
    """(codes or floats, scales) of a float32 cache or `QuantizedPages`; the kernel reads the
    format from the dtype (int8: INT8, uint8: FP8 e4m3)."""
    if isinstance(cache, QuantizedPages):
        codes = np.ascontiguousarray(cache.codes)
        expected = np.int8 if cache.fmt == "int8" else np.uint8
        if codes.ndim != 4 or codes.dtype != expected:
            raise KernelInputError(f"{name}.codes", f"{codes.dtype} rank {codes.ndim}",
                                   f"must be rank-4 {np.dtype(expected)} for {cache.fmt}")
        scales = float_array(f"{name}.scales", cache.scales, 2)
        check_same(f"{name}.scales.shape", scales.shape, "(num_pages, Hkv)",
                   (codes.shape[0], codes.shape[2]))
        return codes, scales
    return float_array(name, cache, 4), _NO_SCALES


def _cache_magnitude(name: str, cache, pages: np.ndarray, length: int) -> float:
    """The largest magnitude (a bound, for quantized pages) of the first `length` tokens
    stored in `pages` (one sequence), which must hold no NaN or infinity."""
    if not isinstance(cache, QuantizedPages):
        rows = cache[pages].reshape(-1, *cache.shape[2:])[:length]  # (length, Hkv, d)
        check_finite(f"{name}[pages {pages.tolist()}]", rows)
        return float(np.abs(rows).max())
    scales = cache.scales[pages]  # (n, Hkv)
    check_finite(f"{name}.scales[pages {pages.tolist()}]", scales)
    if cache.fmt == "fp8_e4m3":
        codes = cache.codes[pages].reshape(-1, *cache.shape[2:])[:length]
        if ((codes & 0x7F) == FP8_E4M3_NAN).any():
            raise KernelInputError(f"{name}.codes[pages {pages.tolist()}]", "0x7F",
                                   "must be finite (an FP8 NaN code found)")
    code_max = 128.0 if cache.fmt == "int8" else FP8_E4M3_MAX  # (int8 reaches -128)
    return float(np.abs(scales).max()) * code_max


def _paged_call(q4, k_cache, v_cache, block_tables, q_starts, tiles: PagedTiles, heads_per_tile,
                kv_heads_per_tile, sram_budget_bytes, parallel, check_inputs_finite,
                return_costs):
    """Validate the paged cache and tables, then run the paged kernel on q4 (B, Hq, C, d)."""
    if type(k_cache) is not type(v_cache) or getattr(k_cache, "fmt", "") != getattr(
            v_cache, "fmt", ""):
        raise KernelInputError("v_cache", type(v_cache).__name__, "must be stored like k_cache")
    k_codes, k_scales = _cache_parts("k_cache", k_cache)
    v_codes, v_scales = _cache_parts("v_cache", v_cache)
    check_same("v_cache.shape", v_codes.shape, "k_cache.shape", k_codes.shape)
    num_pages, page_size, num_kv_heads, head_dim = k_codes.shape
    batch, num_q_heads, num_queries, _ = q4.shape
    check_same("q head dim", q4.shape[3], "k_cache.shape[3]", head_dim)
    check_heads("q heads", num_q_heads, "k_cache.shape[2] (KV heads)", num_kv_heads)
    context_lens = q_starts.astype(np.int64) + num_queries
    max_pages = block_tables.shape[1]
    for b in range(batch):
        if context_lens[b] > max_pages * page_size:
            raise KernelInputError(f"context length of sequence {b}", int(context_lens[b]),
                                   f"exceeds its page table ({max_pages} pages of {page_size})")
    used = [block_tables[b, : -(-int(context_lens[b]) // page_size)] for b in range(batch)]
    for b, pages in enumerate(used):
        bad = (pages < 0) | (pages >= num_pages)
        if bad.any():
            i = int(np.argmax(bad))
            raise KernelInputError(f"block_tables[{b}, {i}]", int(pages[i]),
                                   f"page id out of range [0, {num_pages})")
    if check_inputs_finite:
        check_finite("q", q4)
        for b, pages in enumerate(used):
            length = int(context_lens[b])
            check_scores_fit(float(np.abs(q4[b]).max()),
                             _cache_magnitude("k_cache", k_cache, pages, length),
                             _cache_magnitude("v_cache", v_cache, pages, length), head_dim,
                             length)
    heads, kv_heads = _plan_paged_heads(
        num_q_heads // num_kv_heads, num_kv_heads, heads_per_tile, kv_heads_per_tile,
        lambda h, kv: PagedTiles(tiles.tile_q, tiles.pages_per_tile, h, kv)
        .sram_bytes(head_dim, page_size), sram_budget_bytes)
    num_items = batch * num_q_heads // (heads * kv_heads) * -(-num_queries // tiles.tile_q)
    out = np.empty_like(q4)
    counters = np.zeros((num_items, NUM_COUNTERS), np.int64)
    max_rows = kv_heads * heads * min(tiles.tile_q, num_queries)
    _run(_paged.paged_kernel, parallel, max_rows, kv_heads, q4, k_codes, v_codes, k_scales,
         v_scales, block_tables, q_starts, out, tiles.tile_q, tiles.pages_per_tile, heads,
         kv_heads, counters)
    return out, (_costs(counters) if return_costs else None)


def decode_attention(q, k_cache, v_cache, block_tables, context_lens, *, pages_per_tile=2,
                     heads_per_tile=None, kv_heads_per_tile=None, sram_budget_bytes=None,
                     parallel=None, check_inputs_finite=True, return_costs=False):
    """One decode step: each sequence's newest query over its whole paged context.

    Args:
        q: (B, Hq, d) float32, the query of the token at position context_lens[b] - 1.
        k_cache, v_cache: (num_pages, P, Hkv, d) float32, or `QuantizedPages` (INT8 or FP8)
            read and decoded directly by the kernel.
        block_tables: (B, max_pages) integer page ids, in order; pages need not be contiguous.
        context_lens: (B,) tokens of each sequence, including the new one (>= 1).
        pages_per_tile: KV pages gathered into one scratch tile. Two pages of all KV heads of
            a 7B-class model fit a 512 KiB L2 and measured fastest (`refimpl bench kernels`).
        kv_heads_per_tile: KV heads gathered together (see `PagedTiles`); None, like
            heads_per_tile, picks the most that fit the budget.
        heads_per_tile, sram_budget_bytes, parallel, check_inputs_finite, return_costs: as in
            `prefill_attention` (only the pages in use are checked for NaN).

    Returns:
        (B, Hq, d) float32, or (output, KernelCosts) with `return_costs`.
    """
    q = float_array("q", q, 3)
    block_tables = index_array("block_tables", block_tables, 2)
    context_lens = index_array("context_lens", context_lens, 1)
    check_same("block_tables.shape[0]", block_tables.shape[0], "q.shape[0]", q.shape[0])
    check_same("context_lens.shape[0]", context_lens.shape[0], "q.shape[0]", q.shape[0])
    if context_lens.min() < 1:
        b = int(np.argmin(context_lens))
        raise KernelInputError(f"context_lens[{b}]", int(context_lens[b]), "must be >= 1")
    tiles = PagedTiles(1, positive_int("pages_per_tile", pages_per_tile))
    out, costs = _paged_call(q[:, :, None, :], k_cache, v_cache, block_tables, context_lens - 1,
                             tiles, heads_per_tile, kv_heads_per_tile, sram_budget_bytes,
                             parallel, check_inputs_finite, return_costs)
    out = out[:, :, 0, :]  # (B, Hq, d)
    return (out, costs) if return_costs else out


def chunk_attention(q, k_cache, v_cache, block_table, start, *, tile_q=64, pages_per_tile=4,
                    heads_per_tile=None, kv_heads_per_tile=None, sram_budget_bytes=None,
                    parallel=None, check_inputs_finite=True, return_costs=False):
    """Chunked prefill: queries at positions [start, start + C) of one request, causally over
    its paged KV (the prefix and the chunk itself, already written to the pages).

    Args:
        q: (Hq, C, d) float32.
        k_cache, v_cache: (num_pages, P, Hkv, d) float32, or `QuantizedPages`.
        block_table: (max_pages,) the request's page ids, in order.
        start: position of the chunk's first query (tokens already prefilled).
        tile_q, pages_per_tile: query positions and KV pages per tile.
        heads_per_tile, kv_heads_per_tile, sram_budget_bytes, parallel, check_inputs_finite,
            return_costs: as in `decode_attention`.

    Returns:
        (Hq, C, d) float32, or (output, KernelCosts) with `return_costs`.
    """
    q = float_array("q", q, 3)
    block_table = index_array("block_table", block_table, 1)
    if isinstance(start, bool) or not isinstance(start, (int, np.integer)) or start < 0:
        raise KernelInputError("start", start, "must be an integer >= 0")
    tiles = PagedTiles(positive_int("tile_q", tile_q), positive_int("pages_per_tile",
                                                                    pages_per_tile))
    out, costs = _paged_call(q[None], k_cache, v_cache, block_table[None],
                             np.array([start], np.int32), tiles, heads_per_tile,
                             kv_heads_per_tile, sram_budget_bytes, parallel, check_inputs_finite,
                             return_costs)
    return (out[0], costs) if return_costs else out[0]
