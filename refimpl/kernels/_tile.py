"""The inner step shared by every attention kernel: one K/V tile into a running softmax.

This is FlashAttention's online softmax (Dao et al., 2022; Milakov & Gimelshein, 2018): scores
of a query tile against one key tile, a running row max and row sum, and an output accumulator
rescaled whenever the max grows, so the full score matrix never exists. All arrays here are
scratch ("SRAM") buffers that the calling kernel filled; nothing here touches main memory.

Scores are kept transposed, one row per key and one column per query row, so that every step
of the softmax (running max, exponentials, row sums) is a loop over contiguous query rows that
LLVM vectorizes; only a reduction along a row would need fast-math flags refimpl avoids. The
two tile products go to BLAS (`np.dot`) when the tile has many query rows; a decode tile has a
handful, where a BLAS call costs more than the product and plain loops are faster.
"""

from __future__ import annotations

import numpy as np
from numba import literal_unroll

from refimpl._numba import inline_kernel, kernel
from refimpl.kernels._exp import fast_exp
from refimpl.kernels.costs import FLOAT_BYTES

# Columns of the per-work-item counters array that kernels fill while they run.
READ_BYTES, WRITE_BYTES, FLOPS, SRAM_BYTES = 0, 1, 2, 3
NUM_COUNTERS = 4
# Below this many query rows a tile multiplies in loops, not BLAS. Both tile products, d = 128,
# measured on this machine: 4 rows x 32 keys (decode) 2.7x faster in loops, 16 x 64 1.1x;
# 32 x 64 1.24x faster through BLAS, 128 x 128 2x.
BLAS_MIN_ROWS = 24


@inline_kernel
def uses_blas(num_rows, kv_heads):
    """Whether a tile of num_rows query rows over kv_heads KV heads multiplies through BLAS."""
    return kv_heads == 1 and num_rows >= BLAS_MIN_ROWS


@inline_kernel
def tile_scores(qs, ks_buf, tile_k, kv_heads, st, use_blas):
    """st[j, r] = (key j of row r's KV head) . qs[r]: the (keys, rows) scores of one tile.

    Rows are grouped by KV head: the first R / kv_heads rows use the K tile in ks_buf rows
    0 .. n - 1, the next ones rows tile_k .., and so on.
    """
    num_keys = st.shape[0]
    if use_blas:  # one KV head
        np.dot(ks_buf[:num_keys], qs.T, st)
        return
    kv_rows = qs.shape[0] // kv_heads
    head_dim = qs.shape[1]
    for kk in range(kv_heads):
        keys = ks_buf[kk * tile_k: kk * tile_k + num_keys]
        r = kk * kv_rows
        # Four rows and two keys per pass: each load of a key feeds four multiply-adds, each
        # of a query two (a decode tile of 4 rows a KV head: 0.76-0.84x the time of two rows
        # and two keys, which in turn measured 1.5x faster than four rows sharing one key).
        while r + 4 <= (kk + 1) * kv_rows:
            q0, q1, q2, q3 = qs[r], qs[r + 1], qs[r + 2], qs[r + 3]
            j = 0
            while j < num_keys:
                k0 = keys[j]
                k1 = keys[j + 1] if j + 1 < num_keys else k0  # an odd key out: k0 twice
                a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = np.float32(0.0)
                for x in range(head_dim):
                    a0 += q0[x] * k0[x]
                    a1 += q1[x] * k0[x]
                    a2 += q2[x] * k0[x]
                    a3 += q3[x] * k0[x]
                    b0 += q0[x] * k1[x]
                    b1 += q1[x] * k1[x]
                    b2 += q2[x] * k1[x]
                    b3 += q3[x] * k1[x]
                st[j, r], st[j, r + 1], st[j, r + 2], st[j, r + 3] = a0, a1, a2, a3
                if j + 1 < num_keys:
                    st[j + 1, r], st[j + 1, r + 1] = b0, b1
                    st[j + 1, r + 2], st[j + 1, r + 3] = b2, b3
                j += 2
            r += 4
        # The rows left over, two and two keys per pass, then one.
        while r + 2 <= (kk + 1) * kv_rows:
            q0, q1 = qs[r], qs[r + 1]
            j = 0
            while j + 2 <= num_keys:
                k0, k1 = keys[j], keys[j + 1]
                a00 = a01 = a10 = a11 = np.float32(0.0)
                for x in range(head_dim):
                    a00 += q0[x] * k0[x]
                    a01 += q0[x] * k1[x]
                    a10 += q1[x] * k0[x]
                    a11 += q1[x] * k1[x]
                st[j, r], st[j + 1, r], st[j, r + 1], st[j + 1, r + 1] = a00, a01, a10, a11
                j += 2
            if j < num_keys:
                k0 = keys[j]
                a00 = a10 = np.float32(0.0)
                for x in range(head_dim):
                    a00 += q0[x] * k0[x]
                    a10 += q1[x] * k0[x]
                st[j, r], st[j, r + 1] = a00, a10
            r += 2
        if r < (kk + 1) * kv_rows:  # an odd row out
            q0 = qs[r]
            for j in range(num_keys):
                k0 = keys[j]
                a00 = np.float32(0.0)
                for x in range(head_dim):
                    a00 += q0[x] * k0[x]
                st[j, r] = a00


@inline_kernel
def tile_values(pt, vs_buf, tile_k, kv_heads, pv, use_blas):
    """pv[r] = sum over keys j of pt[j, r] * (value j of row r's KV head)."""
    num_keys = pt.shape[0]
    if use_blas:
        np.dot(pt.T, vs_buf[:num_keys], pv)
        return
    pv[:] = 0.0
    kv_rows = pv.shape[0] // kv_heads
    for kk in range(kv_heads):
        values = vs_buf[kk * tile_k:]  # the value tile of KV head kk
        r = kk * kv_rows
        # Four rows and four keys per pass: each load of a value feeds four rows (a decode
        # tile of 4 rows a KV head: 0.7x the time of one row and four keys, as below).
        while r + 4 <= (kk + 1) * kv_rows:
            o0, o1, o2, o3 = pv[r], pv[r + 1], pv[r + 2], pv[r + 3]
            j = 0
            while j + 4 <= num_keys:
                v0, v1, v2, v3 = values[j], values[j + 1], values[j + 2], values[j + 3]
                a0, b0, c0, d0 = pt[j, r], pt[j + 1, r], pt[j + 2, r], pt[j + 3, r]
                a1, b1, c1, d1 = pt[j, r + 1], pt[j + 1, r + 1], pt[j + 2, r + 1], pt[j + 3, r + 1]
                a2, b2, c2, d2 = pt[j, r + 2], pt[j + 1, r + 2], pt[j + 2, r + 2], pt[j + 3, r + 2]
                a3, b3, c3, d3 = pt[j, r + 3], pt[j + 1, r + 3], pt[j + 2, r + 3], pt[j + 3, r + 3]
                for x in range(o0.shape[0]):
                    w0, w1, w2, w3 = v0[x], v1[x], v2[x], v3[x]
                    o0[x] += a0 * w0 + b0 * w1 + c0 * w2 + d0 * w3
                    o1[x] += a1 * w0 + b1 * w1 + c1 * w2 + d1 * w3
                    o2[x] += a2 * w0 + b2 * w1 + c2 * w2 + d2 * w3
                    o3[x] += a3 * w0 + b3 * w1 + c3 * w2 + d3 * w3
                j += 4
            while j < num_keys:
                v0 = values[j]
                a0, a1, a2, a3 = pt[j, r], pt[j, r + 1], pt[j, r + 2], pt[j, r + 3]
                for x in range(o0.shape[0]):
                    o0[x] += a0 * v0[x]
                    o1[x] += a1 * v0[x]
                    o2[x] += a2 * v0[x]
                    o3[x] += a3 * v0[x]
                j += 1
            r += 4
        # The rows left over, one at a time.
        while r < (kk + 1) * kv_rows:
            values_row(pt, values, pv[r], r, num_keys)
            r += 1


@inline_kernel
def values_row(pt, values, row, r, num_keys):
    """row += sum over keys j of pt[j, r] * values[j]."""
    j = 0
    # Four keys per pass: a quarter of the loads and stores of the output row.
    while j + 4 <= num_keys:
        p0, p1, p2, p3 = pt[j, r], pt[j + 1, r], pt[j + 2, r], pt[j + 3, r]
        v0, v1, v2, v3 = values[j], values[j + 1], values[j + 2], values[j + 3]
        for x in range(row.shape[0]):
            row[x] += p0 * v0[x] + p1 * v1[x] + p2 * v2[x] + p3 * v3[x]
        j += 4
    while j < num_keys:
        p0 = pt[j, r]
        v0 = values[j]
        for x in range(row.shape[0]):
            row[x] += p0 * v0[x]
        j += 1


@inline_kernel
def mask_future(st, rows_per_head, pos0, key0):
    """Set to -inf the scores of keys after their query's position (query row r is at
    position pos0 + r % rows_per_head, key j at key0 + j)."""
    num_rows = st.shape[1]
    for j in range(st.shape[0]):
        masked = min(key0 + j - pos0, rows_per_head)  # queries of each head before key j
        if masked <= 0:
            continue
        row = st[j]
        for head_row0 in range(0, num_rows, rows_per_head):
            row[head_row0: head_row0 + masked] = -np.inf


@inline_kernel
def attend_tile(qs, ks_buf, vs_buf, tile_k, kv_heads, st, pv, m, l, o, alpha,  # noqa: E741
                rows_per_head, pos0, key0, causal):
    """Fold one K/V tile into the running max `m`, sum `l` and output `o` of each query row.

    qs: (R, d) query rows, already scaled by 1/sqrt(d), grouped by KV head (R / kv_heads rows
    each); within a KV head, heads of rows_per_head rows, row r at query position
    pos0 + r % rows_per_head. ks_buf, vs_buf: (kv_heads * tile_k, d) K/V tiles, keys at
    positions key0 .. key0 + n - 1. st: (n, R) and pv: (R, d) scratch; m, l, alpha: (R,);
    o: (R, d).
    """
    num_rows = qs.shape[0]
    use_blas = uses_blas(num_rows, kv_heads)
    tile_scores(qs, ks_buf, tile_k, kv_heads, st, use_blas)
    if causal and key0 + st.shape[0] - 1 > pos0:  # some key lies after some query
        mask_future(st, rows_per_head, pos0, key0)
    new_max = alpha  # holds the new running max until the rescale factors replace it
    for r in range(num_rows):
        new_max[r] = m[r]
    for j in range(st.shape[0]):
        row = st[j]
        for r in range(num_rows):
            new_max[r] = row[r] if row[r] > new_max[r] else new_max[r]
    for r in range(num_rows):
        rescale = fast_exp(m[r] - new_max[r])  # 0 on the first tile (m = -inf)
        m[r] = new_max[r]
        alpha[r] = rescale
        l[r] *= rescale
    for j in range(st.shape[0]):
        row = st[j]
        for r in range(num_rows):
            # A masked score is -inf; a row with nothing unmasked yet has max -inf too and its
            # difference is NaN: fast_exp gives 0 for both, the probability they stand for.
            p = fast_exp(row[r] - m[r])
            row[r] = p
            l[r] += p
    tile_values(st, vs_buf, tile_k, kv_heads, pv, use_blas)
    for r in range(num_rows):
        o_row = o[r]
        pv_row = pv[r]
        rescale = alpha[r]
        for x in range(o_row.shape[0]):
            o_row[x] = o_row[x] * rescale + pv_row[x]


@kernel
def new_scratch(max_rows, tile_k, kv_heads, head_dim):
    """Fresh scratch of one work item: max_rows query rows (spread over kv_heads KV heads) and
    K/V tiles of tile_k keys for each KV head."""
    return (
        np.empty(max_rows * head_dim, np.float32),  # Q rows (flat: views take the rows in use)
        np.empty((kv_heads * tile_k, head_dim), np.float32),  # K tiles, one per KV head
        np.empty((kv_heads * tile_k, head_dim), np.float32),  # V tiles
        np.empty(max_rows * tile_k, np.float32),  # scores / probabilities
        np.empty(max_rows * head_dim, np.float32),  # P @ V of one tile
        np.empty(max_rows * head_dim, np.float32),  # output accumulator
        np.empty(max_rows, np.float32),  # running max
        np.empty(max_rows, np.float32),  # running sum
        np.empty(max_rows, np.float32),  # new max, then rescale factors
    )


@kernel
def scratch_bytes(scratch):
    """Bytes of all scratch buffers: the work item's measured SRAM footprint."""
    total = 0
    for buf in literal_unroll(scratch):
        total += buf.nbytes
    return total


@inline_kernel
def start_rows(scratch, num_rows, head_dim):
    """Views of the Q, P @ V, output, max, sum and rescale buffers for num_rows rows, the
    running state emptied."""
    qs_buf, _, _, _, pv_buf, o_buf, m_buf, l_buf, alpha_buf = scratch
    o = rows_view(o_buf, num_rows, head_dim)
    m = m_buf[:num_rows]
    l = l_buf[:num_rows]  # noqa: E741
    m[:] = -np.inf
    l[:] = 0.0
    o[:] = 0.0
    return (rows_view(qs_buf, num_rows, head_dim), rows_view(pv_buf, num_rows, head_dim), o, m,
            l, alpha_buf[:num_rows])


@inline_kernel
def rows_view(flat, num_rows, num_cols):
    """The first num_rows * num_cols floats of a flat buffer as a C-contiguous matrix."""
    return flat[: num_rows * num_cols].reshape(num_rows, num_cols)


@inline_kernel
def copy_rows(dst, src, first_row, num_rows):
    """dst[:num_rows] = src[first_row: first_row + num_rows] for C-contiguous matrices."""
    # A loop, not slice assignment: Numba compiles the shape-mismatch message of an array
    # assigned to a slice, which alone took 3.8 s of the prefill kernel's 10.5 s first call.
    for i in range(num_rows):
        dst_row = dst[i]
        src_row = src[first_row + i]
        for x in range(dst_row.shape[0]):
            dst_row[x] = src_row[x]


@inline_kernel
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


@inline_kernel
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
