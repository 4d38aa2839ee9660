"""Whole-model step time: what the serving engine asks the cost model once per engine step.

A step runs every layer once over this step's new tokens: prefill chunks and one token per
decoding sequence, batched together as in Sarathi-Serve / vLLM v1. `RooflineStepModel` is
the ideal roofline (spec-sheet GPUs at 100%, Williams et al.'s roofline per operation);
`CalibratedStepModel` (refimpl.costmodel.calibrated) runs each operator at the efficiency
fitted to measured GPUs; `ProfiledStepModel` (refimpl.costmodel.profiled) is fitted to this
CPU's measured kernels and GEMMs. The first two share `StepCoefficients` and `step_s`, the one
formula the compiled loop runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Protocol

import numpy as np

from refimpl.config import HardwareSpec, ModelConfig, dtype_bytes
from refimpl.errors import ConfigError

__all__ = [
    "DEFAULT_STEP_OVERHEAD_S",
    "NO_OPS",
    "OP_FIELDS",
    "PartsStepModel",
    "RooflineStepModel",
    "StepCoefficients",
    "StepShape",
    "StepTimeModel",
    "no_coefficients",
    "step_s",
]

# Fixed cost of one engine step that no FLOP or byte count sees: kernel launches (with CUDA
# graphs a few microseconds each), sampling, and the host-side bookkeeping of the step.
# 50 us is the order vLLM reports for a graph-captured decode step's host overhead.
DEFAULT_STEP_OVERHEAD_S = 50e-6


def _count(field: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(field, value, "must be a whole number >= 0")


@dataclass(frozen=True)
class StepShape:
    """The work of one engine step, summed over its sequences."""

    prefill_tokens: int  # new prompt tokens computed this step, all chunks together
    prefill_pairs: int  # causal query-key pairs of those chunks: c*s + c*(c+1)//2 per chunk
    decode_seqs: int  # sequences producing one token this step
    decode_context_tokens: int  # sum of those sequences' context lengths (KV tokens read)

    def __post_init__(self) -> None:
        for field in ("prefill_tokens", "prefill_pairs", "decode_seqs", "decode_context_tokens"):
            _count(field, getattr(self, field))
        # A chunk of c tokens has at least c(c+1)/2 >= c pairs, and each sequence reads >= 1 token.
        if self.prefill_pairs < self.prefill_tokens:
            raise ConfigError("prefill_pairs", self.prefill_pairs,
                              f"must be >= prefill_tokens={self.prefill_tokens}")
        if self.decode_context_tokens < self.decode_seqs:
            raise ConfigError("decode_context_tokens", self.decode_context_tokens,
                              f"must be >= decode_seqs={self.decode_seqs}")

    @staticmethod
    def chunk_pairs(chunk_tokens: int, start: int) -> int:
        """Causal pairs of a chunk of `chunk_tokens` queries starting at position `start`."""
        return chunk_tokens * start + chunk_tokens * (chunk_tokens + 1) // 2


class StepTimeModel(Protocol):
    """Seconds of one engine step over all layers; the engine's virtual clock advances by it."""

    def step_time(self, shape: StepShape) -> float:
        """Seconds for the step `shape`."""
        ...

    def step_time_parts(self, prefill_tokens: int, prefill_pairs: int, decode_seqs: int,
                        decode_context_tokens: int) -> float:
        """`step_time` without building a `StepShape` (the engine's hot path; no checks)."""
        ...


class PartsStepModel:
    """Base of the step models: `step_time` unpacks the shape into `step_time_parts`."""

    def step_time(self, shape: StepShape) -> float:
        """Seconds for the step `shape`."""
        return self.step_time_parts(shape.prefill_tokens, shape.prefill_pairs,
                                    shape.decode_seqs, shape.decode_context_tokens)

    def step_time_parts(self, prefill_tokens: int, prefill_pairs: int, decode_seqs: int,
                        decode_context_tokens: int) -> float:
        """`step_time` from the four counts, with no allocation (the engine's hot path)."""
        raise NotImplementedError


def _layer_linear_params(model: ModelConfig) -> int:
    """Weights of one layer's projections: Q, K, V, O and the MLP."""
    d_q = model.num_heads * model.head_dim
    d_kv = model.num_kv_heads * model.head_dim
    mlp_matrices = 3 if model.gated_mlp else 2  # SwiGLU: gate, up, down; OPT: up, down
    return (model.hidden_size * (d_q + 2 * d_kv)  # Q, K, V projections
            + d_q * model.hidden_size  # output projection
            + mlp_matrices * model.hidden_size * model.intermediate_size)


# Columns of `StepCoefficients.ops`, one row per operator of the calibrated model: runs per
# step (e.g. 2 x layers), launch seconds, then `op_s`'s terms (refimpl.costmodel.gpu_ops), and
# whether its rows are the decoding sequences only (the LM head) rather than every new token.
OP_FIELDS = ("count", "launch_s", "fixed_s", "s_per_row", "flop_s_per_row", "floor_s",
             "tile_rows", "spill_rows", "s_per_spill_row", "sharpness", "decode_only")
(COUNT, LAUNCH, FIXED, PER_ROW, FLOP, FLOOR, TILE, SPILL_ROWS, PER_SPILL_ROW, SHARPNESS,
 DECODE_ONLY) = range(len(OP_FIELDS))
NO_OPS = np.zeros((0, len(OP_FIELDS)))  # the ideal roofline: no per-operator rows


class StepCoefficients(NamedTuple):
    """A compiled step model's seconds per unit of work, as plain data for compiled code."""

    overhead_s: float  # fixed cost of a non-empty step
    linear_s_per_token: float  # linear-layer compute of one token, all layers
    lm_head_s_per_seq: float  # LM-head compute of one decoding sequence
    weights_s: float  # reading every weight once
    attn_s_per_pair: float  # prefill attention compute of one causal query-key pair
    attn_s_per_context_token: float  # decode attention compute of one context token
    new_token_s: float  # moving a new token's Q, O, K and V
    kv_s_per_context_token: float  # reading one cached token's K and V
    prefill_fixed_s: float  # fixed cost of a step with prompt chunks (launches, all layers)
    decode_fixed_s: float  # fixed cost of a step with decodes
    multi_row_s: float  # fixed cost of a step of more than one row (a CPU's BLAS packing)
    # a step of more than one row whose row count mod 4 is odd (1, 3), or is 2 or 3: what
    # OpenBLAS's one-row and two-row edge passes add beside its four-row kernel
    odd_rows_s: float
    pair_rows_s: float
    ops: np.ndarray  # float64 (operators, OP_FIELDS): empty for the ideal roofline


def no_coefficients() -> StepCoefficients:
    """All-zero coefficients: what the loop is handed when the step model is not compiled."""
    return StepCoefficients(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                            NO_OPS)


def step_s(c: StepCoefficients, prefill_tokens: int, prefill_pairs: int, decode_seqs: int,
           decode_context_tokens: int) -> float:
    """The step time: the one formula, run by Python and compiled inside the serving loop.

    Plain arithmetic on purpose (Numba compiles this very function). With no operator rows
    the linear layers are one roofline over the whole model; with rows (the calibrated model)
    each operator is its own smooth roofline plus launch. Attention is analytic either way.
    """
    if prefill_tokens + decode_seqs <= 0:
        return 0.0
    tokens = prefill_tokens + decode_seqs
    ops = c.ops
    if ops.shape[0] == 0:
        linear_s = max(tokens * c.linear_s_per_token + decode_seqs * c.lm_head_s_per_seq,
                       c.weights_s)
    else:
        linear_s = 0.0
        for k in range(ops.shape[0]):
            rows = decode_seqs if ops[k, DECODE_ONLY] > 0.0 else tokens
            if rows > 0:
                # gpu_ops.op_s, written out: Numba cannot call a plain function, and this
                # module must not import Numba (tests/costmodel/test_calibrated.py holds the
                # two equal)
                p, tile = ops[k, SHARPNESS], ops[k, TILE]
                t_mem = (ops[k, FIXED] + rows * ops[k, PER_ROW]
                         + max(rows - ops[k, SPILL_ROWS], 0.0) * ops[k, PER_SPILL_ROW])
                t_flop = ((rows + tile - 1) // tile) * tile * ops[k, FLOP] + ops[k, FLOOR]
                linear_s += ops[k, COUNT] * (ops[k, LAUNCH]
                                             + (t_mem ** p + t_flop ** p) ** (1.0 / p))
    rows_s = 0.0  # a matrix product rather than a matrix-vector one (a CPU's BLAS)
    if tokens > 1:
        remainder = tokens % 4
        rows_s = (c.multi_row_s + (c.odd_rows_s if remainder % 2 == 1 else 0.0)
                  + (c.pair_rows_s if remainder >= 2 else 0.0))
    attention_s = 0.0
    if prefill_tokens > 0:
        attention_s += c.prefill_fixed_s + max(prefill_pairs * c.attn_s_per_pair,
                                               prefill_tokens * c.new_token_s)
    if decode_seqs > 0:
        attention_s += c.decode_fixed_s + max(
            decode_context_tokens * c.attn_s_per_context_token,
            decode_context_tokens * c.kv_s_per_context_token + decode_seqs * c.new_token_s)
    return c.overhead_s + linear_s + rows_s + attention_s


class RooflineStepModel(PartsStepModel):
    """Analytic step time on a spec-sheet device: nothing here is measured.

    Each part of the step takes max(FLOPs / peak, bytes / bandwidth) (the roofline), and the
    parts run one after another, so their times add:
    - linear layers: 2 FLOPs per weight per token (the LM head only for decoding sequences:
      the shape does not say which prefill chunk completes its prompt), and every weight read
      once per step; activations are left out of the bytes (small beside the weights);
    - prefill attention: 4 * Hq * d FLOPs per causal pair per layer (QK^T and PV), and the
      chunk's Q, O and new K, V moved once;
    - decode attention: every context token's K and V read once (the seed's KV bytes per
      token), 4 * Hq * d FLOPs per context token per layer, and Q, O and the new K, V;
    - plus `overhead_s` per non-empty step. An empty step costs 0.
    Over `hardware.num_gpus` tensor-parallel GPUs each does 1/num_gpus of every part, and the
    ideal roofline charges nothing for their all-reduces.
    """

    def __init__(self, model: ModelConfig, hardware: HardwareSpec, *,
                 overhead_s: float = DEFAULT_STEP_OVERHEAD_S) -> None:
        if not overhead_s >= 0:
            raise ConfigError("overhead_s", overhead_s, "must be >= 0")
        self.model = model
        self.hardware = hardware
        self.overhead_s = float(overhead_s)
        w_bytes = dtype_bytes(model.weight_dtype, "weight_dtype")  # activations use it too
        layers = model.num_layers
        lm_head_params = model.vocab_size * model.hidden_size
        q_width = model.num_heads * model.head_dim
        # FLOPs and bytes per unit of each StepShape field, whole model (all layers).
        self._linear_flops_per_token = 2 * layers * _layer_linear_params(model)
        self._lm_head_flops_per_seq = 2 * lm_head_params
        self._weight_bytes = w_bytes * (layers * _layer_linear_params(model) + lm_head_params)
        self._attn_flops_per_pair = 4 * q_width * layers  # QK^T and PV, 2 FLOPs per MAC
        self._new_token_bytes = (2 * q_width * w_bytes * layers  # Q read, O written per layer
                                 + model.kv_bytes_per_token())  # its K and V stored
        self._kv_bytes_per_context_token = model.kv_bytes_per_token()
        flop_s = 1.0 / (hardware.peak_flops * hardware.num_gpus)
        byte_s = 1.0 / (hardware.memory_bandwidth_bytes_s * hardware.num_gpus)
        # Seconds per unit, so the hot path is a few multiplies and max().
        self.coefficients = StepCoefficients(
            overhead_s=self.overhead_s,
            linear_s_per_token=self._linear_flops_per_token * flop_s,
            lm_head_s_per_seq=self._lm_head_flops_per_seq * flop_s,
            weights_s=self._weight_bytes * byte_s,
            attn_s_per_pair=self._attn_flops_per_pair * flop_s,
            attn_s_per_context_token=self._attn_flops_per_pair * flop_s,  # (the same FLOPs)
            new_token_s=self._new_token_bytes * byte_s,
            kv_s_per_context_token=self._kv_bytes_per_context_token * byte_s,
            prefill_fixed_s=0.0,
            decode_fixed_s=0.0,
            multi_row_s=0.0,
            odd_rows_s=0.0,
            pair_rows_s=0.0,
            ops=NO_OPS,
        )

    def step_time_parts(self, prefill_tokens: int, prefill_pairs: int, decode_seqs: int,
                        decode_context_tokens: int) -> float:
        """`step_time` from the four counts, with no allocation (the engine calls it per step)."""
        return step_s(self.coefficients, prefill_tokens, prefill_pairs, decode_seqs,
                      decode_context_tokens)

    def counts(self, shape: StepShape) -> tuple[float, float]:
        """(FLOPs, bytes) of the whole step: its arithmetic intensity against the ridge point."""
        tokens = shape.prefill_tokens + shape.decode_seqs
        flops = (tokens * self._linear_flops_per_token
                 + shape.decode_seqs * self._lm_head_flops_per_seq
                 + (shape.prefill_pairs + shape.decode_context_tokens) * self._attn_flops_per_pair)
        nbytes = ((self._weight_bytes if tokens else 0) + tokens * self._new_token_bytes
                  + shape.decode_context_tokens * self._kv_bytes_per_context_token)
        return float(flops), float(nbytes)
