"""Fit a GPU's operator efficiencies (refimpl.config.efficiency) to Vidur's profiles, and score it.

Linear layers: one `GemmFit` per GPU, shared by all four projections of every model shape and
TP degree, by least squares on relative error (a soft L1 loss, close to minimising MAPE).
Memory-bound operators: per operator group, a launch cost, a bandwidth fraction while the
operator's bytes stay in L2, the cache's size in bytes, a bandwidth fraction past it (at most
the first), and a sharpness, the same way; the norms, rotary embedding and activation, vLLM
kernels with one thread block per token, share a one-row floor per byte of the row and a cost
per row, fitted jointly. All-reduce: per TP degree, a launch cost and a bus bandwidth.
Vidur's all-reduce `size` is taken as bytes: as fp16 elements, 8 H100s would reach 730 GB/s
of bus bandwidth, above NVLink 4's 450 GB/s a direction.

Scoring (`score`): MAPE per operator group on held-out rows (every fifth, fitted on the rest),
and on one model shape left out of the fit entirely.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares, nnls

from refimpl.config import HardwareSpec
from refimpl.config.efficiency import Efficiency, GemmFit, LinkFit, OpFit
from refimpl.costmodel.gpu_ops import (
    elementwise_bytes,
    gemm_terms,
    layer_gemms,
    op_s,
    operator_terms,
)
from refimpl.costmodel.gpu_profiles import AllReduceProfile, OperatorProfile
from refimpl.errors import ConfigError

__all__ = ["GROUPS", "GpuScore", "fit_efficiency", "linear_layers_s", "predict", "score"]

# Operator groups the acceptance is stated over -> Vidur's operators, and the fitted `OpFit`.
GROUPS = {"attn_proj": ("attn_pre_proj", "attn_post_proj"),
          "mlp_proj": ("mlp_up_proj", "mlp_down_proj"),
          "norm": ("input_layernorm", "post_attention_layernorm"),
          "rope": ("attn_rope",), "act": ("mlp_act",), "add": ("add",), "emb": ("emb",)}
MEMORY_OPS = {"norm": "norm", "rope": "rope", "act": "act", "add": "add", "emb": "emb"}
HOLD_EVERY = 5  # every fifth row is held out
TILE_ROWS = (32, 64, 128)  # the tile heights of cuBLAS/CUTLASS half-precision GEMMs tried
PROFILED_BYTES = 2  # Vidur profiled fp16 weights and activations
# Where the memory-bound fit starts (cache MB, in-cache efficiency): from a low efficiency
# the cache can drift out of reach of every row (a local minimum with no cache at all).
CACHE_STARTS = tuple((mb, eff) for mb in (4.0, 16.0, 64.0) for eff in (0.5, 1.0))


def _rows_mask(p: OperatorProfile, keep: np.ndarray | None) -> OperatorProfile:
    if keep is None:
        return p
    return OperatorProfile(p.gpu, p.model, p.tokens[keep], p.tp[keep],
                           {op: s[keep] for op, s in p.seconds.items()})


def _gemm_rows(profiles: list[OperatorProfile], hw: HardwareSpec, fit: GemmFit):
    """(predicted, measured) seconds of every projection row."""
    pred, meas = [], []
    for p in profiles:
        rows = p.tokens.astype(np.float64)
        for tp in np.unique(p.tp):
            at = p.tp == tp
            for g in layer_gemms(p.model, int(tp)):
                terms = gemm_terms(g, fit, hw.peak_flops, hw.memory_bandwidth_bytes_s,
                                   PROFILED_BYTES)
                pred.append(fit.launch_s + op_s(*terms, fit.sharpness, rows[at]))
                meas.append(p.seconds[g.name][at])
    return np.concatenate(pred), np.concatenate(meas)


def fit_gemm(profiles: list[OperatorProfile], hw: HardwareSpec) -> GemmFit:
    """The linear layers' figures for `hw` (module doc); the tile height is chosen among
    TILE_ROWS by the fit's loss."""
    best = None
    for tile in TILE_ROWS:
        def residuals(x, tile=tile):
            pred, meas = _gemm_rows(profiles, hw, GemmFit(*map(float, np.exp(x)), tile))
            return pred / meas - 1.0

        # launch, compute and weight-read efficiency, rows_half, sharpness; fitted in logs
        x0 = np.log([5e-6, 0.7, 0.8, 1.0, 3.0])
        lo, hi = np.log([1e-7, 0.05, 0.05, 1e-2, 1.0]), np.log([1e-4, 1.0, 1.0, 2e3, 20.0])
        sol = least_squares(residuals, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.05,
                            diff_step=1e-3)
        if best is None or sol.cost < best[0]:
            best = (sol.cost, GemmFit(*map(float, np.exp(sol.x)), tile))
    return best[1]


def _memory_rows(profiles: list[OperatorProfile], hw: HardwareSpec, group: str, fit: OpFit):
    """(predicted, measured) seconds of every row of a memory-bound operator group."""
    pred, meas = [], []
    for p in profiles:
        for tp in np.unique(p.tp):
            at = p.tp == tp
            terms = operator_terms(fit, p.model, int(tp), MEMORY_OPS[group],
                                   hw.memory_bandwidth_bytes_s)
            for op in GROUPS[group]:
                pred.append(op_s(*terms, fit.sharpness, p.tokens[at].astype(np.float64)))
                meas.append(p.seconds[op][at])
    return np.concatenate(pred), np.concatenate(meas)


def _op_fit(x: np.ndarray, row: tuple[float, float] = (0.0, 0.0)) -> OpFit:
    """An `OpFit` from the fit's log-space vector (launch, efficiency, cache MB, spill
    efficiency as a fraction of the in-cache one, sharpness) and the row terms."""
    launch, eff, cache_mb, spill, p = map(float, np.exp(x))
    return OpFit(launch, eff, p, cache_mb * 1e6, spill * eff, *map(float, row))


# Bounds of `_op_fit`'s vector: the bytes past the cache go no faster than those in it.
OP_LO, OP_HI = np.log([1e-7, 0.02, 0.1, 0.02, 1.0]), np.log([1e-4, 1.5, 1e3, 1.0, 20.0])
# The row terms shared by ROW_KERNELS (s per byte of the one-row floor, s per row): where
# their joint fit starts (about the A100's figures) and its bounds.
ROW_START, ROW_LO, ROW_HI = np.log([1e-10, 1e-9]), np.log([1e-13, 1e-13]), np.log([1e-8, 1e-7])
ROW_KERNELS = ("norm", "rope", "act")  # one thread block per token in vLLM's kernels


def _fit(residuals, x0: np.ndarray, lo: np.ndarray, hi: np.ndarray):
    return least_squares(residuals, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.05,
                         x_scale=1.0, diff_step=1e-3)


def fit_memory_op(profiles: list[OperatorProfile], hw: HardwareSpec, group: str) -> OpFit:
    """A memory-bound operator group's launch cost, bandwidth fractions in and past the cache,
    the cache's size and the sharpness, without row terms; started from a few points
    (CACHE_STARTS), the best kept."""
    def residuals(x):
        pred, meas = _memory_rows(profiles, hw, group, _op_fit(x))
        return pred / meas - 1.0

    best = None
    for cache_mb, eff in CACHE_STARTS:
        sol = _fit(residuals, np.log([3e-6, eff, cache_mb, 0.5, 2.0]), OP_LO, OP_HI)
        if best is None or sol.cost < best.cost:
            best = sol
    return _op_fit(best.x)


def fit_memory_ops(profiles: list[OperatorProfile], hw: HardwareSpec) -> dict[str, OpFit]:
    """Every memory-bound group's figures: each fitted alone (`fit_memory_op`), then all
    refined together with the row terms that ROW_KERNELS share. Shared, because one shape
    shows a single row width for a norm: the floor's growth with width is seen in the rotary
    and activation kernels, whose rows narrow with the TP degree."""
    groups = tuple(MEMORY_OPS)

    def unpack(x: np.ndarray) -> dict[str, OpFit]:
        row = tuple(np.exp(x[-2:]))
        return {g: _op_fit(x[5 * i:5 * i + 5], row if g in ROW_KERNELS else (0.0, 0.0))
                for i, g in enumerate(groups)}

    def residuals(x):
        fits = unpack(x)
        return np.concatenate([np.divide(*_memory_rows(profiles, hw, g, fits[g])) - 1.0
                               for g in groups])

    alone = [fit_memory_op(profiles, hw, g) for g in groups]
    # Each launch starts lower: the row floor now carries part of a small batch's time.
    x0 = np.concatenate([np.log([f.launch_s * 0.7, f.efficiency, f.cache_bytes / 1e6,
                                 f.spill_efficiency / f.efficiency, f.sharpness])
                         for f in alone] + [ROW_START])
    lo = np.concatenate([np.tile(OP_LO, len(groups)), ROW_LO])
    hi = np.concatenate([np.tile(OP_HI, len(groups)), ROW_HI])
    fits = unpack(_fit(residuals, np.clip(x0, lo + 1e-9, hi - 1e-9), lo, hi).x)
    return {g: _without_unseen_kink(f, _largest_run_bytes(profiles, g)) for g, f in fits.items()}


def _largest_run_bytes(profiles: list[OperatorProfile], group: str) -> float:
    """The most bytes one run of a memory-bound group moves in the profiles."""
    op = MEMORY_OPS[group]
    return max(float(p.tokens[p.tp == tp].max()) * elementwise_bytes(p.model, int(tp))[op]
               for p in profiles for tp in np.unique(p.tp))


def _without_unseen_kink(fit: OpFit, largest_bytes: float) -> OpFit:
    """`fit` with no cache edge where the profiles show none: an edge past every run fitted
    cannot be told from no edge (no row pays its spill rate), and a spill rate left where the
    optimiser dropped it would rule every larger run (a shape held out with 8x the rows took
    12x its time). Predictions on the rows fitted are unchanged."""
    if fit.cache_bytes < largest_bytes:
        return fit
    return dataclasses.replace(fit, cache_bytes=math.inf, spill_efficiency=fit.efficiency)


def fit_all_reduce(profile: AllReduceProfile) -> tuple[LinkFit, ...]:
    """Per TP degree, an all-reduce's launch cost and bus bandwidth (relative least squares)."""
    fits = []
    for n in np.unique(profile.num_gpus):
        at = profile.num_gpus == n
        y, x = profile.seconds[at], profile.nbytes[at]
        (launch, inv_bw), _ = nnls(np.stack([1.0 / y, x / y], axis=1), np.ones_like(y))
        fits.append(LinkFit(int(n), float(launch), float(1.0 / inv_bw)))
    return tuple(fits)


def fit_efficiency(compute: list[OperatorProfile], network: list[AllReduceProfile],
                   hw: HardwareSpec, source: str) -> Efficiency:
    """Every fitted figure of one GPU from its profiles."""
    ops = fit_memory_ops(compute, hw)
    links = tuple(link for net in network for link in fit_all_reduce(net))
    return Efficiency(gemm=fit_gemm(compute, hw), all_reduce=links, source=source, **ops)


def predict(eff: Efficiency, hw: HardwareSpec, p: OperatorProfile, op: str) -> np.ndarray:
    """Predicted seconds of Vidur operator `op` on each row of `p`."""
    out = np.empty(len(p.tokens))
    for tp in np.unique(p.tp):
        at = p.tp == tp
        rows = p.tokens[at].astype(np.float64)
        gemms = {g.name: g for g in layer_gemms(p.model, int(tp))}
        if op in gemms:
            fit = eff.gemm
            terms = gemm_terms(gemms[op], fit, hw.peak_flops, hw.memory_bandwidth_bytes_s,
                               PROFILED_BYTES)
            out[at] = fit.launch_s + op_s(*terms, fit.sharpness, rows)
            continue
        group = next(g for g, members in GROUPS.items() if op in members)
        fit = getattr(eff, MEMORY_OPS[group])
        terms = operator_terms(fit, p.model, int(tp), MEMORY_OPS[group],
                               hw.memory_bandwidth_bytes_s)
        out[at] = op_s(*terms, fit.sharpness, rows)
    return out


def group_mape(eff: Efficiency, hw: HardwareSpec, profiles: list[OperatorProfile]) -> dict:
    """MAPE (%) per operator group over the rows of `profiles`."""
    out = {}
    for group, ops in GROUPS.items():
        errors = [np.abs(predict(eff, hw, p, op) / p.seconds[op] - 1.0)
                  for p in profiles for op in ops]
        out[group] = 100.0 * float(np.concatenate(errors).mean())
    return out


@dataclass(frozen=True)
class GpuScore:
    """One GPU's fit on all rows, and its MAPE on held-out rows and a held-out shape."""

    gpu: str
    efficiency: Efficiency  # fitted on every row of every shape
    held_rows: dict[str, float]  # group -> MAPE %, fitted without every fifth row
    held_shape: str  # the model shape left out
    held_shape_mape: dict[str, float]  # group -> MAPE %, fitted without that shape


def score(compute: list[OperatorProfile], network: list[AllReduceProfile], hw: HardwareSpec,
          held_shape: str, source: str) -> GpuScore:
    """Fit one GPU's profiles three ways (all, rows held out, a shape held out) and score."""
    names = sorted({p.model.name for p in compute})
    if held_shape not in names or len(names) < 2:
        raise ConfigError("held_shape", held_shape, "must be one of two or more profiled "
                          "shapes of this GPU", choices=names)
    full = fit_efficiency(compute, network, hw, source)
    index = [np.arange(len(p.tokens)) % HOLD_EVERY == HOLD_EVERY - 1 for p in compute]
    train = [_rows_mask(p, ~held) for p, held in zip(compute, index, strict=True)]
    test = [_rows_mask(p, held) for p, held in zip(compute, index, strict=True)]
    rows = group_mape(fit_efficiency(train, network, hw, source), hw, test)
    others = [p for p in compute if p.model.name != held_shape]
    shape = [p for p in compute if p.model.name == held_shape]
    shape_mape = group_mape(fit_efficiency(others, network, hw, source), hw, shape)
    return GpuScore(compute[0].gpu, full, rows, held_shape, shape_mape)


def linear_layers_s(eff: Efficiency, hw: HardwareSpec, p: OperatorProfile, tokens: int,
                    num_layers: int) -> tuple[float, float] | None:
    """(predicted, Vidur's) seconds of the four projections of `num_layers` layers over a batch
    of `tokens` rows at TP 1 (None if the profile has no such row)."""
    at = np.flatnonzero((p.tp == 1) & (p.tokens == tokens))
    if at.size == 0:
        return None
    row = _rows_mask(p, at[:1])
    predicted = sum(float(predict(eff, hw, row, op)[0]) for op in GROUPS["attn_proj"]
                    + GROUPS["mlp_proj"])
    measured = sum(float(row.seconds[op][0]) for op in GROUPS["attn_proj"] + GROUPS["mlp_proj"])
    return num_layers * predicted, num_layers * measured
