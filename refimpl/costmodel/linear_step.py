"""`LinearStepModel`: a step's time as a non-negative sum of its counts, fitted to measured steps.

The real engine's cost model (refimpl.engine.step_profile measures the steps): on a CPU a step
is compute-bound almost everywhere, so time is close to linear in the work, plus fixed costs
that the roofline cannot see (per-step and per-sequence Python and kernel launches). Features,
one coefficient each, all >= 0 (fitted on relative error, `nnls_relative`, so small steps
weigh as much as large ones):
- a fixed cost per non-empty step, another when the step has more than one row (BLAS turns
  from a matrix-vector product to a matrix product, which packs the weights: on this CPU an
  (M, 512) x (512, 2816) product took 0.52 ms at M = 1 and 1.55 ms at M = 2 to 8), and
  another when the step holds prompt chunks;
- per decoding sequence (its LM-head row and its per-sequence bookkeeping);
- per new token, decode or prompt (the linear layers);
- per causal query-key pair of the chunks, and per context token the decodes read;
- a fixed cost when the rows (the step's new tokens, more than one) leave an odd remainder
  mod 4, and another when they leave 2 or 3: OpenBLAS runs a four-row kernel and then one-
  and two-row edge passes over the whole weight matrix, so 7 rows cost more than 8 (an
  (M, 512) x (512, 2816) product took 530 us at M = 7 and 436 us at M = 8 here,
  docs/real_engine.md). A BLAS without edge passes fits them at 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from refimpl.costmodel.fit import nnls_relative
from refimpl.costmodel.step import NO_OPS, PartsStepModel, StepCoefficients, step_s
from refimpl.errors import ConfigError

__all__ = ["FEATURES", "ROWS_MOD_4", "LinearStepModel", "step_features"]

FEATURES = ("step_s", "multi_row_step_s", "prefill_step_s", "per_decode_seq_s", "per_token_s",
            "per_pair_s", "per_context_token_s", "odd_rows_step_s", "pair_rows_step_s")
ROWS_MOD_4 = FEATURES[-2:]  # the terms by the rows' remainder mod 4 (BLAS's edge passes)


def step_features(counts: np.ndarray) -> np.ndarray:
    """(n, 9) features of steps given as (n, 4) counts: prefill tokens, causal pairs, decode
    sequences, decode context tokens."""
    counts = np.asarray(counts, np.int64).reshape(-1, 4)
    prefill, pairs, seqs, context = counts.T
    rows = prefill + seqs
    matrix, remainder = rows > 1, rows % 4
    return np.column_stack([np.ones(len(counts)), matrix, prefill > 0, seqs, rows, pairs,
                            context, matrix & (remainder % 2 == 1),
                            matrix & (remainder >= 2)]).astype(np.float64)


class LinearStepModel(PartsStepModel):
    """Seconds of a step: its features times fitted coefficients (see the module)."""

    def __init__(self, coefficients: Sequence[float], *, source: str = "") -> None:
        values = np.asarray(coefficients, np.float64)
        if values.shape != (len(FEATURES),) or not np.all(np.isfinite(values)) \
                or (values < 0).any():
            raise ConfigError("coefficients", list(values.ravel()),
                              f"must be {len(FEATURES)} finite values >= 0 ({FEATURES})")
        self.values = tuple(float(c) for c in values)  # by FEATURES
        self.source = source  # what it was fitted to
        c0, c1, c2, c3, c4, c5, c6, c7, c8 = self.values
        # the same sum in `step_s`'s terms, so the serving loop runs it compiled
        self.coefficients = StepCoefficients(
            overhead_s=c0, linear_s_per_token=c4, lm_head_s_per_seq=c3, weights_s=0.0,
            attn_s_per_pair=c5, attn_s_per_context_token=c6, new_token_s=0.0,
            kv_s_per_context_token=0.0, prefill_fixed_s=c2, decode_fixed_s=0.0,
            multi_row_s=c1, odd_rows_s=c7, pair_rows_s=c8, ops=NO_OPS)

    @classmethod
    def fit(cls, counts: np.ndarray, seconds: np.ndarray, *, omit: Sequence[str] = (),
            source: str = "") -> LinearStepModel:
        """The coefficients that best fit measured `seconds` of steps with these `counts`,
        those of the features named in `omit` held at 0 (an ablation)."""
        seconds = np.asarray(seconds, np.float64)
        if seconds.ndim != 1 or len(seconds) < len(FEATURES) or not (seconds > 0).all():
            raise ConfigError("seconds", f"{len(seconds)} samples", f"need at least "
                              f"{len(FEATURES)} measured times, all > 0")
        unknown = sorted(set(omit) - set(FEATURES))
        if unknown:
            raise ConfigError("omit", unknown, f"must name features of {FEATURES}")
        kept = np.array([name not in omit for name in FEATURES])
        coefficients = np.zeros(len(FEATURES))
        coefficients[kept] = nnls_relative(step_features(counts)[:, kept], seconds)
        return cls(coefficients, source=source)

    def predict(self, counts: np.ndarray) -> np.ndarray:
        """Seconds of each step given as (n, 4) counts (0 for an empty step)."""
        rows = np.asarray(counts, np.int64).reshape(-1, 4)
        return np.array([self.step_time_parts(*map(int, row)) for row in rows])

    def step_time_parts(self, prefill_tokens: int, prefill_pairs: int, decode_seqs: int,
                        decode_context_tokens: int) -> float:
        """`step_time` from the four counts (the engine calls it compiled, as `step_s`)."""
        return step_s(self.coefficients, prefill_tokens, prefill_pairs, decode_seqs,
                      decode_context_tokens)

    def as_dict(self) -> dict[str, float]:
        """The coefficients by feature name."""
        return dict(zip(FEATURES, self.values, strict=True))
