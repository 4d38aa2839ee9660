"""Pure transforms of workloads: rate scaling, selection, context clipping, class assignment.

Each returns a new `Workload` and leaves its argument untouched. Selection (`head`, `window`)
comes before `clip_to_context`, which counts the requests it clipped in `num_clipped`; a count
cannot follow rows that are dropped afterwards, so selecting from a clipped workload is an error.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from refimpl.config._validate import positive_int, positive_real, seeded_rng
from refimpl.config.model import ModelConfig
from refimpl.config.slo import PriorityClass
from refimpl.config.slo_sets import SLOSet
from refimpl.errors import ConfigError
from refimpl.workloads.workload import Workload

__all__ = [
    "assign_classes", "assign_slo_set", "clip_to_context", "head", "scale_lengths",
    "scale_to_rate", "window",
]


def scale_to_rate(workload: Workload, rate: float) -> Workload:
    """Stretch or squeeze arrival times so the mean rate, (n - 1) / duration, is `rate` req/s."""
    positive_real("rate", rate)
    if workload.duration_s == 0.0:
        raise ConfigError("rate", rate, "cannot scale a workload whose arrivals are all at 0 s")
    factor = workload.mean_rate / rate  # new gap = old gap * factor
    return replace(workload, arrival_s=workload.arrival_s * factor)


def scale_lengths(workload: Workload, factor: float) -> Workload:
    """Prompt and output lengths times `factor`, rounded, at least one token each (a trace's
    shape at a size another machine serves: the real engine's CPU runs)."""
    positive_real("factor", factor)

    def scaled(tokens: np.ndarray) -> np.ndarray:
        return np.maximum(np.rint(tokens * factor), 1).astype(np.int64)

    prompt_tokens, hash_ids = scaled(workload.prompt_tokens), workload.hash_ids
    block = workload.hash_block_tokens
    if hash_ids is not None:  # the hash blocks scale too: each id then covers block * factor
        block = round(workload.hash_block_tokens * factor)
        if block < 1 or abs(block - workload.hash_block_tokens * factor) > 1e-9 * block:
            raise ConfigError("factor", factor, "must scale the trace's "
                              f"{workload.hash_block_tokens}-token hash blocks to whole tokens")
        hash_ids = _blocks_kept(hash_ids, prompt_tokens, block)
    return replace(workload, prompt_tokens=prompt_tokens,
                   output_tokens=scaled(workload.output_tokens), hash_ids=hash_ids,
                   hash_block_tokens=block)


def _blocks_kept(hash_ids: tuple[tuple[int, ...], ...], prompt_tokens: np.ndarray,
                 block_tokens: int) -> tuple[tuple[int, ...], ...]:
    """Each request's hash ids cut to the blocks its (shorter) prompt still reaches."""
    return tuple(ids[:math.ceil(prompt / block_tokens)]
                 for ids, prompt in zip(hash_ids, prompt_tokens.tolist(), strict=True))


def head(workload: Workload, num_requests: int) -> Workload:
    """The first `num_requests` requests (all of them if there are fewer)."""
    positive_int("num_requests", num_requests)
    return _select(workload, np.arange(min(num_requests, len(workload))), "num_requests")


def window(workload: Workload, start_s: float, end_s: float) -> Workload:
    """Requests arriving in [start_s, end_s), times re-based so the first is at 0.0."""
    if not 0.0 <= start_s < end_s:
        raise ConfigError("end_s", end_s, f"must exceed start_s={start_s} >= 0")
    first, stop = np.searchsorted(workload.arrival_s, [start_s, end_s], side="left")
    if first == stop:
        raise ConfigError("start_s", start_s, f"no arrivals in [{start_s}, {end_s}) s")
    return _select(workload, np.arange(first, stop), "start_s")


def _select(workload: Workload, index: np.ndarray, field: str) -> Workload:
    """The rows at `index` (int64 (k,), k >= 1, ascending), arrivals re-based to 0.0."""
    if workload.num_clipped:
        raise ConfigError(field, len(index), "select requests before clip_to_context, not after")
    hash_ids = workload.hash_ids
    return replace(
        workload,
        arrival_s=workload.arrival_s[index] - workload.arrival_s[index[0]],
        prompt_tokens=workload.prompt_tokens[index],
        output_tokens=workload.output_tokens[index],
        priority=workload.priority[index],
        slo_class=workload.slo_class[index],
        ttft_slo_s=workload.ttft_slo_s[index],
        tpot_slo_s=workload.tpot_slo_s[index],
        hash_ids=None if hash_ids is None else tuple(hash_ids[i] for i in index),
    )


def clip_to_context(workload: Workload, model: ModelConfig) -> Workload:
    """Fit prompt + output into `model.max_context`: the prompt is cut first, to leave room
    for at least one output token, then the output to what remains. Clipped requests are added
    to `num_clipped`; their Mooncake hash ids are cut to the blocks the shorter prompt keeps."""
    max_context = model.max_context
    if max_context < 2:
        raise ConfigError("max_context", max_context, "needs room for 1 prompt + 1 output token")
    prompt_tokens = np.minimum(workload.prompt_tokens, max_context - 1)  # (n,)
    output_tokens = np.minimum(workload.output_tokens, max_context - prompt_tokens)  # (n,)
    is_clipped = output_tokens != workload.output_tokens  # (n,) bool
    is_clipped |= prompt_tokens != workload.prompt_tokens
    hash_ids = workload.hash_ids
    if hash_ids is not None:
        hash_ids = _blocks_kept(hash_ids, prompt_tokens, workload.hash_block_tokens)
    return replace(
        workload,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        hash_ids=hash_ids,
        num_clipped=min(len(workload), workload.num_clipped + int(is_clipped.sum())),
    )


def assign_classes(
    workload: Workload,
    classes: Sequence[PriorityClass],
    weights: Sequence[float] | None = None,
    seed: int = 0,
) -> Workload:
    """Give each request a class drawn independently with probability proportional to
    `weights` (equal if None), seeded: its priority, class name and SLO targets."""
    if not classes:
        raise ConfigError("classes", list(classes), "give at least one PriorityClass")
    weights = [1.0] * len(classes) if weights is None else list(weights)
    if len(weights) != len(classes):
        raise ConfigError("weights", weights, f"need one weight per class ({len(classes)})")
    for weight in weights:
        positive_real("weights", weight)
    probabilities = np.asarray(weights) / np.sum(weights)  # (k,)
    drawn = seeded_rng(seed).choice(len(classes), size=len(workload), p=probabilities)
    return replace(
        workload,
        priority=np.array([c.priority for c in classes], dtype=np.int64)[drawn],
        slo_class=np.array([c.name for c in classes], dtype=object)[drawn],
        ttft_slo_s=np.array([c.slo.ttft_s for c in classes], dtype=np.float64)[drawn],
        tpot_slo_s=np.array([c.slo.tpot_s for c in classes], dtype=np.float64)[drawn],
    )


def assign_slo_set(workload: Workload, slo_set: SLOSet, seed: int = 0) -> Workload:
    """Give each request a class of `slo_set`, drawn with the set's shares (seeded)."""
    return assign_classes(workload, slo_set.classes, slo_set.shares, seed=seed)
