"""The operators of one transformer layer on one GPU of a tensor-parallel group, and their time.

Shapes follow Megatron-style tensor parallelism (Shoeybi et al. 2019), as vLLM and Vidur shard
Llama: the Q/K/V and gate/up projections split their output columns over the `tp` GPUs, the
output and down projections their input rows; norms and residual adds run on the whole hidden
state on every GPU; two all-reduces per layer join the partial sums. The time formulas are
plain arithmetic, so the fit runs them on NumPy arrays and the compiled step formula
(refimpl.costmodel.step) on floats: one definition of each.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from refimpl.config import ModelConfig, dtype_bytes
from refimpl.config.efficiency import GemmFit, OpFit

__all__ = ["ELEMENTWISE", "GEMMS", "MAX_BLOCK", "Gemm", "block_threads", "elementwise_bytes",
           "gemm_terms", "layer_gemms", "lm_head", "memory_terms", "op_s", "operator_terms",
           "per_layer"]

GEMMS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")  # Vidur's names
ELEMENTWISE = ("norm", "rope", "act", "add", "emb")
# How often each memory-bound operator runs per layer (emb: once per step, not per layer).
# Llama has an input and a post-attention RMSNorm and two residual adds per layer.
PER_LAYER = {"norm": 2, "rope": 1, "act": 1, "add": 2, "emb": 0}
MAX_BLOCK = 1024  # threads: a CUDA block's limit, and the unit of `OpFit.row_s`


@dataclass(frozen=True)
class Gemm:
    """One GPU's share of a projection: (rows) x k times k x n."""

    name: str
    n: int  # output columns on this GPU
    k: int  # input width on this GPU


def layer_gemms(model: ModelConfig, tp: int) -> tuple[Gemm, ...]:
    """The four projections of a layer, each GPU's share under `tp`-way tensor parallelism."""
    q = model.num_heads * model.head_dim
    kv = model.num_kv_heads * model.head_dim
    up = (2 if model.gated_mlp else 1) * model.intermediate_size  # gate and up fused (vLLM)
    h = model.hidden_size
    return (Gemm("attn_pre_proj", (q + 2 * kv) // tp, h), Gemm("attn_post_proj", h, q // tp),
            Gemm("mlp_up_proj", up // tp, h),
            Gemm("mlp_down_proj", h, model.intermediate_size // tp))


def lm_head(model: ModelConfig, tp: int) -> Gemm:
    """The vocabulary projection, split over the vocabulary."""
    return Gemm("lm_head", model.vocab_size // tp, model.hidden_size)


def elementwise_bytes(model: ModelConfig, tp: int) -> dict[str, int]:
    """Bytes each memory-bound operator moves per token (read and written), on one GPU."""
    b = dtype_bytes(model.weight_dtype, "weight_dtype")
    h = model.hidden_size
    qk = (model.num_heads + model.num_kv_heads) * model.head_dim // tp
    act = (3 if model.gated_mlp else 2) * model.intermediate_size // tp  # read gate, up; write
    return {"norm": 2 * h * b, "rope": 2 * qk * b, "act": act * b, "add": 3 * h * b,
            "emb": 2 * h * b}


def block_threads(model: ModelConfig, tp: int) -> dict[str, int]:
    """Threads of the one block per token that vLLM's norm, rotary and activation kernels
    launch (csrc: `min(hidden_size, 1024)`, `min(num_heads * rot_dim / 2, 512)`,
    `min(d, 1024)`); the adds and the embedding are flat torch kernels: MAX_BLOCK."""
    q_pairs = model.num_heads // tp * model.head_dim // 2
    return {"norm": min(model.hidden_size, MAX_BLOCK), "rope": min(q_pairs, 512),
            "act": min(model.intermediate_size // tp, MAX_BLOCK), "add": MAX_BLOCK,
            "emb": MAX_BLOCK}


def operator_terms(fit: OpFit, model: ModelConfig, tp: int, op: str,
                   bandwidth: float) -> tuple[float, ...]:
    """`memory_terms` for memory-bound operator `op` of `model` split over `tp` GPUs: its
    bytes per row and the threads of the block it launches."""
    return memory_terms(fit, elementwise_bytes(model, tp)[op], bandwidth,
                        block_threads(model, tp)[op])


def per_layer(op: str) -> int:
    """Runs of a memory-bound operator per layer (0: once per step)."""
    return PER_LAYER[op]


def op_s(fixed_s, s_per_row, flop_s_per_row, floor_s, tile_rows, spill_rows, s_per_spill_row,
         sharpness, rows):
    """Seconds of one operator over `rows` rows, its launch left out: a smooth roofline
    (t_mem^p + t_flop^p)^(1/p). t_mem = fixed_s + rows * s_per_row, plus s_per_spill_row for
    every row past `spill_rows` (a memory-bound operator's bytes past the L2 cache);
    t_flop = padded rows * flop_s_per_row + floor_s, the rows padded up to whole tiles of
    `tile_rows` (a GEMM computes whole tiles), where a GEMM's floor is the FLOP time of
    `rows_half` more rows (SMs left idle by a small grid) and a memory-bound operator's floor
    is its launch (tile_rows 1: a tiny kernel costs the launch, a large one its bytes, and the
    two overlap)."""
    t_mem = fixed_s + rows * s_per_row + np.maximum(rows - spill_rows, 0.0) * s_per_spill_row
    t_flop = ((rows + tile_rows - 1) // tile_rows) * tile_rows * flop_s_per_row + floor_s
    return (t_mem ** sharpness + t_flop ** sharpness) ** (1.0 / sharpness)


def gemm_terms(gemm: Gemm, fit: GemmFit, peak_flops: float, bandwidth: float,
               weight_bytes: int) -> tuple[float, ...]:
    """`op_s`'s terms before the sharpness for `gemm` (weights and activations stream: no
    cache term)."""
    byte_s = 1.0 / (bandwidth * fit.weight_read_efficiency)
    flop_s = 2.0 * gemm.n * gemm.k / (peak_flops * fit.compute_efficiency)
    return (weight_bytes * gemm.n * gemm.k * byte_s, weight_bytes * (gemm.n + gemm.k) * byte_s,
            flop_s, flop_s * fit.rows_half, float(fit.tile_rows), 0.0, 0.0)


def memory_terms(fit: OpFit, nbytes_per_row: float, bandwidth: float,
                 threads: int = MAX_BLOCK) -> tuple[float, ...]:
    """`op_s`'s terms before the sharpness for a memory-bound operator: its floor is the
    launch plus one block streaming a row, each row costs its bytes and its block's share of
    `row_s` (a block of `threads` holds that many of an SM's thread slots while it runs)."""
    s_per_row = nbytes_per_row / (bandwidth * fit.efficiency) + fit.row_s * threads / MAX_BLOCK
    floor_s = fit.launch_s + nbytes_per_row * fit.row_latency_s_per_byte
    if math.isinf(fit.cache_bytes):
        return 0.0, s_per_row, 0.0, floor_s, 1.0, 0.0, 0.0
    spilled = nbytes_per_row * (1.0 / fit.spill_efficiency - 1.0 / fit.efficiency) / bandwidth
    return 0.0, s_per_row, 0.0, floor_s, 1.0, fit.cache_bytes / nbytes_per_row, spilled
