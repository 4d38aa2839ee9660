"""The inner step shared by every attention kernel: one K/V tile into a running softmax.

This is FlashAttention's online softmax (Dao et al., 2022; Milakov & Gimelshein, 2018): scores
of a query tile against one key tile, a running row max and row sum, and an output accumulator
rescaled whenever the max grows, so the full score matrix never exists. All arrays here are
scratch ("SRAM") buffers that the calling kernel filled; nothing here touches main memory.
"""

from __future__ import annotations

import math

import numpy as np
from numba import literal_unroll

from refimpl._numba import kernel
from refimpl.kernels.costs import FLOAT_BYTES

# Columns of the per-work-item counters array that kernels fill while they run.
READ_BYTES, WRITE_BYTES, FLOPS, SRAM_BYTES = 0, 1, 2, 3
NUM_COUNTERS = 4


@kernel
def attend_tile(qs, ks, vs, s, pv, m, l, o, rows_per_head, pos0, key0, causal):  # noqa: E741
    """Fold one K/V tile into the running max `m`, sum `l` and output `o` of each query row.

    qs: (R, d) query rows, already scaled by 1/sqrt(d); R = heads * rows_per_head and row r is
    query position pos0 + r % rows_per_head. ks, vs: (n, d) keys and values at positions
    key0 .. key0 + n - 1. s: (R, n) and pv: (R, d) scratch. m, l: (R,). o: (R, d).
    """
    num_rows = qs.shape[0]
    num_keys = ks.shape[0]
    np.dot(qs, ks.T, s)  # (R, n) scores
    for r in range(num_rows):
        row = s[r]  # (n,)
        num_valid = num_keys
        if causal:  # keys after the query's own position are masked
            num_valid = min(num_keys, pos0 + r % rows_per_head - key0 + 1)
        if num_valid <= 0:  # a query before this whole tile: it contributes nothing
            row[:] = 0.0
            continue
        row_max = row[0]
        for j in range(1, num_valid):
            row_max = max(row_max, row[j])
        m_new = max(m[r], row_max)
        alpha = math.exp(m[r] - m_new)  # rescales what earlier tiles summed; 0 on the first
        row_sum = np.float32(0.0)
        for j in range(num_valid):
            p = np.float32(math.exp(row[j] - m_new))
            row[j] = p
            row_sum += p
        row[num_valid:] = 0.0
        m[r] = m_new
        l[r] = l[r] * alpha + row_sum
        o_row = o[r]
        for x in range(o_row.shape[0]):
            o_row[x] *= alpha
    np.dot(s, vs, pv)  # (R, d)
    o += pv


@kernel
def new_scratch(max_rows, tile_k, head_dim):
    """Fresh scratch of one work item: Q, K, V, scores, PV, output, max and sum buffers."""
    return (
        np.empty(max_rows * head_dim, np.float32),  # Q rows (flat: views take the rows in use)
        np.empty((tile_k, head_dim), np.float32),  # K tile
        np.empty((tile_k, head_dim), np.float32),  # V tile
        np.empty(max_rows * tile_k, np.float32),  # scores / probabilities
        np.empty(max_rows * head_dim, np.float32),  # P @ V of one tile
        np.empty(max_rows * head_dim, np.float32),  # output accumulator
        np.empty(max_rows, np.float32),  # running max
        np.empty(max_rows, np.float32),  # running sum
    )


@kernel
def scratch_bytes(scratch):
    """Bytes of all scratch buffers: the work item's measured SRAM footprint."""
    total = 0
    for buf in literal_unroll(scratch):
        total += buf.nbytes
    return total


@kernel
def start_rows(scratch, num_rows, head_dim):
    """Views of the Q, PV, output, max and sum buffers for num_rows rows, state emptied."""
    qs_buf, _, _, _, pv_buf, o_buf, m_buf, l_buf = scratch
    o = rows_view(o_buf, num_rows, head_dim)
    m = m_buf[:num_rows]
    l = l_buf[:num_rows]  # noqa: E741
    m[:] = -np.inf
    l[:] = 0.0
    o[:] = 0.0
    return rows_view(qs_buf, num_rows, head_dim), rows_view(pv_buf, num_rows, head_dim), o, m, l


@kernel
def rows_view(flat, num_rows, num_cols):
    """The first num_rows * num_cols floats of a flat buffer as a C-contiguous matrix."""
    return flat[: num_rows * num_cols].reshape(num_rows, num_cols)


@kernel
def load_queries(qs, q2, first_row, rows, head_stride, scale):
    """qs[hh * rows + i] = q2[first_row + hh * head_stride + i] * scale for each stacked head."""
    heads = qs.shape[0] // rows
    for hh in range(heads):
        for i in range(rows):
            dst = qs[hh * rows + i]
            src = q2[first_row + hh * head_stride + i]
            for x in range(dst.shape[0]):
                dst[x] = src[x] * scale
    return FLOAT_BYTES * qs.size


@kernel
def store_rows(out2, o, l, first_row, rows, head_stride):  # noqa: E741
    """Write the normalised output rows o / l back to where load_queries read them from."""
    heads = o.shape[0] // rows
    for hh in range(heads):
        for i in range(rows):
            r = hh * rows + i
            dst = out2[first_row + hh * head_stride + i]
            src = o[r]
            inv = np.float32(1.0) / l[r]
            for x in range(dst.shape[0]):
                dst[x] = src[x] * inv
    return FLOAT_BYTES * o.size
