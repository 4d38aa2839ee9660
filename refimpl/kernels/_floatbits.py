"""Floats built from their bits, in 16- and 32-bit integer operations a vector unit has.

Numba has no bit cast between integers and floats, and widens integer arithmetic to 64 bits,
which AVX2 cannot vectorize; these two intrinsics are a few LLVM instructions on 16- and 32-bit
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
# e4m3 (see `quant`): sign bit 7, exponent bits 3..6 with bias 7, mantissa bits 0..2.
_E4M3_SIGN, _E4M3_MAGNITUDE, _E4M3_MANTISSA = 0x80, 0x7F, 0x7
# Through a float16: the magnitude bits moved to the top of a half's (bias 15) make a half that
# is the value times 2**-8, subnormal codes included, since a half's subnormals have e4m3's
# spacing; F16C's vcvtph2ps widens it to float32 with no microcode assist. Decode step with FP8
# pages, 32 x 4096 tokens, 1 thread: 101 ms this way, 128-131 ms in float32 bits.
_I16 = ir.IntType(16)
_HALF_SIGN_SHIFT, _HALF_MAGNITUDE_SHIFT = 8, 7
_E4M3_OVER_HALF = 2.0**8
# In float32 bits, for a target without F16C (there LLVM lowers the widening to a call to
# __extendhfsf2, which Numba's JIT does not link: the process segfaults). A normal code's
# exponent and mantissa move to the top of a float32's, rebiased; exponent field 0 is
# subnormal, mantissa * 2**-9, computed apart because building it in the bits would make a
# float32 subnormal, which costs a microcode assist (2.6x slower on uniform codes).
_E4M3_SIGN_SHIFT, _E4M3_MAGNITUDE_SHIFT = 24, 20
_E4M3_REBIAS = (_F32_BIAS - 7) << _F32_MANTISSA_BITS
_E4M3_SUBNORMAL_UNIT = 2.0**-9
_F16C = "+f16c"


@intrinsic
def pow2(typingctx, n):
    """2**n as a float32, for a float32 n holding an integer in [-126, 127]."""
    if n != types.float32:
        return None

    def codegen(context, builder, signature, args):
        exponent = builder.add(builder.fptosi(args[0], _I32), _I32(_F32_BIAS))
        return builder.bitcast(builder.shl(exponent, _I32(_F32_MANTISSA_BITS)), _F32)

    return types.float32(n), codegen


def target_has_f16c(context) -> bool:
    """Whether the machine code being built may use F16C's half-to-float32 conversion."""
    _, _, features = context.codegen().magic_tuple()
    return _F16C in features.split(",")


def _e4m3_through_half(builder, c):
    c = builder.zext(c, _I16)
    sign = builder.shl(builder.and_(c, _I16(_E4M3_SIGN)), _I16(_HALF_SIGN_SHIFT))
    magnitude = builder.shl(builder.and_(c, _I16(_E4M3_MAGNITUDE)), _I16(_HALF_MAGNITUDE_SHIFT))
    half = builder.bitcast(builder.or_(sign, magnitude), ir.HalfType())
    return builder.fmul(builder.fpext(half, _F32), ir.Constant(_F32, _E4M3_OVER_HALF))


def _e4m3_in_float32_bits(builder, c):
    c = builder.zext(c, _I32)
    sign = builder.shl(builder.and_(c, _I32(_E4M3_SIGN)), _I32(_E4M3_SIGN_SHIFT))
    magnitude = builder.and_(c, _I32(_E4M3_MAGNITUDE))
    normal = builder.add(builder.shl(magnitude, _I32(_E4M3_MAGNITUDE_SHIFT)), _I32(_E4M3_REBIAS))
    mantissa = builder.sitofp(builder.and_(c, _I32(_E4M3_MANTISSA)), _F32)
    subnormal = builder.bitcast(
        builder.fmul(mantissa, ir.Constant(_F32, _E4M3_SUBNORMAL_UNIT)), _I32)
    is_subnormal = builder.icmp_unsigned("<", magnitude, _I32(_E4M3_MANTISSA + 1))
    bits = builder.select(is_subnormal, subnormal, normal)
    return builder.bitcast(builder.or_(bits, sign), _F32)


@intrinsic
def e4m3_value(typingctx, code):
    """The float32 value of an FP8 e4m3 code: a uint8 that is not NaN (0x7F or 0xFF)."""
    if code != types.uint8:
        return None

    def codegen(context, builder, signature, args):
        if target_has_f16c(context):
            return _e4m3_through_half(builder, args[0])
        return _e4m3_in_float32_bits(builder, args[0])

    return types.float32(code), codegen
