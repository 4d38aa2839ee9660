"""Tiled causal prefill attention over contiguous K/V, the FlashAttention loop on a CPU core.

A work item is (sequence, KV head, group of query heads, query tile). It copies its query tile
into scratch once, then streams the K/V tiles it needs (only those at or before its last query
when causal) through scratch, and writes its normalised output rows back once. The copies are
the simulated SRAM traffic, and each is counted in `counters`.
"""

from __future__ import annotations

import math

import numpy as np
from numba import prange

from refimpl._numba import kernel_pair
from refimpl.kernels._tile import (
    FLOPS,
    READ_BYTES,
    SRAM_BYTES,
    WRITE_BYTES,
    attend_tile,
    copy_rows,
    load_queries,
    new_scratch,
    rows_view,
    scratch_bytes,
    start_rows,
    store_rows,
)
from refimpl.kernels.costs import FLOAT_BYTES


@kernel_pair(fast_float=True)
def prefill_kernel(q, k, v, out, tile_q, tile_k, heads_per_tile, causal, counters,
                   num_workers):
    """out = softmax(q k^T / sqrt(d)) v per head, tile by tile.

    q, out: (B, Hq, T, d); k, v: (B, Hkv, T, d); counters: (num_items, NUM_COUNTERS) int64;
    num_workers: contiguous shares of the items, each with one scratch reused item to item.
    """
    batch, num_q_heads, seq_len, head_dim = q.shape
    num_kv_heads = k.shape[1]
    group = num_q_heads // num_kv_heads
    chunks = group // heads_per_tile  # work items per KV head and query tile
    num_q_tiles = (seq_len + tile_q - 1) // tile_q
    q2 = q.reshape(-1, head_dim)  # (B*Hq*T, d): 2-D, so row slices stay contiguous
    k2 = k.reshape(-1, head_dim)  # (B*Hkv*T, d)
    v2 = v.reshape(-1, head_dim)
    out2 = out.reshape(-1, head_dim)
    scale = np.float32(1.0 / math.sqrt(head_dim))
    num_items = batch * num_kv_heads * chunks * num_q_tiles
    for worker in prange(num_workers):  # one scratch per worker, reused by its items
        scratch = new_scratch(heads_per_tile * tile_q, tile_k, 1, head_dim)
        for item in range(worker * num_items // num_workers,
                          (worker + 1) * num_items // num_workers):
            q_tile = item % num_q_tiles
            chunk = (item // num_q_tiles) % chunks
            seq_head = item // (num_q_tiles * chunks)  # b * Hkv + KV head
            q0 = q_tile * tile_q
            rows = min(tile_q, seq_len - q0)  # query positions in this tile
            num_rows = heads_per_tile * rows  # stacked rows of the tile GEMMs
            counters[item, SRAM_BYTES] = scratch_bytes(scratch)
            ks_buf, vs_buf, s_buf = scratch[1], scratch[2], scratch[3]
            kv_rows = scratch[9], scratch[10], scratch[11]  # the K/V tiles' own rows
            qs, pv, o, m, l, alpha = start_rows(scratch, num_rows, head_dim)  # noqa: E741
            q_row0 = (seq_head * group + chunk * heads_per_tile) * seq_len + q0  # == (b, h, q0)
            counters[item, READ_BYTES] += load_queries(qs, q2, q_row0, rows, seq_len, scale)
            kv_row0 = seq_head * seq_len  # key 0 of this sequence and KV head
            key_end = min(seq_len, q0 + rows) if causal else seq_len
            for key0 in range(0, key_end, tile_k):
                num_keys = min(tile_k, key_end - key0)
                copy_rows(ks_buf, k2, kv_row0 + key0, num_keys)
                copy_rows(vs_buf, v2, kv_row0 + key0, num_keys)
                counters[item, READ_BYTES] += 2 * FLOAT_BYTES * num_keys * head_dim
                st = rows_view(s_buf, num_keys, num_rows)
                attend_tile(qs, ks_buf, vs_buf, kv_rows, tile_k, 1, st, pv, m, l, o, alpha, rows,
                            q0, key0, causal, False, kv_rows[0], 0)
                counters[item, FLOPS] += 2 * 2 * num_rows * num_keys * head_dim
            counters[item, WRITE_BYTES] += store_rows(out2, o, l, q_row0, rows, seq_len)
