"""`CalibratedStepModel`: each operator at the efficiency fitted to measured GPUs.

The linear layers (Q/K/V, output, gate/up, down, LM head), the norms, rotary embedding,
activation, residual adds and the embedding look-up each take their launch plus a smooth
roofline at the efficiencies of `hardware.efficiency` (refimpl.config.efficiency, fitted to
Vidur's profiles by `refimpl calibrate-gpu`); tensor parallelism splits them as
refimpl.costmodel.gpu_ops says and adds two all-reduces of the hidden state per layer.
Attention has no public profile here: it is analytic, its FLOPs at the assumed
`attention_efficiency` of peak, its KV reads at the fitted weight-read efficiency, plus two
launches per layer (the attention kernel and the KV-cache write) in each phase present.
"""

from __future__ import annotations

import numpy as np

from refimpl.config import HardwareSpec, ModelConfig, dtype_bytes
from refimpl.costmodel.gpu_ops import (
    ELEMENTWISE,
    gemm_terms,
    layer_gemms,
    lm_head,
    operator_terms,
    per_layer,
)
from refimpl.costmodel.step import (
    DEFAULT_STEP_OVERHEAD_S,
    OP_FIELDS,
    PartsStepModel,
    StepCoefficients,
    step_s,
)
from refimpl.errors import ConfigError

__all__ = ["CalibratedStepModel"]


class CalibratedStepModel(PartsStepModel):
    """Step time from per-operator fitted efficiencies (module doc); runs compiled."""

    def __init__(self, model: ModelConfig, hardware: HardwareSpec, *,
                 overhead_s: float = DEFAULT_STEP_OVERHEAD_S) -> None:
        eff = hardware.efficiency
        if eff is None:
            raise ConfigError("hardware", hardware.name,
                              "has no fitted efficiencies: use the roofline step model")
        if not overhead_s >= 0:
            raise ConfigError("overhead_s", overhead_s, "must be >= 0")
        self.model, self.hardware = model, hardware
        tp, layers = hardware.num_gpus, model.num_layers
        for field, value in (("num_heads", model.num_heads), ("num_kv_heads",
                             model.num_kv_heads), ("intermediate_size",
                             model.intermediate_size), ("vocab_size", model.vocab_size)):
            if value % tp:
                raise ConfigError(field, value, f"must divide over num_gpus={tp}")
        b = dtype_bytes(model.weight_dtype, "weight_dtype")
        peak, bw = hardware.peak_flops, hardware.memory_bandwidth_bytes_s
        g = eff.gemm
        rows = [(layers, g.launch_s, *gemm_terms(gemm, g, peak, bw, b), g.sharpness, 0.0)
                for gemm in layer_gemms(model, tp)]
        rows.append((1, g.launch_s, *gemm_terms(lm_head(model, tp), g, peak, bw, b),
                     g.sharpness, 1.0))
        for op in ELEMENTWISE:
            fit = getattr(eff, op)
            count = per_layer(op) * layers or 1  # the embedding runs once a step
            rows.append((count, 0.0, *operator_terms(fit, model, tp, op, bw), fit.sharpness,
                         0.0))
        if tp > 1:  # after attention and after the MLP, the partial sums are all-reduced
            link = eff.link(tp)
            rows.append((2 * layers, link.launch_s, 0.0, model.hidden_size * b / link.bytes_per_s,
                         0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0))
        ops = np.array(rows, np.float64).reshape(-1, len(OP_FIELDS))
        q_width = model.num_heads * model.head_dim // tp
        byte_s = 1.0 / (bw * g.weight_read_efficiency)
        weights = [gemm.n * gemm.k for gemm in (*layer_gemms(model, tp), lm_head(model, tp))]
        kv_bytes = model.kv_bytes_per_token() / tp
        self.overhead_s = float(overhead_s)
        # The roofline fields hold this model's asymptotes: edf's guard reads them as a floor.
        self.coefficients = StepCoefficients(
            overhead_s=self.overhead_s,
            linear_s_per_token=float(sum(r[0] * r[4] for r in rows[:4])),  # count * FLOP s
            lm_head_s_per_seq=float(rows[4][4]),
            weights_s=float((layers * sum(weights[:4]) + weights[4]) * b * byte_s),
            attn_s_per_pair=4.0 * q_width * layers / (peak * eff.attention_efficiency),
            attn_s_per_context_token=4.0 * q_width * layers / (peak * eff.attention_efficiency),
            new_token_s=(2 * q_width * b * layers + kv_bytes) * byte_s,
            kv_s_per_context_token=kv_bytes * byte_s,
            prefill_fixed_s=2.0 * layers * g.launch_s,
            decode_fixed_s=2.0 * layers * g.launch_s,
            multi_row_s=0.0,
            odd_rows_s=0.0,
            pair_rows_s=0.0,
            ops=ops,
        )

    def step_time_parts(self, prefill_tokens: int, prefill_pairs: int, decode_seqs: int,
                        decode_context_tokens: int) -> float:
        """`step_time` from the four counts (the engine calls it compiled, as `step_s`)."""
        return step_s(self.coefficients, prefill_tokens, prefill_pairs, decode_seqs,
                      decode_context_tokens)
