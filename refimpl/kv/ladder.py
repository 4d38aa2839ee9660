"""The memory-pressure ladder (the seed's section 4): act in tiers of rising cost.

When the page pool fills, the scheduler calls `PressureLadder.relieve`, which climbs as far as
needed, one step at a time, each step acting while utilization (counting the pages the caller is
about to need) stays above that step's threshold:

1. `queue_new`  stop taking new requests (admission control decides whether to queue or reject);
2. `length_capped`  finish low-priority, long-context requests now, keeping their output;
3. `quantize`  repack chosen requests' pages to INT8/FP8, freeing the difference;
4. `spill`  move chosen requests' pages to the CPU tier (they cannot decode until restored,
   and the transfer is charged both ways);
5. `preempt`  free a request's pages; the scheduler recomputes its prefill later.

The ladder changes only the pool; each action it returns tells the scheduler what happened to
which request, why and when, so the scheduler updates the request's state. The decision itself
is compiled (`_ladder_kernels.plan_relief`, which changes nothing; `PressureLadder.plan` calls
it); `relieve` applies its actions through `PagePool`'s methods.

Which requests each step picks (victim order, least valuable first):
- cap: requests with `priority >= low_priority` and `context_tokens >= long_context_tokens`,
  largest priority number first, then longest context (frees the most);
- quantize and spill: largest priority number first, then most slack to the next deadline
  (latency-tolerant), then longest context;
- preempt: largest priority number first, then the latest arrival (vLLM's choice: the least
  work is lost).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from refimpl.config._validate import positive_int, positive_real
from refimpl.errors import ConfigError
from refimpl.kv import _ladder_kernels as LK
from refimpl.kv.pool import PagePool

__all__ = ["KVCandidate", "LadderAction", "LadderConfig", "LadderStep", "PressureLadder",
           "plan_relief", "relief_kernel"]

# The compiled decision itself, for compiled callers (the `slo` policy's tick), with the layout
# of its `actions` rows: columns STEP, CANDIDATE, PAGES_FREED; step codes in LadderStep order.
relief_kernel = LK



class LadderStep(StrEnum):
    """The ladder's steps, cheapest first; the value is the reason code recorded."""

    QUEUE_NEW = "queue_new"
    CAP_LENGTH = "length_capped"
    QUANTIZE = "quantize"
    SPILL = "spill"
    PREEMPT = "preempt"


_STEPS = tuple(LadderStep)  # by the kernel's step codes
assert [_STEPS[code] for code in (LK.QUEUE_NEW, LK.CAP_LENGTH, LK.QUANTIZE, LK.SPILL,
                                  LK.PREEMPT)] == list(LadderStep)


@dataclass(frozen=True)
class KVCandidate:
    """What the ladder needs to know of a running request to rank it as a victim."""

    request_id: int
    priority: int  # larger numbers are less urgent (0 is the most urgent class)
    context_tokens: int
    slack_s: float  # time left before its next deadline; large means latency-tolerant
    arrival_s: float


@dataclass(frozen=True)
class LadderAction:
    """One thing the ladder did, to whom, why and when."""

    step: LadderStep
    request_id: int | None  # None for `queue_new`, which concerns no single request
    time_s: float
    utilization: float  # pool utilization (with the pending need) when the step fired
    pages_freed: int
    transfer_s: float = 0.0  # spill: time to copy the pages to the CPU tier


@dataclass(frozen=True)
class LadderConfig:
    """Utilization thresholds of each step (fractions of the pool) and victim limits."""

    queue_new_above: float = 0.85  # the seed's conservative watermark
    cap_above: float = 0.90
    quantize_above: float = 0.93
    spill_above: float = 0.96
    preempt_above: float = 0.99
    low_priority: int = 1  # priority numbers from here on may have their length capped
    long_context_tokens: int = 2048
    quantize_factor: int = 2  # 16-bit -> 8-bit

    def __post_init__(self) -> None:
        thresholds = [self.queue_new_above, self.cap_above, self.quantize_above,
                      self.spill_above, self.preempt_above]
        for name, value in zip(
            ("queue_new_above", "cap_above", "quantize_above", "spill_above", "preempt_above"),
            thresholds, strict=True,
        ):
            positive_real(name, value)
            if value > 1:
                raise ConfigError(name, value, "must be a fraction of the pool, at most 1")
        if thresholds != sorted(thresholds):
            raise ConfigError("thresholds", thresholds, "must rise with each step's cost")
        positive_int("long_context_tokens", self.long_context_tokens)
        if self.quantize_factor not in (2, 4):
            raise ConfigError("quantize_factor", self.quantize_factor,
                              "is the width ratio of the formats", choices=(2, 4))


@dataclass
class PressureLadder:
    """Applies the ladder to a pool and keeps the history of every action taken."""

    config: LadderConfig = field(default_factory=LadderConfig)
    page_bytes: int = 1  # bytes of one page, to charge spill transfers
    host_bandwidth_bytes_s: float = 1.0
    history: list[LadderAction] = field(default_factory=list)
    _holding: bool = field(default=False, repr=False)  # above the first watermark last call

    def relieve(
        self,
        pool: PagePool,
        candidates: Sequence[KVCandidate],
        now_s: float,
        need_pages: int = 0,
    ) -> list[LadderAction]:
        """Climb the ladder until utilization (with `need_pages` more) is under every threshold.

        Decides with `plan` (which changes nothing), then applies each action to the pool.
        """
        actions: list[LadderAction] = []

        def pressure() -> float:
            return (pool.num_used_pages + need_pages) / pool.num_pages

        # Holding new requests is a state, recorded when it starts, not at every call.
        holding = pressure() > self.config.queue_new_above
        if holding and not self._holding:
            actions.append(LadderAction(LadderStep.QUEUE_NEW, None, now_s, pressure(), 0))
        self._holding = holding
        for step, index, pages_freed, transfer_s in self.plan(pool, candidates, need_pages):
            request_id = candidates[index].request_id
            level = pressure()  # before the action, as the plan saw it
            if step is LadderStep.QUANTIZE:
                pool.quantize(request_id, self.config.quantize_factor)
            elif step is LadderStep.SPILL:
                pool.spill(request_id)
            else:  # CAP_LENGTH and PREEMPT free the pages
                pool.free(request_id)
            actions.append(LadderAction(step, request_id, now_s, level, pages_freed,
                                        transfer_s))
        self.history.extend(actions)
        return actions

    def plan(
        self, pool: PagePool, candidates: Sequence[KVCandidate], need_pages: int = 0
    ) -> list[tuple[LadderStep, int, int, float]]:
        """What `relieve` would do, without doing it (the compiled `plan_relief`).

        Returns `(step, candidate index, pages freed, transfer_s)` per action, in order;
        `queue_new` is `relieve`'s own.
        """
        n = len(candidates)
        slots = [pool.slot(c.request_id) if c.request_id in pool else -1 for c in candidates]
        ints = np.array([slots, [c.priority for c in candidates],
                         [c.context_tokens for c in candidates],
                         [c.request_id for c in candidates]], dtype=np.int64).reshape(4, n)
        floats = np.array([[c.slack_s for c in candidates], [c.arrival_s for c in candidates]],
                          dtype=np.float64).reshape(2, n)
        arrays = (pool.refcount, pool.counters, pool.tables, pool.num_pages_of, pool.lengths,
                  pool.tokens_per_page, pool.states)
        return plan_relief(self.config, arrays, pool.page_size, pool.cpu_tier_pages, ints[0],
                           ints[1], ints[2], floats[0], floats[1], ints[3], need_pages,
                           self.page_bytes, self.host_bandwidth_bytes_s)


def plan_relief(config: LadderConfig, arrays: tuple[np.ndarray, ...], page_size: int,
                cpu_tier_pages: int, slots: np.ndarray, priorities: np.ndarray,
                context_tokens: np.ndarray, slack_s: np.ndarray, arrival_s: np.ndarray,
                request_ids: np.ndarray, need_pages: int = 0, page_bytes: int = 1,
                host_bandwidth_bytes_s: float = 1.0) -> list[tuple[LadderStep, int, int, float]]:
    """The ladder's actions on a pool's `arrays` (refcount, counters, tables, num_pages_of,
    lengths, tokens_per_page, states: a live pool's, or a projection's), changing nothing:
    `(step, candidate index, pages freed, transfer_s)` each, in order. Candidates are parallel
    arrays, `slots[c] = -1` for one the pool does not hold."""
    cfg, n = config, len(slots)
    actions = np.empty((2 * n, 3), dtype=np.int64)
    transfer_s = np.empty(2 * n, dtype=np.float64)
    count = LK.plan_relief(
        *arrays, page_size, cpu_tier_pages, np.asarray(slots, np.int64),
        np.asarray(priorities, np.int64), np.asarray(context_tokens, np.int64),
        np.asarray(slack_s, np.float64), np.asarray(arrival_s, np.float64),
        np.asarray(request_ids, np.int64), float(cfg.cap_above), float(cfg.quantize_above),
        float(cfg.spill_above), float(cfg.preempt_above), int(cfg.low_priority),
        int(cfg.long_context_tokens), int(cfg.quantize_factor), int(need_pages), page_bytes,
        host_bandwidth_bytes_s, actions, transfer_s)
    return [(_STEPS[step], int(index), int(freed), float(transfer_s[k]))
            for k, (step, index, freed) in enumerate(actions[:count].tolist())]
