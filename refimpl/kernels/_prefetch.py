"""Software prefetch: ask for a K/V row's cache lines before the loop that reads them.

A decode step reads every K/V row once, straight from its page, and does little arithmetic
on it; with nothing asked ahead the core waits for each tile's rows, then computes while the
memory bus idles, and the step takes the sum of the two. Asking for the next rows while the
current ones are multiplied overlaps them (decode step, 32 x 4096 tokens, 1 thread: 66-70 ms
against 99-106 ms without). Numba has no prefetch, so this is LLVM's `llvm.prefetch`.
"""

from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from refimpl._numba import inline_kernel

CACHE_LINE_BYTES = 64
_I32 = ir.IntType(32)
_READ = 0
# Into L2, not L1: a tile's K and V (256 KiB for the decode tiles) fit a 512 KiB L2 but not a
# 32 KiB L1, where the lines asked for would evict the queries and scores in use (values asked
# into L1 during the scores: the decode step ran 1.13x slower than with no prefetch at all).
_LOCALITY_L2 = 2
_DATA_CACHE = 1


@intrinsic
def prefetch(typingctx, row, index):
    """Hint the cache to fetch, for reading, the line that holds row[index] of a 1-D array."""
    if not isinstance(row, types.Array) or row.ndim != 1 or not isinstance(index, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        array = context.make_array(signature.args[0])(context, builder, args[0])
        address = cgutils.get_item_pointer(context, builder, signature.args[0], array,
                                           [args[1]])
        byte_pointer = ir.IntType(8).as_pointer()
        hint = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [byte_pointer, _I32, _I32, _I32]),
            "llvm.prefetch.p0")
        builder.call(hint, [builder.bitcast(address, byte_pointer), _I32(_READ),
                            _I32(_LOCALITY_L2), _I32(_DATA_CACHE)])
        return context.get_dummy_value()

    return types.none(row, index), codegen


@inline_kernel
def prefetch_row(row):
    """Ask for every cache line of a C-contiguous 1-D row."""
    for x in range(0, row.shape[0], CACHE_LINE_BYTES // row.itemsize):
        prefetch(row, x)
