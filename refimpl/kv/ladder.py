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
which request, why and when, so the scheduler updates the request's state.

Which requests each step picks (victim order, least valuable first):
- cap: requests with `priority >= low_priority` and `context_tokens >= long_context_tokens`,
  largest priority number first, then longest context (frees the most);
- quantize and spill: largest priority number first, then most slack to the next deadline
  (latency-tolerant), then longest context;
- preempt: largest priority number first, then the latest arrival (vLLM's choice: the least
  work is lost).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from refimpl.config._validate import positive_int, positive_real
from refimpl.errors import ConfigError
from refimpl.kv.pool import PagePool, RequestState

__all__ = ["KVCandidate", "LadderAction", "LadderConfig", "LadderStep", "PressureLadder"]


class LadderStep(StrEnum):
    """The ladder's steps, cheapest first; the value is the reason code recorded."""

    QUEUE_NEW = "queue_new"
    CAP_LENGTH = "length_capped"
    QUANTIZE = "quantize"
    SPILL = "spill"
    PREEMPT = "preempt"


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


def _cap_order(c: KVCandidate) -> tuple:
    return (-c.priority, -c.context_tokens, c.request_id)


def _tolerant_order(c: KVCandidate) -> tuple:
    return (-c.priority, -c.slack_s, -c.context_tokens, c.request_id)


def _newest_order(c: KVCandidate) -> tuple:
    return (-c.priority, -c.arrival_s, -c.request_id)


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
        """Climb the ladder until utilization (with `need_pages` more) is under every threshold."""
        cfg = self.config
        actions: list[LadderAction] = []

        def pressure() -> float:
            return (pool.num_used_pages + need_pages) / pool.num_pages

        # Holding new requests is a state, recorded when it starts, not at every call.
        holding = pressure() > cfg.queue_new_above
        if holding and not self._holding:
            actions.append(LadderAction(LadderStep.QUEUE_NEW, None, now_s, pressure(), 0))
        self._holding = holding
        resident = [c for c in candidates if c.request_id in pool
                    and pool.state(c.request_id) is RequestState.RESIDENT]
        capped = [c for c in resident if c.priority >= cfg.low_priority
                  and c.context_tokens >= cfg.long_context_tokens]
        steps: list[tuple[LadderStep, float, list[KVCandidate], Callable[[int], tuple[int, float]]]]
        steps = [
            (LadderStep.CAP_LENGTH, cfg.cap_above, sorted(capped, key=_cap_order),
             lambda r: (self._free(pool, r), 0.0)),
            (LadderStep.QUANTIZE, cfg.quantize_above, sorted(resident, key=_tolerant_order),
             lambda r: (self._quantize(pool, r), 0.0)),
            (LadderStep.SPILL, cfg.spill_above, sorted(resident, key=_tolerant_order),
             lambda r: self._spill(pool, r)),
            (LadderStep.PREEMPT, cfg.preempt_above, sorted(resident, key=_newest_order),
             lambda r: (self._free(pool, r), 0.0)),
        ]
        done: set[int] = set()  # a request leaves the pool (or is spilled) at most once
        for step, threshold, victims, act in steps:
            for victim in victims:
                level = pressure()
                if level <= threshold and pool.num_free_pages >= need_pages:
                    break
                if victim.request_id in done:
                    continue
                freed, transfer_s = act(victim.request_id)
                if freed < 0:
                    continue  # this victim cannot take this step (shared pages, tier full)
                if step is not LadderStep.QUANTIZE:
                    done.add(victim.request_id)
                actions.append(LadderAction(step, victim.request_id, now_s, level, freed,
                                            transfer_s))
        self.history.extend(actions)
        return actions

    @staticmethod
    def _free(pool: PagePool, request_id: int) -> int:
        before = pool.num_free_pages
        pool.free(request_id)
        return pool.num_free_pages - before

    def _quantize(self, pool: PagePool, request_id: int) -> int:
        if pool.is_quantized(request_id) or not pool.can_quantize(request_id):
            return -1
        factor = self.config.quantize_factor
        kept = -(-pool.length(request_id) // (pool.page_size * factor))
        if kept == len(pool.page_table(request_id)):
            return -1  # nothing to gain: it would free no page
        before = pool.num_free_pages
        pool.quantize(request_id, self.config.quantize_factor)
        return pool.num_free_pages - before

    def _spill(self, pool: PagePool, request_id: int) -> tuple[int, float]:
        if not pool.can_spill(request_id) or not pool.page_table(request_id):
            return -1, 0.0
        before = pool.num_free_pages
        moved = pool.spill(request_id)
        return pool.num_free_pages - before, moved * self.page_bytes / self.host_bandwidth_bytes_s
