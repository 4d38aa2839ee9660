"""This machine's step times for a real model: measured over a grid of step shapes, and fitted.

The real engine's cost model, built the way Vidur builds its operator tables and DistServe its
latency fits: time `LlamaModel.step` on decode batches, prompt chunks and mixes of both, over
scratch pages, and fit a `LinearStepModel` to the means. The grid is fixed and independent
of any workload, so a run's fidelity (refimpl.metrics.fidelity) is measured on steps the fit
never saw; a slice of the grid is held out and its error reported too. The grid's last part
scans decode batches of every size up to `ROW_SCAN` at the shortest context: the fit's terms by
row count mod 4 (a CPU's BLAS charges more for 7 rows than for 8) need sizes other than
powers of two.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from threadpoolctl import threadpool_limits

from refimpl.costmodel.linear_step import LinearStepModel
from refimpl.model import LlamaModel, SeqSlice
from refimpl.model.warm_up import FIRST_CALLS

__all__ = ["BLAS_THREADS", "ROW_SCAN", "StepProfile", "profile_steps", "step_grid"]

# BLAS runs on one thread wherever the real engine runs: a step's GEMMs have a few to a few
# hundred rows, and OpenBLAS's second thread made an (8, 512) x (512, 768) product 75x slower
# here (30.7 ms against 0.40 ms) on a machine whose cores other processes share; the step's
# kernels are serial too (refimpl._numba), so a step's time is one core's work.
BLAS_THREADS = 1

DECODE_BATCHES = (1, 2, 4, 8, 16, 32)
DECODE_CONTEXTS = (32, 256)
CHUNKS = (16, 32, 64, 128, 256, 512)
CHUNK_STARTS = (0, 256)
MIXED = ((16, 4), (64, 8), (128, 16), (256, 8), (512, 4))  # (chunk tokens, decodes at 128)
# Decode batches 1 to ROW_SCAN at DECODE_CONTEXTS[0], those not above: every remainder mod 4,
# over the batch sizes a serving run on 2 cores mostly has.
ROW_SCAN = 32


@dataclass(frozen=True)
class StepProfile:
    """Measured steps (counts and median seconds), the fit, and its held-out error."""

    counts: np.ndarray  # (n, 4): prefill tokens, causal pairs, decode seqs, decode context
    seconds: np.ndarray  # (n,) median of the repeats
    heldout: np.ndarray  # (n,) bool: left out of the fit
    model: LinearStepModel
    heldout_mape: float
    profile_s: float  # wall time of the measurements

    def summary(self) -> dict:
        """The fit and its error as plain data (a run's settings, a benchmark's report)."""
        return {"coefficients": self.model.as_dict(), "heldout_mape": self.heldout_mape,
                "profile_s": self.profile_s}


def step_grid(max_context: int) -> list[tuple[list[tuple[int, int]], list[int]]]:
    """The profiled shapes: (prompt chunks as (tokens, start), decode contexts) per step,
    limited to positions the model accepts."""
    shapes = [([], [context] * batch) for batch in DECODE_BATCHES for context in DECODE_CONTEXTS
              if context <= max_context]
    shapes += [([(tokens, start)], []) for tokens in CHUNKS for start in CHUNK_STARTS
               if start + tokens <= max_context]
    shapes += [([(tokens, 0)], [128] * batch) for tokens, batch in MIXED
               if max(tokens, 128) <= max_context]
    shapes += [([], [DECODE_CONTEXTS[0]] * batch) for batch in range(1, ROW_SCAN + 1)
               if batch not in DECODE_BATCHES and DECODE_CONTEXTS[0] <= max_context]
    return shapes


def profile_steps(model: LlamaModel, *, page_size: int = 16, repeats: int = 5,
                  progress: Callable[..., None] | None = None) -> StepProfile:
    """Time `model.step` over `step_grid` (BLAS on one thread, as a run has it), fit a
    `LinearStepModel`, hold every fourth shape out and report its error; `progress(done,
    total[, detail])` hears of each pass, and of the first calls before them."""
    with threadpool_limits(limits=BLAS_THREADS, user_api="blas"):
        return _profile(model, page_size, repeats, progress)


def _profile(model: LlamaModel, page_size: int, repeats: int,
             progress: Callable[..., None] | None) -> StepProfile:
    shapes = step_grid(model.config.max_context)
    most = max(sum(-(-(t + s) // page_size) for t, s in chunks)
               + sum(-(-c // page_size) for c in contexts) for chunks, contexts in shapes)
    storage = model.storage_for(most, page_size)
    started = time.perf_counter()
    steps = [_slices(model.config.vocab_size, page_size, chunks, contexts)
             for chunks, contexts in shapes]
    if progress is not None:  # a new machine compiles the attention kernels here (~6 s)
        progress(0, repeats, FIRST_CALLS)
    for seqs in steps:
        model.step(storage, seqs)  # warm: the first call of a shape compiles or pages in
    # Whole passes over the grid, `repeats` times: a shape's mean then spans the run, so a
    # spell of load on a shared machine spreads over every shape instead of skewing a few.
    times = np.zeros((repeats, len(steps)))
    for r in range(repeats):
        for k, seqs in enumerate(steps):
            t0 = time.perf_counter()
            model.step(storage, seqs)
            times[r, k] = time.perf_counter() - t0
        if progress is not None:
            progress(r + 1, repeats)
    seconds = times.mean(axis=0)
    counts = [(sum(t for t, _ in chunks), sum(t * s + t * (t + 1) // 2 for t, s in chunks),
               len(contexts), sum(contexts)) for chunks, contexts in shapes]
    counts_a, seconds_a = np.array(counts, np.int64), np.array(seconds)
    heldout = np.arange(len(shapes)) % 4 == 3
    fit = LinearStepModel.fit(counts_a[~heldout], seconds_a[~heldout],
                              source=f"refimpl step profile of {model.config.name}")
    error = np.abs(fit.predict(counts_a[heldout]) / seconds_a[heldout] - 1.0)
    full = LinearStepModel.fit(counts_a, seconds_a, source=fit.source)
    return StepProfile(counts_a, seconds_a, heldout, full, float(error.mean()),
                       time.perf_counter() - started)


def _slices(vocab: int, page_size: int, chunks: list[tuple[int, int]], contexts: list[int]
            ) -> list[SeqSlice]:
    """The step's sequences over consecutive scratch pages (contents do not change the time)."""
    rng = np.random.default_rng(0)
    seqs, next_page = [], 0
    for request_id, (length, start, tokens) in enumerate(
            [(c, c - 1, 1) for c in contexts] + [(s + t, s, t) for t, s in chunks]):
        pages = -(-length // page_size)
        table = np.arange(next_page, next_page + pages, dtype=np.int64)
        next_page += pages
        seqs.append(SeqSlice(request_id, rng.integers(0, vocab, tokens), start, table, True))
    return seqs
