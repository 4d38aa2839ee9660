"""The fitted latency model: time(k, B, T) by regression on the analytic counts of candidate k.

Per candidate, time = c . features with features from the kernels' own cost formulas: one per
call, per tile iteration, FLOPs, HBM bytes, the roofline time max(FLOPs/peak, bytes/BW), one
per sequence, the bytes that miss the cache, and the re-read bytes that miss the cache that
holds one sequence (alone, and where the call misses too); non-negative least squares on
relative error
(every coefficient is a cost, and MAPE is what is reported). DistServe's (Zhong et al., 2024)
`a + b*tokens + c*sum(len^2)` is fitted the same way as the baseline. Error: MAPE on held-out
grid points, per phase.

Why the missed bytes: a profile repeats each call on the same inputs, so a call whose distinct
bytes fit the last-level cache reads them from it, and one past it from main memory (decode
on this class of machine: 0.08-0.15 ns a byte up to 8 MB, 0.14-0.21 ns from 12 MB on;
docs/kernel_model.md). No straight line in bytes passes through both. The cache's size is
fitted per phase, not read from the CPU: what a kernel keeps of a cache shared with other
cores and tenants is smaller than its nominal size (8-16 MB of a 32 MB L3, measured). It is the
power of two of least leave-one-out error, chosen for the held-out estimate on the training
points alone.

Why the re-reads: a candidate whose tiles split a KV group's query heads reads each
sequence's K/V once per part, the parts one after another, so the second read finds the data
in whatever cache holds one sequence's footprint, at any batch; the call's footprint cannot
see that (decode `p4-h1`, 4 reads: 0.28-0.30 ns a distinct byte at B=1 up to T=4096, 0.37 to
0.96 ns at B=24 from T=1024 to 16384; docs/kernel_model.md). Its cache is fitted the same way.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

from refimpl.config import HardwareSpec
from refimpl.costmodel.candidates import (
    PHASES,
    RAGGED_DECODE,
    AttentionDims,
    Candidate,
    context_lens,
)
from refimpl.costmodel.sample import Sample
from refimpl.errors import ConfigError

__all__ = [
    "ERROR_KEYS",
    "FEATURES",
    "LatencyModel",
    "PhaseError",
    "baseline_features",
    "features",
    "fit_latency",
    "holdout_mask",
    "miss_fraction",
    "nnls_relative",
]

# Held-out errors are reported per phase, and for ragged decode shapes apart.
ERROR_KEYS = (*PHASES, RAGGED_DECODE)
FEATURES = ("per_call", "tile_steps", "flops", "hbm_bytes", "roofline_s", "sequences",
            "missed_bytes", "missed_rereads", "far_rereads")
# Cache sizes the fit chooses from (powers of two, 256 KiB to 1 GiB); inf: no cache term.
CACHE_CHOICES = (math.inf, *(float(2**k) for k in range(18, 31)))
REUSE_CACHE_CHOICES = CACHE_CHOICES  # the same, for the cache that holds one sequence
_CACHE_TERMS = 3  # the last FEATURES entries: set by the cache sizes


def miss_fraction(footprint_bytes, cache_bytes: float):
    """Share of a call's reads that miss a cache of `cache_bytes` holding its
    `footprint_bytes` distinct bytes (a number or an array): 0 up to cache / sqrt(2), 1 from
    cache * sqrt(2), linear in log2 between (a repeated scan past an LRU-like cache misses on
    nearly every line). No cache term (0) for an infinite cache."""
    if math.isinf(cache_bytes):
        return 0.0 * np.asarray(footprint_bytes, float)
    return np.clip(np.log2(np.asarray(footprint_bytes, float) / cache_bytes) + 0.5, 0.0, 1.0)


def features(cand: Candidate, dims: AttentionDims, batch: int, seq_len: int,
             peak_flops: float, bandwidth_bytes_s: float,
             cache_bytes: float = math.inf, ragged: bool = False,
             reuse_cache_bytes: float = math.inf) -> list[float]:
    """The regression features of `cand` on (B, T) (`ragged`: a ragged decode shape), in
    `FEATURES` order."""
    costs = cand.costs(dims, batch, seq_len, ragged)
    _, tile_steps = cand.tile_steps(dims, batch, seq_len, ragged)
    roofline_s = max(costs.flops / peak_flops, costs.hbm_bytes / bandwidth_bytes_s)
    sequences = 1 if cand.phase == "chunk" else batch  # the wrappers check each sequence
    reuse = _Reuse.of(cand, dims, batch, seq_len, ragged, costs.hbm_bytes)
    return [1.0, tile_steps, costs.flops, costs.hbm_bytes, roofline_s, sequences,
            *reuse.missed(cache_bytes, reuse_cache_bytes)]


@dataclass(frozen=True)
class _Reuse:
    """What the cache terms of one call need: its bytes read, its footprint, each sequence's
    footprint, and the bytes its tiles read again (beyond the first touch of each byte).

    A tile that covers part of a KV group's query heads (or one query tile of a chunk) leaves
    the sequence's K/V for the next work item, which reads it right after: those re-reads find
    it in a cache that holds one sequence's data (`reuse_cache_bytes`), whatever the call's
    footprint; once that cache is too small they come from the next level, or from memory when
    the whole call misses `cache_bytes` too.
    """

    hbm_bytes: float
    footprint: float
    sequence_footprints: np.ndarray
    rereads: float

    @classmethod
    def of(cls, cand: Candidate, dims: AttentionDims, batch: int, seq_len: int, ragged: bool,
           hbm_bytes: float) -> _Reuse:
        """The reuse of `cand` on (B, T) reading `hbm_bytes`."""
        sequences = np.array(cand.sequence_footprints(dims, batch, seq_len, ragged), float)
        footprint = float(sequences.sum())
        return cls(hbm_bytes, footprint, sequences, max(hbm_bytes - footprint, 0.0))

    def missed(self, cache_bytes: float,
               reuse_cache_bytes: float) -> tuple[float, float, float]:
        """(bytes read that miss `cache_bytes`, re-reads that miss `reuse_cache_bytes`, those
        of them whose call misses `cache_bytes` too)."""
        far = float(miss_fraction(self.footprint, cache_bytes))
        # each sequence's share of the re-reads, missing by that sequence's footprint
        share = self.sequence_footprints @ miss_fraction(self.sequence_footprints,
                                                         reuse_cache_bytes) / self.footprint
        rereads = self.rereads * float(share)
        return self.hbm_bytes * far, rereads, rereads * far


def baseline_features(phase: str, batch: int, seq_len: int, ragged: bool = False) -> list[float]:
    """DistServe-style features: 1, tokens, sum(len^2) (decode: 1, sequences, context tokens,
    the ragged lengths' sum for a ragged shape)."""
    if phase == "prefill":
        return [1.0, batch * seq_len, batch * seq_len**2]
    if phase == "chunk":  # a chunk of B tokens after T cached: pairs grow as B*T + B^2/2
        return [1.0, batch, batch * seq_len + batch * batch / 2]
    return [1.0, batch, float(sum(context_lens(batch, seq_len, ragged)))]


def nnls_relative(x: np.ndarray, y_s: np.ndarray) -> np.ndarray:
    """Non-negative c minimising sum((x c / y - 1)^2): least squares on relative error."""
    a = x / y_s[:, None]
    scale = a.max(axis=0)
    scale[scale == 0] = 1.0  # an all-zero feature keeps a zero coefficient
    coef, _ = nnls(a / scale, np.ones(len(y_s)), maxiter=50 * a.shape[1])
    return coef / scale


def holdout_mask(batches: Sequence[int], seq_lens: Sequence[int],
                 diagonal: int = 1) -> list[bool]:
    """Held-out points: every third grid point on the diagonals (B index + T index) % 3 ==
    `diagonal`, so each held-out point has trained neighbours on both axes (interpolation is
    tested)."""
    b_index = {b: i for i, b in enumerate(sorted(set(batches)))}
    t_index = {t: i for i, t in enumerate(sorted(set(seq_lens)))}
    return [(b_index[b] + t_index[t]) % 3 == diagonal
            for b, t in zip(batches, seq_lens, strict=True)]


@dataclass(frozen=True)
class PhaseError:
    """Held-out error of one phase: the fitted model and the DistServe baseline."""

    phase: str
    mape: float  # mean |predicted / measured - 1| over held-out samples
    baseline_mape: float
    num_train: int
    num_heldout: int
    # (measured, predicted, baseline's prediction) seconds of each held-out sample
    heldout_s: tuple[tuple[float, float, float], ...] = ()
    # Mean `Sample.spread` of the held-out samples timed in more than one round (NaN: none):
    # the measurements' own repeatability, so a MAPE near it is at the floor the profile's
    # noise sets
    spread: float = float("nan")


@dataclass(frozen=True)
class LatencyModel:
    """Fitted coefficients per candidate name, the fitted cache size per phase, and the
    hardware figures of the roofline term."""

    dims: AttentionDims
    peak_flops: float  # the figures the roofline feature is computed with
    memory_bandwidth_bytes_s: float
    coefficients: dict[str, tuple[float, ...]]  # candidate name -> one per FEATURES entry
    errors: dict[str, PhaseError]  # phase -> held-out error of the fitting procedure
    cache_bytes: dict[str, float]  # phase -> the cache of the missed-bytes feature (inf: none)
    # phase -> the cache that holds one sequence's re-read data (inf: none)
    reuse_cache_bytes: dict[str, float]

    def predict_s(self, cand: Candidate, batch: int, seq_len: int,
                  ragged: bool = False) -> float:
        """Predicted seconds of `cand` on (B, T) (`ragged`: a ragged decode shape);
        `ConfigError` for a candidate never fitted."""
        coef = self.coefficients.get(cand.name)
        if coef is None:
            raise ConfigError("candidate", cand.name, "not profiled, so not fitted",
                              choices=sorted(self.coefficients))
        x = features(cand, self.dims, batch, seq_len, self.peak_flops,
                     self.memory_bandwidth_bytes_s, self.cache_bytes[cand.phase], ragged,
                     self.reuse_cache_bytes[cand.phase])
        return float(np.dot(coef, x))


@dataclass(frozen=True)
class _Group:
    """One candidate's samples: features (the cache terms left for cache sizes to set), the
    baseline's features, the calls' reuse, times, the train mask, which are ragged and the
    times' spread over the rounds."""

    x: np.ndarray
    baseline_x: np.ndarray
    reuse: np.ndarray  # of _Reuse
    y: np.ndarray
    train: np.ndarray
    ragged: np.ndarray
    spread: np.ndarray

    def with_cache(self, caches: tuple[float, float]) -> np.ndarray:
        """The features with the cache terms of (`cache_bytes`, `reuse_cache_bytes`)."""
        x = self.x.copy()
        x[:, -_CACHE_TERMS:] = [r.missed(*caches) for r in self.reuse]
        return x


def _fit_groups(samples: Sequence[Sample], cands: dict[str, Candidate], dims: AttentionDims,
                hardware: HardwareSpec, train: Sequence[bool]) -> dict[str, _Group]:
    """The samples of each candidate, by name."""
    rows: dict[str, list] = {}
    for sample, is_train in zip(samples, train, strict=True):
        cand = cands[sample.candidate]
        shape = sample.batch, sample.seq_len, sample.ragged
        x = features(cand, dims, *shape[:2], hardware.peak_flops,
                     hardware.memory_bandwidth_bytes_s, ragged=sample.ragged)
        reuse = _Reuse.of(cand, dims, *shape, x[FEATURES.index("hbm_bytes")])
        rows.setdefault(sample.candidate, []).append((
            x, baseline_features(sample.phase, *shape), reuse, sample.min_s, is_train,
            sample.ragged, sample.spread))
    groups = {}
    for name, group in rows.items():
        columns = list(zip(*group, strict=True))
        reuse = np.empty(len(group), object)
        reuse[:] = columns[2]
        groups[name] = _Group(*(reuse if i == 2 else np.array(column)
                                for i, column in enumerate(columns)))
    return groups


def _loo_error(groups: dict[str, _Group], usable: Callable[[_Group], np.ndarray],
               caches: tuple[float, float]) -> float:
    """Mean leave-one-out relative squared error over each group's `usable` samples."""
    errs = []
    for group in groups.values():
        x, y = group.with_cache(caches), group.y
        rows = np.flatnonzero(usable(group))
        if len(rows) < 3:
            continue
        for i in rows:
            fit = rows[rows != i]
            errs.append((x[i] @ nnls_relative(x[fit], y[fit]) / y[i] - 1) ** 2)
    return float(np.mean(errs)) if errs else math.inf


def _choose_caches(groups: dict[str, _Group],
                   usable: Callable[[_Group], np.ndarray]) -> tuple[float, float]:
    """(`cache_bytes`, `reuse_cache_bytes`) among the choices of least leave-one-out
    error over each group's `usable` samples (no cache term on a tie): the call's cache alone
    first, then the re-reads' given it, then the call's again given that."""
    caches = [math.inf, math.inf]
    for which in (0, 1, 0):
        best, best_err = caches[which], math.inf
        for cache in REUSE_CACHE_CHOICES if which else CACHE_CHOICES:
            trial = (cache, caches[1]) if which == 0 else (caches[0], cache)
            err = _loo_error(groups, usable, trial)
            if err < best_err * (1 - 1e-9):
                best, best_err = cache, err
        caches[which] = best
    return caches[0], caches[1]


def _held_out(samples: Sequence[Sample]) -> list[bool]:
    """`holdout_mask` over the grid of equal-length shapes and, apart, that of ragged ones."""
    held = [False] * len(samples)
    for ragged in (False, True):
        rows = [i for i, s in enumerate(samples) if s.ragged == ragged]
        mask = holdout_mask([samples[i].batch for i in rows], [samples[i].seq_len for i in rows])
        for i, is_held in zip(rows, mask, strict=True):
            held[i] = is_held
    return held


def _mean_spread(spreads: list[float]) -> float:
    """Mean spread of the samples timed in more than one round; NaN for none."""
    known = [s for s in spreads if not math.isnan(s)]
    return float(np.mean(known)) if known else math.nan


def _mape(pairs: list[tuple[float, float]]) -> float:
    """Mean |predicted / measured - 1| of (measured, predicted) pairs; NaN for none."""
    return float(np.mean([abs(p / m - 1) for m, p in pairs])) if pairs else float("nan")


def fit_latency(samples: Sequence[Sample], candidates: Sequence[Candidate],
                dims: AttentionDims, hardware: HardwareSpec, *,
                heldout: bool = True) -> LatencyModel:
    """Fit every profiled candidate; measure the error on held-out points, then refit on all.

    The held-out error estimates the error of the final model, which also uses those points
    (for the estimate, the cache size too is chosen on the training points only). Without
    `heldout` the estimate is skipped (`errors` left empty, half the cache search) and the
    final model is the same.
    """
    cands = {c.name: c for c in candidates}
    coefficients: dict[str, tuple[float, ...]] = {}
    errors: dict[str, PhaseError] = {}
    cache_bytes: dict[str, float] = {}
    reuse_cache_bytes: dict[str, float] = {}
    for phase in PHASES:
        mine = [s for s in samples if s.phase == phase]
        if not mine:
            continue
        groups = _fit_groups(mine, cands, dims, hardware, [not h for h in _held_out(mine)])
        if heldout:
            errors.update(_heldout_errors(phase, groups))
        caches = _choose_caches(groups, lambda g: np.ones_like(g.train))
        cache_bytes[phase], reuse_cache_bytes[phase] = caches
        for name, group in groups.items():
            coefficients[name] = tuple(float(c) for c in nnls_relative(
                group.with_cache(caches), group.y))
    return LatencyModel(dims, hardware.peak_flops, hardware.memory_bandwidth_bytes_s,
                        coefficients, errors, cache_bytes, reuse_cache_bytes)


def _heldout_errors(phase: str, groups: dict[str, _Group]) -> dict[str, PhaseError]:
    """`phase`'s held-out errors (and its ragged shapes' apart) of the fit on the training
    points, the caches chosen on them too."""
    errors: dict[str, PhaseError] = {}
    # held-out (measured, predicted, baseline) seconds and spreads, equal and ragged apart
    points: dict[bool, list[tuple[float, float, float]]] = {False: [], True: []}
    spreads: dict[bool, list[float]] = {False: [], True: []}
    num_train = 0
    caches = _choose_caches(groups, lambda g: g.train)  # the held-out points stay unseen
    for group in groups.values():
        tr, held = group.train, ~group.train
        x, y, xb = group.with_cache(caches), group.y, group.baseline_x
        if tr.sum() >= 2 and held.any():
            predicted = x[held] @ nnls_relative(x[tr], y[tr])
            baseline = xb[held] @ nnls_relative(xb[tr], y[tr])
            for m, p, b, ragged, spread in zip(y[held], predicted, baseline,
                                               group.ragged[held], group.spread[held],
                                               strict=True):
                points[bool(ragged)].append((float(m), float(p), float(b)))
                spreads[bool(ragged)].append(float(spread))
        num_train += int(tr.sum())
    for key, ragged in ((phase, False), (RAGGED_DECODE, True)):
        found = points[ragged]
        if found or key == phase:
            errors[key] = PhaseError(
                key, _mape([(m, p) for m, p, _ in found]),
                _mape([(m, b) for m, _, b in found]), num_train, len(found), tuple(found),
                _mean_spread(spreads[ragged]))
    return errors
