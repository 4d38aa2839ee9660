"""The profiled GEMM model of a step's linear layers: measured time against tokens in the batch.

The non-attention part of a transformer step is its projections and MLP, `M` token rows times
fixed weight matrices (Vidur and DistServe profile these separately from attention too). Timed
in float32 with NumPy's BLAS on one thread at a few `M`; between them time is piecewise linear
in `M`, and past the last point it continues the last segment's slope (GEMM time is affine in
`M` once the weights stop dominating).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from refimpl.config import ModelConfig
from refimpl.costmodel._timing import time_calls

__all__ = ["GemmProfile", "profile_gemm"]

MAX_GEMM_FLOPS = 2e10  # larger M are not timed (about half a second each here): extrapolated


@dataclass(frozen=True)
class GemmProfile:
    """Seconds of one layer's linear layers, and of the LM head, at each token count."""

    tokens: tuple[int, ...]  # M, increasing, at least two
    layer_s: tuple[float, ...]  # Q/K/V, O, MLP of one layer
    lm_head_s: tuple[float, ...]  # the vocabulary projection

    def lines(self, times_s: tuple[float, ...]) -> list[tuple[float, float]]:
        """(intercept, slope) of each segment of the piecewise-linear curve through
        (tokens, times_s); the first and last segments extend past the ends."""
        xs = self.tokens
        lines = []
        for x0, x1, y0, y1 in zip(xs, xs[1:], times_s, times_s[1:], strict=False):
            slope = (y1 - y0) / (x1 - x0)
            lines.append((y0 - slope * x0, slope))
        return lines


def _weights(model: ModelConfig, rng: np.random.Generator) -> tuple[list, np.ndarray]:
    """float32 weight matrices (in, out) of one layer, and the LM head."""
    d_q = model.num_heads * model.head_dim
    d_kv = model.num_kv_heads * model.head_dim
    h, ff = model.hidden_size, model.intermediate_size
    shapes = [(h, d_q + 2 * d_kv), (d_q, h)]  # fused QKV, output projection
    shapes += [(h, 2 * ff), (ff, h)] if model.gated_mlp else [(h, ff), (ff, h)]  # gate+up, down
    layer = [rng.standard_normal(s, dtype=np.float32) * 0.02 for s in shapes]
    return layer, rng.standard_normal((h, model.vocab_size), dtype=np.float32) * 0.02


def profile_gemm(model: ModelConfig, tokens: tuple[int, ...], *, repeats: int,
                 rng: np.random.Generator) -> GemmProfile:
    """Time `model`'s linear layers at each M in `tokens` (single-threaded BLAS)."""
    import scipy.linalg.cython_blas  # noqa: F401  (load BLAS so the thread limit applies)
    from threadpoolctl import threadpool_limits

    layer, lm_head = _weights(model, rng)
    flops_per_token = 2 * (sum(w.size for w in layer) + lm_head.size)
    timed = [m for m in tokens if m * flops_per_token <= MAX_GEMM_FLOPS]
    if len(timed) < 2:  # two points make a line
        timed = list(tokens[:2])
    layer_s, lm_head_s = [], []
    with threadpool_limits(limits=1, user_api="blas"):
        for m in timed:
            x = rng.standard_normal((m, model.hidden_size), dtype=np.float32)
            # Filled inputs: uninitialised memory may hold NaN or denormals, which time differently.
            ff_in = rng.standard_normal((m, layer[-1].shape[0]), dtype=np.float32)
            q_in = rng.standard_normal((m, layer[1].shape[0]), dtype=np.float32)

            def run_layer(x=x, ff_in=ff_in, q_in=q_in) -> None:
                x @ layer[0]  # QKV
                q_in @ layer[1]  # attention output projection
                x @ layer[2]  # MLP up (and gate)
                ff_in @ layer[3]  # MLP down

            layer_s.append(time_calls(run_layer, repeats)[1])  # fastest: see time_calls
            lm_head_s.append(time_calls(lambda x=x: x @ lm_head, repeats)[1])
    return GemmProfile(tuple(timed), tuple(layer_s), tuple(lm_head_s))
