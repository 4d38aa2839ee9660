"""Quantized KV pages: INT8 and FP8 (e4m3) codes with one float32 scale per (page, KV head).

The seed's third rung under memory pressure is to quantize KV. A page of one KV head is scaled
so its largest magnitude maps to the format's largest code: 127 for symmetric INT8, 448 for
e4m3 (the OCP 8-bit float "E4M3FN": 4 exponent bits with bias 7, 3 mantissa bits, no
infinities, NaN = S.1111.111). FP8 is emulated: codes are `uint8`, decoded through a 256-entry
table. Encoding rounds to nearest, ties to even, and saturates to +-448 (infinities included);
NaN encodes to 0x7F.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from refimpl.kernels.validate import check_choice, check_finite, float_array

__all__ = [
    "FP8_E4M3_MAX",
    "FP8_E4M3_TABLE",
    "KV_FORMATS",
    "QuantizedPages",
    "dequantize_pages",
    "fp8_e4m3_decode",
    "fp8_e4m3_encode",
    "quantize_pages",
]

KVFormat = Literal["int8", "fp8_e4m3"]
KV_FORMATS: tuple[str, ...] = ("int8", "fp8_e4m3")
INT8_MAX = 127  # symmetric: -128 is never used, so negation is exact
FP8_E4M3_MAX = 448.0  # 1.75 * 2**8: exponent field 15, mantissa 110
FP8_E4M3_NAN = 0x7F
_PAGES_PER_BATCH = 256  # pages quantized at a time: float64 temporaries stay ~100 MiB


def _e4m3_table() -> np.ndarray:
    """(256,) float32: the value of every e4m3 code."""
    codes = np.arange(256)
    sign = np.where(codes >> 7, -1.0, 1.0)
    exponent = (codes >> 3) & 0xF
    mantissa = codes & 0x7
    normal = (1.0 + mantissa / 8.0) * 2.0 ** (exponent - 7)
    subnormal = (mantissa / 8.0) * 2.0**-6  # exponent field 0: no implicit leading 1
    values = sign * np.where(exponent == 0, subnormal, normal)
    values[(exponent == 0xF) & (mantissa == 0x7)] = np.nan
    return values.astype(np.float32)


FP8_E4M3_TABLE = _e4m3_table()
FP8_E4M3_TABLE.flags.writeable = False
_MAGNITUDES = FP8_E4M3_TABLE[: FP8_E4M3_NAN].astype(np.float64)  # codes 0..126, increasing


def fp8_e4m3_decode(codes: np.ndarray) -> np.ndarray:
    """float32 values of uint8 e4m3 codes, same shape."""
    return FP8_E4M3_TABLE[np.asarray(codes, dtype=np.uint8)]


def fp8_e4m3_encode(x: np.ndarray) -> np.ndarray:
    """uint8 e4m3 codes of `x`: nearest value, ties to the even code, saturating at +-448."""
    x = np.asarray(x, dtype=np.float32)
    magnitude = np.abs(x).astype(np.float64)  # float64: midpoints of e4m3 values are exact
    upper = np.clip(np.searchsorted(_MAGNITUDES, magnitude), 1, FP8_E4M3_NAN - 1)
    below = magnitude - _MAGNITUDES[upper - 1]
    above = _MAGNITUDES[upper] - magnitude
    take_upper = (below > above) | ((below == above) & (upper % 2 == 0))
    code = np.where(take_upper, upper, upper - 1)
    code = np.where(magnitude >= FP8_E4M3_MAX, FP8_E4M3_NAN - 1, code)  # saturate, inf too
    code = code | (np.signbit(x).astype(np.int64) << 7)
    code = np.where(np.isnan(x), FP8_E4M3_NAN, code)
    return code.astype(np.uint8)


@dataclass(frozen=True, eq=False)
class QuantizedPages:
    """A quantized KV cache: codes (num_pages, P, Hkv, d) and scales (num_pages, Hkv).

    Element (page, t, h, x) stands for `decode(codes[page, t, h, x]) * scales[page, h]`.
    """

    codes: np.ndarray  # int8 for "int8", uint8 e4m3 codes for "fp8_e4m3"
    scales: np.ndarray  # float32
    fmt: KVFormat

    @property
    def shape(self) -> tuple[int, ...]:
        """(num_pages, page_size, Hkv, d), as for a float cache."""
        return self.codes.shape


def quantize_pages(cache: np.ndarray, fmt: KVFormat = "int8") -> QuantizedPages:
    """Quantize a float32 cache (num_pages, P, Hkv, d), scaling each (page, KV head) apart."""
    check_choice("fmt", fmt, KV_FORMATS)
    cache = float_array("cache", cache, 4)
    check_finite("cache", cache)
    amax = np.abs(cache).max(axis=(1, 3))  # (num_pages, Hkv)
    top = INT8_MAX if fmt == "int8" else FP8_E4M3_MAX
    scales = np.where(amax > 0, amax / top, 1.0).astype(np.float32)  # all-zero pages: 1
    codes = np.empty(cache.shape, np.int8 if fmt == "int8" else np.uint8)
    for lo in range(0, cache.shape[0], _PAGES_PER_BATCH):  # bounded temporaries
        hi = lo + _PAGES_PER_BATCH
        scaled = cache[lo:hi] / scales[lo:hi, None, :, None]  # (pages, P, Hkv, d), |x| <= top
        if fmt == "int8":
            codes[lo:hi] = np.clip(np.rint(scaled), -INT8_MAX, INT8_MAX)
        else:
            codes[lo:hi] = fp8_e4m3_encode(scaled)
    return QuantizedPages(codes, scales, fmt)


def dequantize_pages(pages: QuantizedPages) -> np.ndarray:
    """The float32 cache (num_pages, P, Hkv, d) that `pages` stands for."""
    values = (pages.codes.astype(np.float32) if pages.fmt == "int8"
              else fp8_e4m3_decode(pages.codes))
    return values * pages.scales[:, None, :, None]
