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
from numba import literal_unroll, types
from numba.extending import overload

from refimpl._numba import inline_kernel, kernel
from refimpl.kernels._exp import fast_exp
from refimpl.kernels._floatbits import e4m3_value
from refimpl.kernels._prefetch import prefetch_row
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


def kv_value(element):
    """The float32 a K/V element stands for, before its scale: float32 elements hold values,
    int8 ones integers, uint8 ones FP8 e4m3 codes (compiled per dtype)."""
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


def float_dot(a, b, out):
    """out = a @ b through BLAS, a or b converted to float32 first where it is not."""
    raise NotImplementedError("float_dot runs only inside kernels")


@overload(float_dot, inline="always")
def _float_dot(a, b, out):
    # Typing alone needs the conversion: the paged kernel gathers quantized K/V into float32
    # tiles before any BLAS product, but its in-place branch types the same calls with them.
    if a.dtype == types.float32 and b.dtype == types.float32:
        return lambda a, b, out: np.dot(a, b, out)
    if a.dtype == types.float32:
        return lambda a, b, out: np.dot(a, b.astype(np.float32), out)
    return lambda a, b, out: np.dot(a.astype(np.float32), b, out)


@inline_kernel
def tile_scores(qs, keys, key_rows, key_scales, tile_k, kv_heads, st, use_blas, values,
                in_place):
    """st[j, r] = (key j of row r's KV head) . qs[r]: the (keys, rows) scores of one tile.

    Rows are grouped by KV head: the first R / kv_heads rows use KV head 0, the next ones KV
    head 1, and so on. Key j of KV head kk is row key_rows[kk * tile_k + j] of keys, times
    key_scales[kk * tile_k + j]; with use_blas (one KV head), the first rows of keys, as is.
    in_place: keys and values are the cache's rows, and the tile's values are asked for
    (`prefetch_row`) while its scores are computed.
    """
    num_keys = st.shape[0]
    if use_blas:
        float_dot(keys[:num_keys], qs.T, st)
        return
    kv_rows = qs.shape[0] // kv_heads
    head_dim = qs.shape[1]
    # Two keys of every KV head per pass, so that a page, which holds a token's KV heads side
    # by side, is read front to back; four rows per pass: each load of a key element feeds
    # four multiply-adds, each of a query element two (a decode tile of 4 rows a KV head:
    # 0.76-0.84x the time of two rows and two keys, 1.5x faster than four rows and one key).
    for j in range(0, num_keys, 2):
        j1 = j + 1 if j + 1 < num_keys else j  # an odd key out: key j twice
        for kk in range(kv_heads):
            i0, i1 = kk * tile_k + j, kk * tile_k + j1
            k0, k1 = keys[key_rows[i0]], keys[key_rows[i1]]
            s0, s1 = key_scales[i0], key_scales[i1]
            if in_place:
                prefetch_row(values[key_rows[i0]])
                prefetch_row(values[key_rows[i1]])
            r = kk * kv_rows
            end = r + kv_rows
            while r + 4 <= end:
                q0, q1, q2, q3 = qs[r], qs[r + 1], qs[r + 2], qs[r + 3]
                a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = np.float32(0.0)
                for x in range(head_dim):
                    e0, e1 = kv_value(k0[x]), kv_value(k1[x])
                    a0 += q0[x] * e0
                    a1 += q1[x] * e0
                    a2 += q2[x] * e0
                    a3 += q3[x] * e0
                    b0 += q0[x] * e1
                    b1 += q1[x] * e1
                    b2 += q2[x] * e1
                    b3 += q3[x] * e1
                st[j, r], st[j, r + 1], st[j, r + 2], st[j, r + 3] = (
                    a0 * s0, a1 * s0, a2 * s0, a3 * s0)
                st[j1, r], st[j1, r + 1], st[j1, r + 2], st[j1, r + 3] = (
                    b0 * s1, b1 * s1, b2 * s1, b3 * s1)
                r += 4
            while r < end:  # the rows left over, one at a time
                q0 = qs[r]
                a0 = b0 = np.float32(0.0)
                for x in range(head_dim):
                    a0 += q0[x] * kv_value(k0[x])
                    b0 += q0[x] * kv_value(k1[x])
                st[j, r], st[j1, r] = a0 * s0, b0 * s1
                r += 1


@inline_kernel
def tile_values(pt, values, key_rows, value_scales, tile_k, kv_heads, pv, use_blas, keys,
                next_rows, num_next):
    """pv[r] = sum over keys j of pt[j, r] * (value j of row r's KV head), the values found as
    `tile_scores` finds keys; the first num_next keys of the next tile, rows next_rows of keys,
    are asked for meanwhile (`prefetch_row`)."""
    num_keys = pt.shape[0]
    if use_blas:
        float_dot(pt.T, values[:num_keys], pv)
        return
    pv[:] = 0.0
    kv_rows = pv.shape[0] // kv_heads
    head_dim = pv.shape[1]
    # Four keys of every KV head per pass, the pages read front to back as in `tile_scores`;
    # four rows per pass: each load of a value element feeds four rows (a decode tile of 4
    # rows a KV head: 0.7x the time of one row and four keys).
    for j in range(0, num_keys - 3, 4):
        for kk in range(kv_heads):
            i = kk * tile_k + j
            for ahead in range(i, kk * tile_k + min(j + 4, num_next)):
                prefetch_row(keys[next_rows[ahead]])
            v0, v1, v2, v3 = (values[key_rows[i]], values[key_rows[i + 1]],
                              values[key_rows[i + 2]], values[key_rows[i + 3]])
            c0, c1, c2, c3 = (value_scales[i], value_scales[i + 1], value_scales[i + 2],
                              value_scales[i + 3])
            r = kk * kv_rows
            end = r + kv_rows
            while r + 4 <= end:
                o0, o1, o2, o3 = pv[r], pv[r + 1], pv[r + 2], pv[r + 3]
                a0, b0, e0, f0 = (pt[j, r] * c0, pt[j + 1, r] * c1, pt[j + 2, r] * c2,
                                  pt[j + 3, r] * c3)
                a1, b1, e1, f1 = (pt[j, r + 1] * c0, pt[j + 1, r + 1] * c1,
                                  pt[j + 2, r + 1] * c2, pt[j + 3, r + 1] * c3)
                a2, b2, e2, f2 = (pt[j, r + 2] * c0, pt[j + 1, r + 2] * c1,
                                  pt[j + 2, r + 2] * c2, pt[j + 3, r + 2] * c3)
                a3, b3, e3, f3 = (pt[j, r + 3] * c0, pt[j + 1, r + 3] * c1,
                                  pt[j + 2, r + 3] * c2, pt[j + 3, r + 3] * c3)
                for x in range(head_dim):
                    w0, w1 = kv_value(v0[x]), kv_value(v1[x])
                    w2, w3 = kv_value(v2[x]), kv_value(v3[x])
                    o0[x] += a0 * w0 + b0 * w1 + e0 * w2 + f0 * w3
                    o1[x] += a1 * w0 + b1 * w1 + e1 * w2 + f1 * w3
                    o2[x] += a2 * w0 + b2 * w1 + e2 * w2 + f2 * w3
                    o3[x] += a3 * w0 + b3 * w1 + e3 * w2 + f3 * w3
                r += 4
            while r < end:  # the rows left over, one at a time
                o0 = pv[r]
                a0, b0, e0, f0 = (pt[j, r] * c0, pt[j + 1, r] * c1, pt[j + 2, r] * c2,
                                  pt[j + 3, r] * c3)
                for x in range(head_dim):
                    o0[x] += (a0 * kv_value(v0[x]) + b0 * kv_value(v1[x])
                              + e0 * kv_value(v2[x]) + f0 * kv_value(v3[x]))
                r += 1
    for j in range(num_keys - num_keys % 4, num_keys):  # the keys left over, one at a time
        for kk in range(kv_heads):
            i = kk * tile_k + j
            v0, c0 = values[key_rows[i]], value_scales[i]
            r = kk * kv_rows
            end = r + kv_rows
            while r + 4 <= end:
                o0, o1, o2, o3 = pv[r], pv[r + 1], pv[r + 2], pv[r + 3]
                a0, a1, a2, a3 = (pt[j, r] * c0, pt[j, r + 1] * c0, pt[j, r + 2] * c0,
                                  pt[j, r + 3] * c0)
                for x in range(head_dim):
                    w0 = kv_value(v0[x])
                    o0[x] += a0 * w0
                    o1[x] += a1 * w0
                    o2[x] += a2 * w0
                    o3[x] += a3 * w0
                r += 4
            while r < end:
                o0 = pv[r]
                a0 = pt[j, r] * c0
                for x in range(head_dim):
                    o0[x] += a0 * kv_value(v0[x])
                r += 1


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
def attend_tile(qs, keys, values, kv_rows, tile_k, kv_heads, st, pv, m, l, o, alpha,  # noqa: E741
                rows_per_head, pos0, key0, causal, in_place, next_rows, num_next):
    """Fold one K/V tile into the running max `m`, sum `l` and output `o` of each query row.

    qs: (R, d) query rows, already scaled by 1/sqrt(d), grouped by KV head (R / kv_heads rows
    each); within a KV head, heads of rows_per_head rows, row r at query position
    pos0 + r % rows_per_head. keys, values: K/V rows, and kv_rows the (rows, key scales,
    value scales) of the tile's keys in them, at positions key0 .. key0 + n - 1, as
    `tile_scores` reads them. st: (n, R) and pv: (R, d) scratch; m, l, alpha: (R,);
    o: (R, d). in_place: keys and values are the cache's own rows, whose next lines to be read
    are asked for ahead: this tile's values, then the next tile's first num_next keys, found
    at next_rows (num_next 0: no next tile, or tiles already in scratch).
    """
    num_rows = qs.shape[0]
    use_blas = uses_blas(num_rows, kv_heads)
    key_rows, key_scales, value_scales = kv_rows
    tile_scores(qs, keys, key_rows, key_scales, tile_k, kv_heads, st, use_blas, values,
                in_place)
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
    tile_values(st, values, key_rows, value_scales, tile_k, kv_heads, pv, use_blas, keys,
                next_rows, num_next)
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
    keys = kv_heads * tile_k
    return (
        np.empty(max_rows * head_dim, np.float32),  # Q rows (flat: views take the rows in use)
        # K and V tiles, one per KV head. Kernels that read the cache in place leave them
        # untouched; the tile's K and V lines asked for into the cache stand in their place.
        np.empty((keys, head_dim), np.float32),
        np.empty((keys, head_dim), np.float32),
        np.empty(max_rows * tile_k, np.float32),  # scores / probabilities
        np.empty(max_rows * head_dim, np.float32),  # P @ V of one tile
        np.empty(max_rows * head_dim, np.float32),  # output accumulator
        np.empty(max_rows, np.float32),  # running max
        np.empty(max_rows, np.float32),  # running sum
        np.empty(max_rows, np.float32),  # new max, then rescale factors
        # Where a tile's keys are, with their K and V scales (see `tile_scores`), for this
        # tile (scratch[9:12]) and the next one (scratch[12:]); by default the K/V tiles' own
        # rows, scales 1.
        np.arange(keys, dtype=np.int64),
        np.ones(keys, np.float32),
        np.ones(keys, np.float32),
        np.arange(keys, dtype=np.int64),
        np.ones(keys, np.float32),
        np.ones(keys, np.float32),
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
    qs_buf, _, _, _, pv_buf, o_buf, m_buf, l_buf, alpha_buf = scratch[:9]
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
