"""Attention of new queries over a paged KV cache: decode (one query) and chunked prefill.

A sequence's keys live in fixed-size pages scattered through the cache, found through its page
table (vLLM's PagedAttention, Kwon et al., 2023). A work item is (sequence, block of KV heads,
group of query heads, query tile); it walks its keys a tile of whole pages at a time, first
finding each key's row and scales (`page_rows`). A tile with few query rows (decode) is
multiplied where it lies in the pages, INT8 or FP8 codes decoded in registers and the page's
scale applied to the scores and probabilities, while the next rows are asked for ahead; one
with many rows (chunked prefill) is gathered and decoded into scratch K/V tiles for BLAS.
A page stores each token's KV heads side by side, so decode takes all KV heads in one item
and reads every page once, front to back; chunked prefill takes one. Every byte read is
counted in `counters`.
"""

from __future__ import annotations

import math

import numpy as np
from numba import prange

from refimpl._numba import inline_kernel, kernel_pair
from refimpl.kernels._tile import (
    FLOPS,
    READ_BYTES,
    SRAM_BYTES,
    WRITE_BYTES,
    attend_tile,
    kv_value,
    load_queries,
    new_scratch,
    rows_view,
    scratch_bytes,
    start_rows,
    store_rows,
    uses_blas,
)
from refimpl.kernels.costs import FLOAT_BYTES, PAGE_ID_BYTES


@inline_kernel
def page_rows(kv_rows, tile_k, num_keys, k_scales, v_scales, block_table, key0, page_size,
              num_kv_heads, kv0, kv_heads, row_bytes):
    """Find keys key0 .. key0 + num_keys - 1 of KV heads kv0 .. kv0 + kv_heads - 1 in their
    pages: with kv_rows = (key_rows, key_scales, value_scales), key j of KV head kk is row
    key_rows[kk * tile_k + j] of the (num_pages * P * Hkv, d) K and V rows, its scales
    key_scales and value_scales there (1 for float pages).

    k_scales, v_scales: (num_pages, Hkv), or empty for float pages; row_bytes: bytes of one
    K or V row. Returns the bytes the tile's keys and values take in the cache (page ids,
    scales, rows), for the counters.
    """
    key_rows, key_scales, value_scales = kv_rows
    key_end = key0 + num_keys
    is_quantized = k_scales.shape[0] > 0
    nbytes = 2 * num_keys * kv_heads * row_bytes
    for page_index in range(key0 // page_size, (key_end - 1) // page_size + 1):
        page = block_table[page_index]
        nbytes += PAGE_ID_BYTES
        if is_quantized:
            nbytes += 2 * FLOAT_BYTES * kv_heads  # a K and a V scale per KV head
        first = page_index * page_size  # position of the page's first key
        for t in range(max(first, key0), min(first + page_size, key_end)):
            for kk in range(kv_heads):
                i = kk * tile_k + t - key0
                key_rows[i] = (page * page_size + t - first) * num_kv_heads + kv0 + kk
                if is_quantized:
                    key_scales[i] = k_scales[page, kv0 + kk]
                    value_scales[i] = v_scales[page, kv0 + kk]
    return nbytes


@inline_kernel
def load_kv_pages(ks_buf, vs_buf, kv_rows, tile_k, num_keys, k2, v2, kv_heads):
    """Gather the keys and values `page_rows` found into the K/V tiles, decoded and scaled:
    key j of KV head kk to row kk * tile_k + j."""
    key_rows, key_scales, value_scales = kv_rows
    head_dim = ks_buf.shape[1]
    # Tokens outside and heads inside: a page holds a token's KV heads side by side, so this
    # reads it front to back (measured 1.8x the bandwidth of one head's rows at a time).
    for j in range(num_keys):
        for kk in range(kv_heads):
            i = kk * tile_k + j
            k_row, v_row = k2[key_rows[i]], v2[key_rows[i]]
            k_scale, v_scale = key_scales[i], value_scales[i]
            for x in range(head_dim):
                ks_buf[i, x] = kv_value(k_row[x]) * k_scale
                vs_buf[i, x] = kv_value(v_row[x]) * v_scale


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
            this = scratch[9], scratch[10], scratch[11]  # where this tile's keys are
            ahead = scratch[12], scratch[13], scratch[14]  # and the next tile's
            qs, pv, o, m, l, alpha = start_rows(scratch, num_rows, head_dim)  # noqa: E741
            first_head = kv0 * group + chunk * heads_per_tile
            q_row0 = (b * num_q_heads + first_head) * num_queries + q0  # row of (b, head, q0)
            counters[item, READ_BYTES] += load_queries(qs, q2, q_row0, rows, num_queries, scale)
            pos0 = q_starts[b] + q0  # position of the tile's first query
            table = block_tables[b]
            key_end = pos0 + rows
            row_bytes = head_dim * k2.itemsize
            counters[item, READ_BYTES] += page_rows(
                this, tile_k, min(tile_k, key_end), k_scales, v_scales, table, 0, page_size,
                num_kv_heads, kv0, kv_heads, row_bytes)
            for key0 in range(0, key_end, tile_k):
                num_keys = min(tile_k, key_end - key0)
                num_next = max(0, min(tile_k, key_end - key0 - tile_k))
                if num_next > 0:
                    counters[item, READ_BYTES] += page_rows(
                        ahead, tile_k, num_next, k_scales, v_scales, table, key0 + tile_k,
                        page_size, num_kv_heads, kv0, kv_heads, row_bytes)
                st = rows_view(s_buf, num_keys, num_rows)
                if uses_blas(num_rows, kv_heads):  # BLAS multiplies tiles gathered in scratch
                    load_kv_pages(ks_buf, vs_buf, this, tile_k, num_keys, k2, v2, kv_heads)
                    attend_tile(qs, ks_buf, vs_buf, this, tile_k, kv_heads, st, pv, m, l, o,
                                alpha, rows, pos0, key0, True, False, ahead[0], 0)
                else:  # the loops read the pages where they are, asking for the next rows
                    attend_tile(qs, k2, v2, this, tile_k, kv_heads, st, pv, m, l, o, alpha,
                                rows, pos0, key0, True, True, ahead[0], num_next)
                counters[item, FLOPS] += 2 * 2 * num_rows * num_keys * head_dim
                this, ahead = ahead, this
            counters[item, WRITE_BYTES] += store_rows(out2, o, l, q_row0, rows, num_queries)
