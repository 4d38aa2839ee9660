"""Floats built from their bits, in 16- and 32-bit integer operations a vector unit has.

Numba has no bit cast between integers and floats, and widens integer arithmetic to 64 bits,
which AVX2 cannot vectorize; these two intrinsics are a few LLVM instructions on narrow
integers each, so the loops that call them still run in SIMD lanes.
"""

from __future__ import annotations

from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

_I32 = ir.IntType(32)
_F32 = ir.FloatType()
_F32_BIAS = 127
_F32_MANTISSA_BITS = 23
_I16 = ir.IntType(16)
# e4m3 (see `quant`): sign bit 7, exponent bits 3..6 with bias 7, mantissa bits 0..2. Its
# magnitude bits shifted to the top of a float16's (bias 15) make a half that is the value
# times 2**-8, subnormal codes included, since a half's subnormals have e4m3's spacing; the
# hardware widens half to float32 (F16C's vcvtph2ps) with no microcode assist. Built in
# float32 bits instead, a subnormal code needs a select, and the decode ran 1.27x slower
# (decode step, 32 x 4096 tokens, 1 thread: 128-131 ms against 101 ms).
_E4M3_SIGN, _E4M3_MAGNITUDE = 0x80, 0x7F
_HALF_SIGN_SHIFT, _HALF_MAGNITUDE_SHIFT = 8, 7
_E4M3_OVER_HALF = 2.0**8


@intrinsic
def pow2(typingctx, n):
    """2**n as a float32, for a float32 n holding an integer in [-126, 127]."""
    if n != types.float32:
        return None

    def codegen(context, builder, signature, args):
        exponent = builder.add(builder.fptosi(args[0], _I32), _I32(_F32_BIAS))
        return builder.bitcast(builder.shl(exponent, _I32(_F32_MANTISSA_BITS)), _F32)

    return types.float32(n), codegen


@intrinsic
def e4m3_value(typingctx, code):
    """The float32 value of an FP8 e4m3 code: a uint8 that is not NaN (0x7F or 0xFF)."""
    if code != types.uint8:
        return None

    def codegen(context, builder, signature, args):
        c = builder.zext(args[0], _I16)
        sign = builder.shl(builder.and_(c, _I16(_E4M3_SIGN)), _I16(_HALF_SIGN_SHIFT))
        magnitude = builder.shl(builder.and_(c, _I16(_E4M3_MAGNITUDE)), _I16(_HALF_MAGNITUDE_SHIFT))
        half = builder.bitcast(builder.or_(sign, magnitude), ir.HalfType())
        return builder.fmul(builder.fpext(half, _F32), ir.Constant(_F32, _E4M3_OVER_HALF))

    return types.float32(code), codegen
