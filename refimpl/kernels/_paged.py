"""Attention of new queries over a paged KV cache: decode (one query) and chunked prefill.

A sequence's keys live in fixed-size pages scattered through the cache, found through its page
table (vLLM's PagedAttention, Kwon et al., 2023). A work item is (sequence, block of KV heads,
group of query heads, query tile); it gathers whole pages of its KV heads into scratch K/V
tiles, decoding INT8 or FP8 codes with the page's scale on the way, so the arithmetic is the
same float32 tile step as prefill. A page stores each token's KV heads side by side, so decode
takes all KV heads in one item and reads every page once, front to back; chunked prefill,
with many query rows per KV head, takes one. Every copy is counted in `counters`.
"""

from __future__ import annotations

import math

import numpy as np
from numba import prange, types
from numba.extending import overload

from refimpl._numba import inline_kernel, kernel_pair
from refimpl.kernels._floatbits import e4m3_value
from refimpl.kernels._tile import (
    FLOPS,
    READ_BYTES,
    SRAM_BYTES,
    WRITE_BYTES,
    attend_tile,
    load_queries,
    new_scratch,
    rows_view,
    scratch_bytes,
    start_rows,
    store_rows,
)
from refimpl.kernels.costs import FLOAT_BYTES, PAGE_ID_BYTES


def kv_value(element):
    """The float32 a cached element stands for, before its page scale: float32 pages hold
    values, int8 pages integers, uint8 pages FP8 e4m3 codes (compiled per cache dtype)."""
    raise NotImplementedError("kv_value runs only inside kernels")


@overload(kv_value, inline="always")
def _kv_value(element):
    if element == types.float32:
        return lambda element: element
    if element == types.int8:
        return lambda element: np.float32(element)
    if element == types.uint8:
        return lambda element: e4m3_value(element)
    return None


@inline_kernel
def load_kv_pages(ks_buf, vs_buf, tile_k, num_keys, k2, v2, k_scales, v_scales,
                  block_table, key0, page_size, num_kv_heads, kv0, kv_heads):
    """Gather keys and values key0 .. key0 + num_keys - 1 of KV heads kv0 .. kv0 + kv_heads - 1
    from their pages; KV head kk's tile is rows kk * tile_k .. of ks_buf and vs_buf.

    k2, v2: (num_pages * P * Hkv, d) rows; k_scales, v_scales: (num_pages, Hkv), or empty for
    float pages. Returns the bytes read (page ids,
    scales, rows) for the counters.
    """
    key_end = key0 + num_keys
    head_dim = ks_buf.shape[1]
    is_quantized = k_scales.shape[0] > 0
    nbytes = 0
    for page_index in range(key0 // page_size, (key_end - 1) // page_size + 1):
        page = block_table[page_index]
        nbytes += PAGE_ID_BYTES
        if is_quantized:
            nbytes += 2 * FLOAT_BYTES * kv_heads  # a K and a V scale per KV head
        first = page_index * page_size  # position of the page's first key
        # One token's rows of all the item's KV heads are adjacent in a page: tokens outside
        # and heads inside reads the page front to back (measured 1.8x the bandwidth of
        # reading one head's rows across the page at a time).
        for t in range(max(first, key0), min(first + page_size, key_end)):
            for kk in range(kv_heads):
                row = (page * page_size + t - first) * num_kv_heads + kv0 + kk
                i = kk * tile_k + t - key0
                k_scale = k_scales[page, kv0 + kk] if is_quantized else np.float32(1.0)
                v_scale = v_scales[page, kv0 + kk] if is_quantized else np.float32(1.0)
                # 2-D indexing, not row views: a view per row costs reference counting that
                # measured slower than the copy itself.
                for x in range(head_dim):
                    ks_buf[i, x] = kv_value(k2[row, x]) * k_scale
                    vs_buf[i, x] = kv_value(v2[row, x]) * v_scale
    return nbytes + 2 * num_keys * kv_heads * head_dim * k2.itemsize


@kernel_pair(fast_float=True)
def paged_kernel(q, k_cache, v_cache, k_scales, v_scales, block_tables, q_starts, out,
                 tile_q, pages_per_tile, heads_per_tile, kv_heads, counters, num_workers):
    """out = causal attention of each sequence's C queries over its paged keys and values.

    q, out: (B, Hq, C, d), query i of sequence b at position q_starts[b] + i, which attends to
    keys 0 .. q_starts[b] + i. k_cache, v_cache: (num_pages, P, Hkv, d) float32, int8 or uint8
    FP8 codes; k_scales, v_scales: (num_pages, Hkv) float32, or (0, 0) for float pages;
    block_tables: (B, max_pages) int32; q_starts: (B,) int32;
    heads_per_tile: query heads per KV head in an item; kv_heads: KV heads per item (more than
    one only with whole groups, heads_per_tile == Hq // Hkv); counters: (num_items,
    NUM_COUNTERS) int64; num_workers: contiguous shares of the items.
    """
    batch, num_q_heads, num_queries, head_dim = q.shape
    page_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = num_q_heads // num_kv_heads
    chunks = group // heads_per_tile
    kv_blocks = num_kv_heads // kv_heads
    num_q_tiles = (num_queries + tile_q - 1) // tile_q
    tile_k = pages_per_tile * page_size
    q2 = q.reshape(-1, head_dim)  # (B*Hq*C, d)
    out2 = out.reshape(-1, head_dim)
    k2 = k_cache.reshape(-1, head_dim)  # (num_pages*P*Hkv, d)
    v2 = v_cache.reshape(-1, head_dim)
    scale = np.float32(1.0 / math.sqrt(head_dim))
    num_items = batch * kv_blocks * chunks * num_q_tiles
    for worker in prange(num_workers):  # one scratch per worker, reused by its items
        scratch = new_scratch(kv_heads * heads_per_tile * tile_q, tile_k, kv_heads, head_dim)
        for item in range(worker * num_items // num_workers,
                          (worker + 1) * num_items // num_workers):
            q_tile = item % num_q_tiles
            chunk = (item // num_q_tiles) % chunks
            kv0 = (item // (num_q_tiles * chunks)) % kv_blocks * kv_heads  # first KV head
            b = item // (num_q_tiles * chunks * kv_blocks)
            q0 = q_tile * tile_q
            rows = min(tile_q, num_queries - q0)
            num_rows = kv_heads * heads_per_tile * rows  # stacked rows of the tile products
            counters[item, SRAM_BYTES] = scratch_bytes(scratch)
            ks_buf, vs_buf, s_buf = scratch[1], scratch[2], scratch[3]
            qs, pv, o, m, l, alpha = start_rows(scratch, num_rows, head_dim)  # noqa: E741
            first_head = kv0 * group + chunk * heads_per_tile
            q_row0 = (b * num_q_heads + first_head) * num_queries + q0  # row of (b, head, q0)
            counters[item, READ_BYTES] += load_queries(qs, q2, q_row0, rows, num_queries, scale)
            pos0 = q_starts[b] + q0  # position of the tile's first query
            table = block_tables[b]
            for key0 in range(0, pos0 + rows, tile_k):
                num_keys = min(tile_k, pos0 + rows - key0)
                counters[item, READ_BYTES] += load_kv_pages(
                    ks_buf, vs_buf, tile_k, num_keys, k2, v2, k_scales, v_scales, table,
                    key0, page_size, num_kv_heads, kv0, kv_heads)
                st = rows_view(s_buf, num_keys, num_rows)
                attend_tile(qs, ks_buf, vs_buf, tile_k, kv_heads, st, pv, m, l, o, alpha, rows,
                            pos0, key0, True)
                counters[item, FLOPS] += 2 * 2 * num_rows * num_keys * head_dim
            counters[item, WRITE_BYTES] += store_rows(out2, o, l, q_row0, rows, num_queries)
