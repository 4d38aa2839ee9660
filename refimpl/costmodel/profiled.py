"""This CPU's cost model from a profile: the fitted table, and the step time built on it.

`build_profiled_table` turns a `ProfileResult` into a `CostTable` (fit, predict every profiled
candidate on the grid, pick under `S`). `ProfiledStepModel` answers the engine's step time for
the profiled `ModelConfig`: the GEMM profile for the linear layers, and DistServe-style
`a + b*tokens + c*pairs` (prefill) / `a + b*seqs + c*context` (decode) attention terms fitted
to the table's picks, so one step costs a few multiplies and two bisections.
"""

from __future__ import annotations

import math
import warnings
from bisect import bisect_right

import numpy as np

from refimpl.config import HardwareSpec, ModelConfig
from refimpl.costmodel.candidates import PHASES
from refimpl.costmodel.fit import fit_latency, nnls_relative
from refimpl.costmodel.profile import MODES, ProfileResult, candidates_of
from refimpl.costmodel.step import PartsStepModel, StepShape
from refimpl.costmodel.table import (
    CostTable,
    ForeignTableWarning,
    build_phase,
    default_table_path,
    load_table,
)
from refimpl.errors import ConfigError

__all__ = ["ProfiledStepModel", "build_profiled_table", "default_table_for"]


def build_profiled_table(result: ProfileResult, hardware: HardwareSpec,
                         sram_budget_bytes: int | None = None) -> CostTable:
    """Fit `result` and tabulate the profiled candidates over the profile's grid."""
    mode = MODES[result.mode]
    candidates = {p: candidates_of(mode, p, result.dims) for p in PHASES}
    model = fit_latency(result.samples, [c for cs in candidates.values() for c in cs],
                        result.dims, hardware)
    budget = hardware.sram_bytes if sram_budget_bytes is None else sram_budget_bytes
    phases = {p: build_phase(p, candidates[p], result.dims, mode.batches[p], mode.seq_lens[p],
                             model.predict_s, budget) for p in PHASES}
    info = {"mode": result.mode, "profile_s": result.duration_s,
            "num_samples": len(result.samples), "skipped": [list(s) for s in result.skipped],
            "heldout_mape": {p: e.mape for p, e in model.errors.items()},
            "baseline_mape": {p: e.baseline_mape for p, e in model.errors.items()},
            "heldout_spread": {p: e.spread for p, e in model.errors.items()},
            # (measured, predicted, baseline) seconds of each held-out sample: the residuals
            "heldout_s": {p: [list(t) for t in e.heldout_s] for p, e in model.errors.items()},
            "cache_bytes": {p: None if math.isinf(c) else c for p, c in model.cache_bytes.items()},
            "reuse_cache_bytes": {p: None if math.isinf(c) else c
                                  for p, c in model.reuse_cache_bytes.items()}}
    return CostTable(phases=phases, sram_budget_bytes=budget, dims=result.dims,
                     model_name=result.model.name, fingerprint=result.fingerprint,
                     version=result.version, gemm=result.gemm, info=info)


def default_table_for(model: ModelConfig) -> CostTable | None:
    """This machine's saved table for `model` at the default path, or None if there is none."""
    path = default_table_path(model.name)
    if not path.exists():
        return None
    with warnings.catch_warnings():  # the path is keyed by this machine: foreign means stale
        warnings.simplefilter("error", ForeignTableWarning)
        try:
            return load_table(path)
        except (ForeignTableWarning, ConfigError):
            return None


def _attention_fit(table: CostTable) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per layer: (a, b, c) of prefill a + b*tokens + c*pairs and decode a + b*seqs + c*ctx."""
    rows, decode_rows = [], []
    for phase in ("prefill", "chunk", "decode"):
        t = table.phases[phase]
        for i, b in enumerate(t.batches):
            for j, s in enumerate(t.seq_lens):
                if phase == "prefill":  # B prompts of T tokens
                    x = [1.0, b * s, b * StepShape.chunk_pairs(s, 0)]
                elif phase == "chunk":  # a chunk of B tokens after T cached
                    x = [1.0, b, StepShape.chunk_pairs(b, s)]
                else:  # B sequences of T context tokens
                    x = [1.0, b, b * s]
                (decode_rows if phase == "decode" else rows).append((x, t.best_time_s[i][j]))
    fits = []
    for data in (rows, decode_rows):
        x, y = zip(*data, strict=True)
        fits.append(tuple(float(c) for c in nnls_relative(np.array(x), np.array(y))))
    return fits[0], fits[1]


class ProfiledStepModel(PartsStepModel):
    """Step time on this CPU from a profiled table: linear layers plus attention, all layers.

    Linear layers: the profiled GEMMs at M = prefill tokens + decode sequences, per layer, and
    the LM head for the decoding sequences. Attention per layer: the prefill and decode terms
    fitted to the table's fastest candidates (prefill and chunk grid points together, since a
    chunk's pairs count its prefix). No fixed overhead beyond the fitted intercepts.
    """

    def __init__(self, table: CostTable, model: ModelConfig) -> None:
        if table.gemm is None:
            raise ConfigError("table", table.model_name, "has no GEMM profile (an analytic "
                              "table): use RooflineStepModel")
        dims = (model.num_heads, model.num_kv_heads, model.head_dim)
        if (table.dims.num_q_heads, table.dims.num_kv_heads, table.dims.head_dim) != dims:
            raise ConfigError("model", model.name, f"attention shape {dims} differs from the "
                              f"table's ({table.model_name}): profile this model")
        self.table = table
        self.model = model
        self._layers = model.num_layers
        gemm = table.gemm
        # Segment i (between tokens[i] and tokens[i+1]) as intercept + slope * M, per matrix set;
        # the hot path then needs one bisection per set and no calls.
        self._gemm_tokens = gemm.tokens
        self._last_segment = len(gemm.tokens) - 2
        self._layer_lines = gemm.lines(gemm.layer_s)
        self._lm_head_lines = gemm.lines(gemm.lm_head_s)
        (self._pa, self._pb, self._pc), (self._da, self._db, self._dc) = _attention_fit(table)

    def step_time_parts(self, prefill_tokens: int, prefill_pairs: int, decode_seqs: int,
                        decode_context_tokens: int) -> float:
        """`step_time` from the four counts, with no allocation."""
        if prefill_tokens + decode_seqs <= 0:
            return 0.0
        m = prefill_tokens + decode_seqs
        i = min(max(bisect_right(self._gemm_tokens, m) - 1, 0), self._last_segment)
        intercept, slope = self._layer_lines[i]
        layer_s = intercept + slope * m
        if prefill_tokens:
            layer_s += self._pa + self._pb * prefill_tokens + self._pc * prefill_pairs
        if decode_seqs:
            layer_s += self._da + self._db * decode_seqs + self._dc * decode_context_tokens
            i = min(max(bisect_right(self._gemm_tokens, decode_seqs) - 1, 0), self._last_segment)
            intercept, slope = self._lm_head_lines[i]
            layer_s += (intercept + slope * decode_seqs) / self._layers  # once, not per layer
        return self._layers * layer_s
