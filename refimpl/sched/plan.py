"""The plan of one engine step, as data: what to compute, and what to do to the KV cache first.

A policy reads the run's state and returns a plan; it changes nothing. The commit
(refimpl.engine.commit) then carries the plan out, in this order: early finishes (a length
cap), preemptions (drop a request's KV; it recomputes later; either supersedes the request's
tier moves in the same plan), quantizations, spills to the CPU tier, restores from it (what
frees pages before what takes them), then each scheduled request's KV grows by its tokens; the
executor runs the step; the commit counts the computed tokens and emits output tokens. So a
plan is a plain value that can be inspected, logged or replayed, and a policy called on a
frozen snapshot leaves it untouched.

Two forms of the same thing: `StepPlan`, a frozen dataclass that a plain-Python policy
returns (requests named by their row `i` in the run's request table), and `PlanArrays`, the
preallocated arrays that compiled policies fill and the compiled commit reads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from refimpl._numba import inline_kernel
from refimpl.errors import SchedulingError

__all__ = ["PlanArrays", "StepPlan", "new_plan_arrays", "read_plan", "write_plan"]


@dataclass(frozen=True, slots=True)
class StepPlan:
    """Work of one step; every entry names a request by its row in the request table."""

    # Any sequence of ints will do (a tuple, a list, a NumPy array), and for the pairs any
    # sequence of pairs or an (n, 2) integer array, one row a pair; `read_plan` gives tuples.
    decode: tuple[int, ...] = ()  # requests computing their newest token (one each)
    prefill: tuple[tuple[int, int], ...] = ()  # (request, prompt tokens computed this step)
    preempt: tuple[int, ...] = ()  # requests whose KV is dropped first, to recompute later
    finish: tuple[tuple[int, str], ...] = ()  # (request, reason): ended now, output kept
    spill: tuple[int, ...] = ()  # requests whose pages move to the CPU tier
    restore: tuple[int, ...] = ()  # spilled requests whose pages come back
    quantize: tuple[tuple[int, int], ...] = ()  # (request, factor): pages repacked denser
    kernels: tuple[str, ...] = ()  # kernel candidates the step runs, if the policy picks

    def __bool__(self) -> bool:
        return any(len(part) for part in (self.decode, self.prefill, self.preempt, self.finish,
                                          self.spill, self.restore, self.quantize))

    @property
    def num_tokens(self) -> int:
        """Tokens computed by the step, decode and prefill together."""
        return len(self.decode) + int(sum(tokens for _, tokens in self.prefill))


# Rows of `PlanArrays.entries` (request rows; prefill token counts; finish reason codes;
# quantization factors), and the matching counts in `PlanArrays.sizes`.
(DECODE, PREFILL, PREFILL_TOKENS, PREEMPT, FINISH, FINISH_REASON, SPILL, RESTORE, QUANTIZE,
 QUANTIZE_FACTOR) = range(10)
NUM_DECODE, NUM_PREFILL, NUM_PREEMPT, NUM_FINISH, NUM_SPILL, NUM_RESTORE, NUM_QUANTIZE, \
    NUM_KERNELS = range(8)


class PlanArrays(NamedTuple):
    """`StepPlan` as arrays: entries by kind (rows above), counts, kernel picks."""

    entries: np.ndarray  # (10, n requests) int64
    sizes: np.ndarray  # (8,) int64: entries of each kind, then kernel picks
    kernels: np.ndarray  # (k,) int64: kernel candidates, indices into the run's name list


def new_plan_arrays(num_requests: int, max_kernels: int = 64) -> PlanArrays:
    """Empty plan arrays for a run of `num_requests` requests."""
    return PlanArrays(np.zeros((10, max(num_requests, 1)), np.int64), np.zeros(8, np.int64),
                      np.zeros(max_kernels, np.int64))


_ROWS = (("preempt", PREEMPT, NUM_PREEMPT), ("spill", SPILL, NUM_SPILL),
         ("restore", RESTORE, NUM_RESTORE))  # with `decode`, which is written first
_PAIRS = (("prefill", PREFILL, PREFILL_TOKENS, NUM_PREFILL),
          ("quantize", QUANTIZE, QUANTIZE_FACTOR, NUM_QUANTIZE))


def write_plan(plan: StepPlan, arrays: PlanArrays, reason_code: Callable[[str], int],
               kernel_code: Callable[[str], int]) -> None:
    """Put `plan` into empty plan arrays (sizes all 0); reasons and kernel names become codes.

    Written for the Python path's per-step cost (a microsecond or so): most plans only decode
    and prefill, so those two are written first and the other kinds are looked at only when
    one of them has entries; short runs of pairs are set one by one (cheaper than an array).
    """
    entries, sizes = arrays.entries, arrays.sizes
    decode, prefill = plan.decode, plan.prefill
    if len(decode):
        sizes[NUM_DECODE] = len(decode)
        entries[DECODE, :len(decode)] = decode
    if len(prefill):
        _write_pairs("prefill", prefill, entries, PREFILL, PREFILL_TOKENS)
        sizes[NUM_PREFILL] = len(prefill)
    if (len(plan.preempt) or len(plan.spill) or len(plan.restore) or len(plan.quantize)
            or len(plan.finish) or len(plan.kernels)):
        _write_rest(plan, arrays, reason_code, kernel_code)


def _write_rest(plan: StepPlan, arrays: PlanArrays, reason_code: Callable[[str], int],
                kernel_code: Callable[[str], int]) -> None:
    """The plan's kinds other than decode and prefill, into the plan arrays."""
    entries, sizes = arrays.entries, arrays.sizes
    for name, row, count in _ROWS:
        rows = getattr(plan, name)
        if len(rows):
            sizes[count] = len(rows)
            entries[row, :len(rows)] = rows
    if len(plan.quantize):
        _write_pairs("quantize", plan.quantize, entries, QUANTIZE, QUANTIZE_FACTOR)
        sizes[NUM_QUANTIZE] = len(plan.quantize)
    if len(plan.finish):
        sizes[NUM_FINISH] = len(plan.finish)
        for k, (i, reason) in enumerate(plan.finish):
            entries[FINISH, k], entries[FINISH_REASON, k] = i, reason_code(reason)
    if len(plan.kernels):
        kernels = plan.kernels[:len(arrays.kernels)]
        sizes[NUM_KERNELS] = len(kernels)
        for k, name in enumerate(kernels):
            arrays.kernels[k] = kernel_code(name)


def _write_pairs(name: str, pairs: Sequence | np.ndarray, entries: np.ndarray, row: int,
                 value_row: int) -> None:
    """(request, value) pairs into rows `row` and `value_row` of the plan's entries."""
    if type(pairs) is np.ndarray:
        _check_pairs(name, pairs)
        entries[row, :len(pairs)] = pairs[:, 0]
        entries[value_row, :len(pairs)] = pairs[:, 1]
    elif len(pairs) > 16:
        entries[(row, value_row), :len(pairs)] = np.asarray(pairs, np.int64).T
    else:
        for k, (i, value) in enumerate(pairs):
            entries[row, k] = i
            entries[value_row, k] = value


def _check_pairs(name: str, pairs: np.ndarray) -> None:
    """A `SchedulingError` naming the field unless `pairs` is an (n, 2) integer array."""
    if pairs.ndim != 2 or pairs.shape[1] != 2 or pairs.dtype.kind not in "iu":
        raise SchedulingError(f"StepPlan.{name}", f"array of shape {pairs.shape}, dtype "
                              f"{pairs.dtype}", "must be an (n, 2) integer array (one row a "
                              "pair) or a sequence of pairs")


def read_plan(arrays: PlanArrays, reason_names: Sequence[str],
              kernel_names: Sequence[str]) -> StepPlan:
    """The plan in `arrays` as a `StepPlan`; codes become reasons and kernel names."""
    entries, sizes = arrays.entries, arrays.sizes
    parts = {name: tuple(entries[row, :sizes[count]].tolist())
             for name, row, count in (("decode", DECODE, NUM_DECODE), *_ROWS)}
    parts.update({name: tuple(zip(entries[row, :sizes[count]].tolist(),
                                  entries[value_row, :sizes[count]].tolist(), strict=True))
                  for name, row, value_row, count in _PAIRS})
    n = sizes[NUM_FINISH]
    parts["finish"] = tuple((i, reason_names[code]) for i, code in zip(
        entries[FINISH, :n].tolist(), entries[FINISH_REASON, :n].tolist(), strict=True))
    parts["kernels"] = tuple(kernel_names[c] for c in arrays.kernels[:sizes[NUM_KERNELS]])
    return StepPlan(**parts)


@inline_kernel
def clear(sizes):
    """Empty the plan."""
    sizes[:] = 0


@inline_kernel
def is_empty(sizes):
    """Whether the plan does nothing at all."""
    return (sizes[NUM_DECODE] + sizes[NUM_PREFILL] + sizes[NUM_PREEMPT] + sizes[NUM_FINISH]
            + sizes[NUM_SPILL] + sizes[NUM_RESTORE] + sizes[NUM_QUANTIZE]) == 0


@inline_kernel
def add_decode(entries, sizes, i):
    """Request `i` decodes one token this step."""
    entries[DECODE, sizes[NUM_DECODE]] = i
    sizes[NUM_DECODE] += 1


@inline_kernel
def add_prefill(entries, sizes, i, tokens):
    """Request `i` computes `tokens` prompt tokens this step."""
    entries[PREFILL, sizes[NUM_PREFILL]] = i
    entries[PREFILL_TOKENS, sizes[NUM_PREFILL]] = tokens
    sizes[NUM_PREFILL] += 1


@inline_kernel
def add_preempt(entries, sizes, i):
    """Request `i` loses its KV before the step and recomputes later."""
    entries[PREEMPT, sizes[NUM_PREEMPT]] = i
    sizes[NUM_PREEMPT] += 1


@inline_kernel
def add_finish(entries, sizes, i, reason):
    """Request `i` ends before the step, its output kept, for reason code `reason`."""
    entries[FINISH, sizes[NUM_FINISH]] = i
    entries[FINISH_REASON, sizes[NUM_FINISH]] = reason
    sizes[NUM_FINISH] += 1


@inline_kernel
def add_spill(entries, sizes, i):
    """Request `i`'s pages move to the CPU tier before the step."""
    entries[SPILL, sizes[NUM_SPILL]] = i
    sizes[NUM_SPILL] += 1


@inline_kernel
def add_restore(entries, sizes, i):
    """Spilled request `i`'s pages come back before the step."""
    entries[RESTORE, sizes[NUM_RESTORE]] = i
    sizes[NUM_RESTORE] += 1


@inline_kernel
def add_quantize(entries, sizes, i, factor):
    """Request `i`'s pages are repacked `factor` times denser before the step."""
    entries[QUANTIZE, sizes[NUM_QUANTIZE]] = i
    entries[QUANTIZE_FACTOR, sizes[NUM_QUANTIZE]] = factor
    sizes[NUM_QUANTIZE] += 1


@inline_kernel
def add_kernel(kernels, sizes, candidate):
    """The step runs kernel candidate `candidate` (dropped past the array's length)."""
    if sizes[NUM_KERNELS] < kernels.shape[0]:
        kernels[sizes[NUM_KERNELS]] = candidate
        sizes[NUM_KERNELS] += 1


@inline_kernel
def entry(entries, sizes, k):
    """The plan's `k`-th computing request and its tokens: decodes (one each), then chunks."""
    if k < sizes[NUM_DECODE]:
        return entries[DECODE, k], 1
    k -= sizes[NUM_DECODE]
    return entries[PREFILL, k], entries[PREFILL_TOKENS, k]
