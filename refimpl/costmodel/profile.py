"""The offline profiling harness: time every kernel candidate over a grid of shapes.

Mirrors numba-examples' benchmark layout and DistServe's / Vidur's offline profiling: each
(phase, B, T) gets its inputs, then every candidate runs `repeats` timed calls (after one
warm-up call on the point's first candidate: compiling, page faults). Points run cheapest first
under a wall-clock budget, so a cut budget drops the largest shapes (the fit extrapolates to
them), and points whose call is estimated past the mode's `max_call_s` are not timed at all.
One thread, serial kernels.

The grid is timed in `rounds` passes, each point's fastest call kept over all of them. On a
shared machine a slow spell lasts longer than one point's calls (a cache-sized decode measured
1.55x slower, min of 7 calls, in one pass than in the next), so repeating calls back to back
does not get past it, and passes several seconds apart do. Later passes take the points by how
far their times sit above a fit of all of them, most first: load only adds time, so a point
timed in a slow spell stands above the rest, and where the budget cuts a pass it cuts the
points least in need of another.
"""

from __future__ import annotations

import functools
import math
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from refimpl._version import __version__
from refimpl.config import HardwareSpec, ModelConfig
from refimpl.config._validate import positive_int, positive_ints, positive_limit
from refimpl.config.probe import machine_fingerprint
from refimpl.costmodel._timing import time_calls
from refimpl.costmodel.candidates import (
    PHASES,
    RAGGED_DECODE,
    AttentionDims,
    Candidate,
    context_lens,
    enumerate_candidates,
)
from refimpl.costmodel.fit import fit_latency
from refimpl.costmodel.gemm import GemmProfile, profile_gemm
from refimpl.costmodel.sample import Sample
from refimpl.errors import ConfigError
from refimpl.kernels import chunk_attention, decode_attention, prefill_attention
from refimpl.report.progress import ProgressBar

__all__ = ["MODES", "ProfileMode", "ProfileResult", "candidates_of", "run_profile"]


@dataclass(frozen=True)
class ProfileMode:
    """A grid per phase, the candidates timed on it, repeats and a wall-clock budget.

    B and T step by different ratios (B by about 3, T by 2 or 4): with equal ratios every
    diagonal of the grid, the held-out points among them (`fit.holdout_mask`), holds calls of
    one size, so the held-out points would sit at sizes no trained point has.
    """

    name: str
    batches: dict[str, tuple[int, ...]]  # B values per phase
    seq_lens: dict[str, tuple[int, ...]]  # T values per phase
    tile_q: tuple[int, ...]  # candidate tile sizes timed (the table predicts all of them)
    tile_k: tuple[int, ...]
    pages_per_tile: tuple[int, ...]
    gemm_tokens: tuple[int, ...]  # rows M of the profiled linear layers
    repeats: int  # timed calls per point and round after the warm-up, at most
    max_point_s: float  # timed seconds per candidate, point and round, then repeats stop
    budget_s: float  # wall-clock budget of the kernel grid, all rounds together
    rounds: int  # passes over the grid (later ones by `_retime_order`)
    max_kv_tokens: int  # B * T cap of decode caches (float32 K/V: 2 * Hkv * d * 4 B a token)
    ragged_batches: tuple[int, ...] = ()  # B values of ragged decode shapes (T: decode's)
    # Points whose call `_call_estimate_s` puts past this are not timed (the fit extrapolates)
    max_call_s: float = math.inf

    def __post_init__(self) -> None:
        for grid in ("batches", "seq_lens"):
            per_phase = getattr(self, grid)
            if not isinstance(per_phase, dict) or set(per_phase) != set(PHASES):
                raise ConfigError(grid, per_phase, "must map each phase to its values",
                                  choices=PHASES)
            for phase, values in per_phase.items():
                positive_ints(f"{grid}[{phase!r}]", values)
        for name in ("tile_q", "tile_k", "pages_per_tile", "gemm_tokens"):
            positive_ints(name, getattr(self, name))
        positive_ints("ragged_batches", self.ragged_batches, empty=True)
        for name in ("repeats", "rounds", "max_kv_tokens"):
            positive_int(name, getattr(self, name))
        for name in ("max_point_s", "budget_s", "max_call_s"):
            positive_limit(name, getattr(self, name))


MODES: dict[str, ProfileMode] = {
    "quick": ProfileMode(
        name="quick",
        batches={"prefill": (1, 3, 6), "chunk": (64, 128, 256),
                 "decode": (1, 3, 8, 24, 64, 192)},
        seq_lens={"prefill": (128, 256, 512, 1024), "chunk": (128, 512, 2048),
                  "decode": (128, 512, 2048, 8192)},
        tile_q=(32, 64), tile_k=(64,), pages_per_tile=(4,),
        gemm_tokens=(1, 8, 32, 128, 512, 2048), repeats=5, max_point_s=0.02, budget_s=45.0,
        rounds=3, max_kv_tokens=1 << 18, ragged_batches=(3, 8, 24),
    ),
    "full": ProfileMode(
        name="full",
        batches={"prefill": (1, 3, 6, 12), "chunk": (32, 64, 128, 256, 512, 1024),
                 "decode": (1, 3, 8, 24, 64, 192, 512)},
        seq_lens={"prefill": (128, 256, 512, 1024, 2048, 4096, 8192),
                  "chunk": (128, 256, 512, 1024, 2048, 4096, 8192),
                  "decode": (128, 256, 512, 1024, 2048, 4096, 8192, 16384)},
        tile_q=(16, 32, 64, 128), tile_k=(32, 64, 128, 256), pages_per_tile=(1, 2, 4, 8, 16),
        gemm_tokens=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096), repeats=5,
        max_point_s=0.05, budget_s=1200.0, rounds=3, max_kv_tokens=1 << 20,
        ragged_batches=(3, 8, 24, 64, 192), max_call_s=0.5,
    ),
}


@dataclass
class ProfileResult:
    """What a profile run measured, and where: kernel samples, the GEMM profile, the machine."""

    model: ModelConfig
    dims: AttentionDims
    mode: str
    samples: list[Sample]
    gemm: GemmProfile
    fingerprint: dict[str, object]
    version: str = __version__
    duration_s: float = 0.0
    skipped: list[tuple[str, int, int]] = field(default_factory=list)  # over budget or cap


def candidates_of(mode: ProfileMode, phase: str, dims: AttentionDims) -> list[Candidate]:
    """The candidates `mode` times for `phase`."""
    return enumerate_candidates(phase, dims, tile_q=mode.tile_q, tile_k=mode.tile_k,
                                pages_per_tile=mode.pages_per_tile)


def _inputs(phase: str, dims: AttentionDims, batch: int, seq_len: int, ragged: bool,
            rng: np.random.Generator) -> Callable[[Candidate], None]:
    """Random inputs of one shape (`ragged`: a ragged decode shape), and a function running a
    candidate on them."""
    d, hq, hkv, page = dims.head_dim, dims.num_q_heads, dims.num_kv_heads, dims.page_size
    common = {"parallel": False, "check_inputs_finite": False}
    if phase == "prefill":
        q = rng.standard_normal((batch, hq, seq_len, d), dtype=np.float32)
        k, v = (rng.standard_normal((batch, hkv, seq_len, d), dtype=np.float32) for _ in "kv")
        return lambda c: prefill_attention(q, k, v, sram_budget_bytes=c.sram_bytes(dims),
                                           **c.params(), **common)
    # Paged phases: shuffled pages, so reads jump around memory as in a long-running server.
    # The cache holds just the pages in use, so ragged and equal shapes read memory as densely.
    lens = context_lens(batch, seq_len, ragged) if phase == "decode" else [seq_len + batch]
    pages = [-(-n // page) for n in lens]
    shape = (sum(pages), page, hkv, d)
    k_cache, v_cache = (rng.standard_normal(shape, dtype=np.float32) for _ in "kv")
    order = rng.permutation(shape[0]).astype(np.int32)
    tables = np.zeros((len(lens), max(pages)), np.int32)  # past a sequence's pages: unread
    for i, first in enumerate(np.cumsum([0, *pages[:-1]])):
        tables[i, :pages[i]] = order[first:first + pages[i]]
    if phase == "decode":
        q = rng.standard_normal((batch, hq, d), dtype=np.float32)
        lens_array = np.array(lens, np.int32)
        return lambda c: decode_attention(q, k_cache, v_cache, tables, lens_array,
                                          sram_budget_bytes=c.sram_bytes(dims), **c.params(),
                                          **common)
    q = rng.standard_normal((hq, batch, d), dtype=np.float32)
    return lambda c: chunk_attention(q, k_cache, v_cache, tables[0], seq_len,
                                     sram_budget_bytes=c.sram_bytes(dims), **c.params(), **common)


def _plan(mode: ProfileMode, dims: AttentionDims) -> tuple[list, list]:
    """Grid points (phase, B, T, ragged) to time, cheapest first (`_call_estimate_s`), and
    those over a cap (KV tokens, call time)."""
    points, capped = [], []
    grids = [(phase, mode.batches[phase], False) for phase in PHASES]
    grids.append(("decode", mode.ragged_batches, True))
    for phase, batches, ragged in grids:
        probe = candidates_of(mode, phase, dims)[0]
        for batch in batches:
            for seq_len in mode.seq_lens[phase]:
                estimate = _call_estimate_s(probe, dims, batch, seq_len, ragged)
                if ((phase == "decode" and batch * seq_len > mode.max_kv_tokens)
                        or estimate > mode.max_call_s):
                    capped.append((_label(phase, ragged), batch, seq_len))
                    continue
                points.append((estimate, phase, batch, seq_len, ragged))
    points.sort()
    return [p[1:] for p in points], capped


def _call_estimate_s(cand: Candidate, dims: AttentionDims, batch: int, seq_len: int,
                     ragged: bool) -> float:
    """A rough time of one call, from its FLOPs at 50 GFLOP/s and its bytes at 10 GB/s."""
    costs = cand.costs(dims, batch, seq_len, ragged)
    return costs.flops / 50e9 + costs.hbm_bytes / 10e9


def _label(phase: str, ragged: bool) -> str:
    """What reports call a phase's shapes: the phase, or `RAGGED_DECODE`."""
    return RAGGED_DECODE if ragged else phase


def run_profile(model: ModelConfig, mode: str | ProfileMode = "quick", *,
                budget_s: float | None = None, progress: bool = True,
                seed: int = 0) -> ProfileResult:
    """Time every candidate of `mode` on its grid for `model`'s attention, and its GEMMs.

    `budget_s` overrides the mode's budget; points not reached in time are listed in
    `ProfileResult.skipped`, as are decode shapes over the mode's KV-token cap.
    """
    if isinstance(mode, str):
        if mode not in MODES:
            raise ConfigError("mode", mode, "unknown profile mode", choices=MODES)
        mode = MODES[mode]
    if budget_s is None:
        budget_s = mode.budget_s
    positive_limit("budget_s", budget_s)
    dims = AttentionDims.of(model)
    rng = np.random.default_rng(seed)
    points, skipped = _plan(mode, dims)
    bar = ProgressBar("profile") if progress else _no_progress
    bar(0, len(points), "compiling the kernels")
    _compile_kernels(mode, dims, seed)
    start = time.perf_counter()  # the budget is for timing: compiling is not spent from it
    timings: dict[tuple[str, str, int, int, bool], list[tuple[float, float]]] = {}
    total, done, order = mode.rounds * len(points), 0, points
    for round_index in range(mode.rounds):
        if round_index > 0 and time.perf_counter() - start <= budget_s:
            order = _retime_order(order, _samples(timings), mode, dims)
        for phase, batch, seq_len, ragged in order:
            done += 1
            if time.perf_counter() - start > budget_s:
                if round_index == 0:
                    skipped.append((_label(phase, ragged), batch, seq_len))
                bar(done, total, "over budget: skipped")
                continue
            run = _inputs(phase, dims, batch, seq_len, ragged, rng)
            for n, cand in enumerate(candidates_of(mode, phase, dims)):
                # the first candidate's warm-up call faults the fresh inputs in for all
                timings.setdefault((phase, cand.name, batch, seq_len, ragged), []).append(
                    time_calls(functools.partial(run, cand), mode.repeats, mode.max_point_s,
                               warm_up=n == 0))
            bar(done, total,
                f"round {round_index + 1}: {_label(phase, ragged)} B={batch} T={seq_len}")
    samples = _samples(timings)
    gemm = profile_gemm(model, mode.gemm_tokens, repeats=mode.repeats, rng=rng)  # ~1 s
    return ProfileResult(model=model, dims=dims, mode=mode.name, samples=samples, gemm=gemm,
                         fingerprint=machine_fingerprint(), duration_s=time.perf_counter() - start,
                         skipped=skipped)


def _samples(timings: dict[tuple[str, str, int, int, bool], list[tuple[float, float]]]
             ) -> list[Sample]:
    """A sample per (phase, candidate, B, T, ragged) from its rounds' (median, fastest)."""
    return [Sample(phase, name, batch, seq_len, min(t[0] for t in times), fastest[0], ragged,
                   fastest[1] / fastest[0] - 1 if len(fastest) > 1 else math.nan)
            for (phase, name, batch, seq_len, ragged), times in timings.items()
            for fastest in [sorted(t[1] for t in times)]]


def _retime_order(points: list, samples: list[Sample], mode: ProfileMode,
                  dims: AttentionDims) -> list:
    """`points` by the median log excess of their candidates' fastest calls over a fit of all
    the samples, most first; points never timed last. The fit's hardware figures only scale
    its roofline feature, so the machine's preset serves."""
    cands = {c.name: c for p in PHASES for c in candidates_of(mode, p, dims)}
    model = fit_latency(samples, list(cands.values()), dims, HardwareSpec.preset("cpu-local"),
                        heldout=False)
    excess = defaultdict(list)
    for s in samples:
        predicted = model.predict_s(cands[s.candidate], s.batch, s.seq_len, s.ragged)
        excess[(s.phase, s.batch, s.seq_len, s.ragged)].append(
            math.log(s.min_s / max(predicted, 1e-12)))
    rank = {p: float(np.median(e)) for p, e in excess.items()}
    return sorted(points, key=lambda p: -rank.get(p, -math.inf))


def _compile_kernels(mode: ProfileMode, dims: AttentionDims, seed: int) -> None:
    """Call each kernel once on a one-page shape, so first-call compiling (or loading from the
    cache) happens before the clock of the budget starts."""
    rng = np.random.default_rng(seed)
    for phase in ("prefill", "decode"):  # chunked prefill runs the decode kernel
        _inputs(phase, dims, 1, dims.page_size, False, rng)(candidates_of(mode, phase, dims)[0])


def _no_progress(done: int, total: int, detail: str = "") -> None:
    """The progress callback when no bar is wanted."""
