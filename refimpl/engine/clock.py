"""A monotonic nanosecond clock callable from compiled code, for the decision time of a step.

Numba has no clock of its own, and a ctypes function pointer would bake an address into the
machine code (so the kernel could not be cached on disk). This intrinsic instead calls libc's
`clock_gettime` by name, as C code would: the symbol is resolved when the kernel is loaded, so
caching works, and a call costs about 25 ns (Linux's vDSO). POSIX only: the clock id is
Python's `time.CLOCK_MONOTONIC`, passed in because its value differs between systems.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["monotonic_ns"]


@intrinsic
def monotonic_ns(typingctx, clock_id):
    """Nanoseconds on clock `clock_id` (`int clock_gettime(clockid_t, struct timespec *)`)."""
    del typingctx

    def codegen(context, builder, signature, args):
        i32, i64 = ir.IntType(32), ir.IntType(64)
        timespec = ir.LiteralStructType([i64, i64])  # tv_sec, tv_nsec (64-bit POSIX ABI)
        fnty = ir.FunctionType(i32, [i32, timespec.as_pointer()])
        clock_gettime = cgutils.get_or_insert_function(builder.module, fnty, "clock_gettime")
        ts = cgutils.alloca_once(builder, timespec)
        builder.call(clock_gettime, [builder.trunc(args[0], i32), ts])
        seconds = builder.load(cgutils.gep_inbounds(builder, ts, 0, 0))
        nanoseconds = builder.load(cgutils.gep_inbounds(builder, ts, 0, 1))
        return builder.add(builder.mul(seconds, ir.Constant(i64, 1_000_000_000)), nanoseconds)

    return types.int64(types.int64), codegen
