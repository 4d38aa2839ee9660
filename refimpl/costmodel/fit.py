"""The fitted latency model: time(k, B, T) by regression on the analytic counts of candidate k.

Per candidate, time = c . features with features from the kernels' own cost formulas: one per
call, per tile iteration, FLOPs, HBM bytes, the roofline time max(FLOPs/peak, bytes/BW) and one
per sequence; non-negative least squares on relative error (every coefficient is a cost, and
MAPE is what is reported). DistServe's (Zhong et al., 2024) `a + b*tokens + c*sum(len^2)` is
fitted the same way as the baseline. Error: MAPE on held-out grid points, per phase.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

from refimpl.config import HardwareSpec
from refimpl.costmodel.candidates import PHASES, AttentionDims, Candidate
from refimpl.costmodel.profile import Sample
from refimpl.errors import ConfigError

__all__ = [
    "FEATURES",
    "LatencyModel",
    "PhaseError",
    "baseline_features",
    "features",
    "fit_latency",
    "holdout_mask",
    "nnls_relative",
]

FEATURES = ("per_call", "tile_steps", "flops", "hbm_bytes", "roofline_s", "sequences")


def features(cand: Candidate, dims: AttentionDims, batch: int, seq_len: int,
             peak_flops: float, bandwidth_bytes_s: float) -> list[float]:
    """The regression features of `cand` on (B, T), in `FEATURES` order."""
    costs = cand.costs(dims, batch, seq_len)
    _, tile_steps = cand.tile_steps(dims, batch, seq_len)
    roofline_s = max(costs.flops / peak_flops, costs.hbm_bytes / bandwidth_bytes_s)
    sequences = 1 if cand.phase == "chunk" else batch  # the wrappers check each sequence
    return [1.0, tile_steps, costs.flops, costs.hbm_bytes, roofline_s, sequences]


def baseline_features(phase: str, batch: int, seq_len: int) -> list[float]:
    """DistServe-style features: 1, tokens, sum(len^2) (decode: 1, sequences, context tokens)."""
    if phase == "prefill":
        return [1.0, batch * seq_len, batch * seq_len**2]
    if phase == "chunk":  # a chunk of B tokens after T cached: pairs grow as B*T + B^2/2
        return [1.0, batch, batch * seq_len + batch * batch / 2]
    return [1.0, batch, batch * seq_len]


def nnls_relative(x: np.ndarray, y_s: np.ndarray) -> np.ndarray:
    """Non-negative c minimising sum((x c / y - 1)^2): least squares on relative error."""
    a = x / y_s[:, None]
    scale = a.max(axis=0)
    scale[scale == 0] = 1.0  # an all-zero feature keeps a zero coefficient
    coef, _ = nnls(a / scale, np.ones(len(y_s)), maxiter=50 * a.shape[1])
    return coef / scale


def holdout_mask(batches: Sequence[int], seq_lens: Sequence[int]) -> list[bool]:
    """Held-out points: every third grid point on the diagonals (B index + T index) % 3 == 1,
    so each held-out point has trained neighbours on both axes (interpolation is tested)."""
    b_index = {b: i for i, b in enumerate(sorted(set(batches)))}
    t_index = {t: i for i, t in enumerate(sorted(set(seq_lens)))}
    return [(b_index[b] + t_index[t]) % 3 == 1 for b, t in zip(batches, seq_lens, strict=True)]


@dataclass(frozen=True)
class PhaseError:
    """Held-out error of one phase: the fitted model and the DistServe baseline."""

    phase: str
    mape: float  # mean |predicted / measured - 1| over held-out samples
    baseline_mape: float
    num_train: int
    num_heldout: int


@dataclass(frozen=True)
class LatencyModel:
    """Fitted coefficients per candidate name, and the hardware figures of the roofline term."""

    dims: AttentionDims
    peak_flops: float  # the figures the roofline feature is computed with
    memory_bandwidth_bytes_s: float
    coefficients: dict[str, tuple[float, ...]]  # candidate name -> one per FEATURES entry
    errors: dict[str, PhaseError]  # phase -> held-out error of the fitting procedure

    def predict_s(self, cand: Candidate, batch: int, seq_len: int) -> float:
        """Predicted seconds of `cand` on (B, T); `ConfigError` for a candidate never fitted."""
        coef = self.coefficients.get(cand.name)
        if coef is None:
            raise ConfigError("candidate", cand.name, "not profiled, so not fitted",
                              choices=sorted(self.coefficients))
        x = features(cand, self.dims, batch, seq_len, self.peak_flops,
                     self.memory_bandwidth_bytes_s)
        return float(np.dot(coef, x))


def _fit_groups(samples: Sequence[Sample], cands: dict[str, Candidate], dims: AttentionDims,
                hardware: HardwareSpec, train: Sequence[bool]):
    """Per candidate: (x, y, train mask) arrays of its samples."""
    groups: dict[str, list] = {}
    for sample, is_train in zip(samples, train, strict=True):
        row = features(cands[sample.candidate], dims, sample.batch, sample.seq_len,
                       hardware.peak_flops, hardware.memory_bandwidth_bytes_s)
        base = baseline_features(sample.phase, sample.batch, sample.seq_len)
        groups.setdefault(sample.candidate, []).append((row, base, sample.min_s, is_train))
    for name, rows in groups.items():
        x, xb, y, tr = zip(*rows, strict=True)
        yield name, np.array(x), np.array(xb), np.array(y), np.array(tr)


def fit_latency(samples: Sequence[Sample], candidates: Sequence[Candidate],
                dims: AttentionDims, hardware: HardwareSpec) -> LatencyModel:
    """Fit every profiled candidate; measure the error on held-out points, then refit on all.

    The held-out error estimates the error of the final model, which also uses those points.
    """
    cands = {c.name: c for c in candidates}
    coefficients: dict[str, tuple[float, ...]] = {}
    errors: dict[str, PhaseError] = {}
    for phase in PHASES:
        mine = [s for s in samples if s.phase == phase]
        if not mine:
            continue
        train = [not h for h in holdout_mask([s.batch for s in mine], [s.seq_len for s in mine])]
        errs, base_errs, num_train = [], [], 0
        for name, x, xb, y, tr in _fit_groups(mine, cands, dims, hardware, train):
            held = ~tr
            if tr.sum() >= 2 and held.any():
                errs += list(np.abs(x[held] @ nnls_relative(x[tr], y[tr]) / y[held] - 1))
                base_errs += list(np.abs(xb[held] @ nnls_relative(xb[tr], y[tr]) / y[held] - 1))
            num_train += int(tr.sum())
            coefficients[name] = tuple(float(c) for c in nnls_relative(x, y))
        errors[phase] = PhaseError(phase, float(np.mean(errs)) if errs else float("nan"),
                                   float(np.mean(base_errs)) if base_errs else float("nan"),
                                   num_train, len(errs))
    return LatencyModel(dims, hardware.peak_flops, hardware.memory_bandwidth_bytes_s,
                        coefficients, errors)
