"""Attention kernels over tiles with a simulated SRAM, their NumPy oracle and their costs.

`prefill_attention` (contiguous K/V), `chunk_attention` and `decode_attention` (paged K/V,
optionally INT8 or FP8 pages) are the public kernels; `reference_attention` is the oracle;
`prefill_costs` / `decode_costs` / `chunk_costs` give a tile candidate's SRAM bytes, HBM bytes
and FLOPs analytically. Importing this package imports Numba but compiles nothing.
"""

from refimpl.kernels.attention import (
    chunk_attention,
    decode_attention,
    default_sram_budget,
    prefill_attention,
)
from refimpl.kernels.costs import (
    KernelCosts,
    PagedTiles,
    PrefillTiles,
    chunk_costs,
    decode_costs,
    paged_costs,
    prefill_costs,
)
from refimpl.kernels.quant import (
    KV_FORMATS,
    QuantizedPages,
    dequantize_pages,
    fp8_e4m3_decode,
    fp8_e4m3_encode,
    quantize_pages,
)
from refimpl.kernels.reference import gather_pages, reference_attention

__all__ = [
    "KV_FORMATS",
    "KernelCosts",
    "PagedTiles",
    "PrefillTiles",
    "QuantizedPages",
    "chunk_attention",
    "chunk_costs",
    "decode_attention",
    "decode_costs",
    "default_sram_budget",
    "dequantize_pages",
    "fp8_e4m3_decode",
    "fp8_e4m3_encode",
    "gather_pages",
    "paged_costs",
    "prefill_attention",
    "prefill_costs",
    "quantize_pages",
    "reference_attention",
]
