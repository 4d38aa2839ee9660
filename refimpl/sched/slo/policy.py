"""The seed's SLA-aware scheduler (`slo`): decode time reserved first, prompts in the slack.

One engine step is one scheduling tick (seed section 6):
1. **Tick budget.** The tick may last until the tightest decoding request's next token is due,
   `budget = clamp(min(deadline) - now, min_tick_s, max_tick_s)` (just `max_tick_s` when
   nothing decodes), and never less than what the step's fixed cost and a minimal prefill
   chunk take: the tightest TPOT sets the pace, loose classes let ticks grow.
2. **Decode window.** The cost model splits a decode step's time into a fixed part (weights,
   overhead) and a per-request part (`c_seq + c_kv * context`, by finite differences of the
   step model, so any `StepTimeModel` works). The greedy deadline knapsack
   (`refimpl.sched.slo.knapsack`) picks the decode batch by length bucket under the tick's
   decode time, the free KV pages and `max_batch`; requests due within `horizon_ticks` ticks are
   urgent. Time for `min_chunk` prompt tokens is held back when prompts wait, so prefill never
   starves.
3. **Prefill in the slack.** The adaptive chunk `C` is the largest number of prompt tokens
   whose step still fits the budget (binary search on the monotone step time), within
   `[min_chunk, max_chunk]` and the free pages; prompts take it in `PrefillQueue` order, so
   several short prompts share a tick and a long one is chunked. Tight decode slack or a big
   decode backlog shrink `C`; loose slack grows it.
4. **Kernels.** With a cost table, each decode micro-batch (one per bucket) and the prefill
   chunk get the fastest candidate within the SRAM budget; the names go into the plan.
5. **Pressure.** Above the KV watermark no new prompt starts (the ladder's first rung); past
   the higher rungs the seed's ladder caps low-priority long requests, quantizes pages, spills
   requests to the CPU tier (transfers charged to the step) and last preempts
   (`refimpl.sched.slo.pressure`); when urgent decodes still lack pages, the least important
   decoding request (largest priority number, then latest arrival) is preempted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from refimpl.config._validate import positive_int, positive_real
from refimpl.costmodel.step import StepTimeModel
from refimpl.errors import ConfigError
from refimpl.kv.ladder import LadderConfig
from refimpl.kv.manager import KVManager
from refimpl.sched.plan import StepPlan
from refimpl.sched.request import Request, RequestStatus
from refimpl.sched.slo.knapsack import (
    VALUE_LATENESS,
    VALUE_PER_TIME,
    select_decode_batch,
    tick_inputs,
)
from refimpl.sched.slo.pressure import PressureResponse, Relief
from refimpl.sched.slo.queues import DecodeSet, PrefillQueue

__all__ = ["SLOPolicy"]

MAX_HEADS = 64  # prompts a tick looks at in the prefill queue
# The ladder's thresholds for the slo policy: new prompts stop at 85% (the seed's watermark),
# low-priority long requests are capped from 90%, pages are quantized from 93%, spilled from
# 96%, and requests preempted only past 99%.
LADDER = LadderConfig()


class SLOPolicy:
    """Two deadline queues, decode reservation, adaptive chunked prefill, bucketed knapsack."""

    name = "slo"
    _select = staticmethod(select_decode_batch)  # the knapsack (a benchmark swaps in Python)

    def __init__(self, *, max_batch: int = 256, min_tick_s: float = 1e-3,
                 max_tick_s: float = 0.25, min_chunk: int = 64, max_chunk: int = 8192,
                 horizon_ticks: float = 2.0, first_bucket_tokens: int = 512,
                 value_mode: int = VALUE_PER_TIME, lateness_scale_s: float = 0.05,
                 kv_watermark: float = 0.85, cost_table=None,
                 ladder: LadderConfig | None = LADDER) -> None:
        positive_int("max_batch", max_batch)
        positive_int("min_chunk", min_chunk)
        positive_int("max_chunk", max_chunk)
        positive_int("first_bucket_tokens", first_bucket_tokens)
        for field in ("min_tick_s", "max_tick_s", "horizon_ticks", "lateness_scale_s",
                      "kv_watermark"):
            positive_real(field, locals()[field])
        if value_mode not in (VALUE_PER_TIME, VALUE_LATENESS):
            raise ConfigError("value_mode", value_mode, "w/time or w*lateness",
                              choices=(VALUE_PER_TIME, VALUE_LATENESS))
        if min_chunk > max_chunk:
            raise ConfigError("min_chunk", min_chunk, f"must be <= max_chunk={max_chunk}")
        if min_tick_s > max_tick_s:
            raise ConfigError("min_tick_s", min_tick_s, f"must be <= max_tick_s={max_tick_s}")
        self.max_batch, self.min_tick_s, self.max_tick_s = max_batch, min_tick_s, max_tick_s
        self.min_chunk, self.max_chunk, self.horizon_ticks = min_chunk, max_chunk, horizon_ticks
        self.first_bucket_tokens, self.value_mode = first_bucket_tokens, value_mode
        self.lateness_scale_s, self.kv_watermark = lateness_scale_s, kv_watermark
        self.cost_table = cost_table
        self.ladder_config = ladder  # None: no ladder, only preemption when pages run out
        self.pressure: PressureResponse | None = None
        self.prefill = PrefillQueue()
        self.decode = DecodeSet()
        self.kv: KVManager | None = None
        self.model: StepTimeModel | None = None
        self.last_budget_s = 0.0  # the tick budget of the last plan (for tests and plots)
        self._picks: dict[tuple[str, int, int], str] = {}  # memoized cost-table look-ups

    # ---- Policy protocol ---------------------------------------------------------------------
    def bind(self, kv: KVManager, step_model: StepTimeModel | None = None,
             cost_table=None) -> None:
        """Attach the KV cache, the step-time model (required) and the cost table (optional:
        without one the plan names no kernels)."""
        if step_model is None:
            raise ConfigError("step_model", None, "the slo policy plans with the cost model")
        self.kv, self.model = kv, step_model
        self.cost_table = cost_table if cost_table is not None else self.cost_table
        self._picks = {}
        model, hardware = getattr(step_model, "model", None), getattr(step_model, "hardware",
                                                                      None)
        if self.ladder_config is not None and model is not None and hardware is not None:
            self.pressure = PressureResponse(self.ladder_config,
                                             model.kv_bytes_per_token() * kv.page_size,
                                             hardware.host_bandwidth_bytes_s)
        probe = 4096  # context at which the per-request decode cost is linearised
        one = step_model.step_time_parts(0, 0, 1, probe)
        self._c_kv_s = (step_model.step_time_parts(0, 0, 1, 2 * probe) - one) / probe
        self._c_seq_s = max(step_model.step_time_parts(0, 0, 2, 2 * probe) - one
                            - self._c_kv_s * probe, 0.0)
        self._base_s = max(one - self._c_seq_s - self._c_kv_s * probe, 0.0)

    def add_request(self, request: Request, now_s: float) -> None:
        """Queue an arrived request for prefill."""
        self.prefill.push(request)

    def kv_actions(self) -> dict[str, int]:
        """How often each step of the KV ladder acted (for the run's metrics)."""
        if self.pressure is None:
            return {}
        return dict(Counter(str(action.step) for action in self.pressure.ladder.history))

    def num_waiting(self) -> int:
        """Requests with prompt tokens left (new, part-way, or recomputing)."""
        return len(self.prefill)

    def update_from_output(self, plan: StepPlan, finished: Sequence[Request],
                           now_s: float) -> None:
        """Move requests between the queues by what the step produced."""
        for request in plan.decode:
            if request.is_finished:
                self.decode.remove(request)
            else:
                self.decode.update(request)
        for request, _ in plan.prefill:
            if request.is_finished:
                continue
            if request.num_generated > 0 and request.num_uncomputed == 1:
                self.decode.add(request)  # its prompt is done: it decodes from now on
            else:
                self.prefill.push(request)  # more of the prompt to go

    # ---- the tick ----------------------------------------------------------------------------
    def schedule(self, now_s: float) -> StepPlan:
        """Plan one tick."""
        relief = self._relieve_pressure(now_s)
        decode = self.decode
        waiting = len(self.prefill) > 0
        est_s, buckets, kv_need, tick_s, urgent_s = tick_inputs(
            decode.context, decode.deadline_s, decode.active, now_s, self.min_tick_s,
            self.max_tick_s, self.horizon_ticks, self._c_seq_s, self._c_kv_s,
            self.kv.page_size, self.first_bucket_tokens)
        reserve_s = self._prefill_time(self.min_chunk) if waiting else 0.0
        # Urgent decodes are never squeezed out: the tick stretches to hold them all (with a
        # hair of slack, so that summing their times in another order cannot drop the last).
        budget_s = max(tick_s, self._base_s + urgent_s * (1 + 1e-9) + reserve_s)
        slots, decode_pages = self._choose_decodes(now_s, tick_s, est_s, buckets, kv_need,
                                                   budget_s - reserve_s - self._base_s)
        contexts = decode.context[slots] + 1  # each reads its cache and its newest token
        chosen = [decode.requests[slot] for slot in slots]
        pages_left = self.kv.num_free_pages - decode_pages
        chunks = self._choose_prefill(len(chosen), int(contexts.sum()), budget_s, pages_left,
                                      hold_new=bool(chosen)) if waiting else []
        if waiting and not chosen and not chunks and self._preempt_partial_prefill():
            return self.schedule(now_s)  # the pool was full of half-done prompts: retry
        self.last_budget_s = budget_s
        kernels = self._kernels(buckets[slots], chunks)
        return StepPlan(tuple(chosen), tuple(chunks), kernels, tuple(relief.finish),
                        relief.transfer_s)

    def _relieve_pressure(self, now_s: float) -> Relief:
        """Run the ladder (if any) and move the requests it touched between the queues."""
        if self.pressure is None:
            return Relief()
        relief = self.pressure.relieve(self.kv, self.decode, now_s)
        for request, _ in relief.finish:
            self.decode.remove(request)
        for request in relief.preempted:
            self.decode.remove(request)
            self._requeue(request)
        for request in self.pressure.spilled:
            if request in self.decode:
                self.decode.remove(request)  # cannot decode from the CPU tier
        for request in relief.restored:
            self.decode.add(request)
        return relief

    def _choose_decodes(self, now_s: float, tick_s: float, est_s: np.ndarray,
                        buckets: np.ndarray, kv_need: np.ndarray, window_s: float
                        ) -> tuple[np.ndarray, int]:
        """The decode batch's slots (knapsack under the window's time, the pages and
        `max_batch`) and the pages it takes; preempts while urgent ones lack pages."""
        decode = self.decode
        if not len(decode):
            return np.empty(0, np.int64), 0
        out = np.empty(len(decode.active), np.int64)
        stats = np.zeros(2, np.int64)  # pages taken, pages of urgent requests left out
        horizon_s = self.horizon_ticks * tick_s
        while True:
            count = self._select(
                decode.deadline_s, est_s, decode.weight, buckets, kv_need, decode.active,
                now_s, horizon_s, max(window_s, 0.0), self.kv.num_free_pages, self.max_batch,
                self.value_mode, self.lateness_scale_s, out, stats)
            slots = out[:count]
            short = stats[1] > self.kv.num_free_pages - stats[0]  # urgent ones lack pages
            if not short or not self._preempt_one(exclude=set(slots.tolist())):
                return slots, int(stats[0])

    def _choose_prefill(self, num_decode: int, decode_context: int, budget_s: float,
                        pages_left: int, hold_new: bool) -> list[tuple[Request, int]]:
        """Prompt chunks in queue order: the most tokens whose step fits the budget and pages.

        Above the KV watermark no new prompt starts while decodes run (`hold_new`): they free
        pages as they finish; with nothing decoding, holding back would only stall.
        """
        held_back = hold_new and self.kv.utilization() > self.kv_watermark
        step = self.model.step_time_parts
        page_size = self.kv.page_size

        def grown(take: int, computed: int, held: int) -> tuple[int, int]:
            """(pairs, new pages) of a chunk of `take` tokens after `computed` cached ones."""
            return (take * computed + take * (take + 1) // 2,
                    -(-(computed + take) // page_size) - held)

        # Prompts take the chunk in queue order, each whole before the next starts: pop them
        # one at a time while the step still fits (budget and pages), and binary-search the
        # tokens of the first one that does not fit whole; it ends the walk. Only prompts
        # looked at are popped (O(log N) each); the ones set aside go back.
        chunks: list[tuple[Request, int]] = []
        set_aside: list[Request] = []
        tokens = pairs = pages = 0
        looked = 0
        while self.prefill and tokens < self.max_chunk and looked < MAX_HEADS:
            request = self.prefill.pop()
            looked += 1  # bounded: a queue held back at the watermark costs a bounded look
            if held_back and request.kv_slot < 0:  # no new prompt starts above the mark
                set_aside.append(request)
                continue
            computed, held = request.num_computed, self.kv.pages_held(request)

            def fits(take: int, base=(tokens, pairs, pages), computed=computed, held=held):
                more_pairs, more_pages = grown(take, computed, held)
                return (base[2] + more_pages <= pages_left and step(
                    base[0] + take, base[1] + more_pairs, num_decode, decode_context)
                    <= budget_s)

            low, high = 0, min(request.num_uncomputed, self.max_chunk - tokens)
            cut_short = not fits(high)
            if cut_short:
                while low < high:  # the largest part of this prompt that fits
                    mid = (low + high + 1) // 2
                    low, high = (mid, high) if fits(mid) else (low, mid - 1)
            if high == 0:
                set_aside.append(request)
                break
            request.status = RequestStatus.RUNNING
            chunks.append((request, high))
            more_pairs, more_pages = grown(high, computed, held)
            tokens, pairs, pages = tokens + high, pairs + more_pairs, pages + more_pages
            if cut_short:
                break  # later prompts wait: queue order holds
        for request in set_aside:
            self.prefill.push(request)
        return chunks

    def _prefill_time(self, tokens: int) -> float:
        """Step time of a lone prompt chunk of `tokens`, less the step's fixed part."""
        return self.model.step_time_parts(tokens, tokens * (tokens + 1) // 2, 0, 0) - self._base_s

    def _preempt_one(self, exclude: set[int]) -> bool:
        """Free the least important decoding request's pages; it recomputes later."""
        decode = self.decode
        victims = [s for s in np.flatnonzero(decode.active) if int(s) not in exclude]
        if not victims:
            return False
        slot = max(victims, key=lambda s: (decode.requests[s].priority,
                                           decode.requests[s].arrival_s, int(s)))
        request = decode.requests[slot]
        decode.remove(request)
        self._requeue(request)
        return True

    def _preempt_partial_prefill(self) -> bool:
        """Free the pages of the last-queued prompt that holds some, so another can run."""
        holders = [r for r in self.prefill.requests() if r.kv_slot >= 0]
        if len(holders) < 2:
            return False  # a lone prompt always fits: the engine checked it at arrival
        victim = max(holders, key=lambda r: (r.next_token_deadline_s(), r.request_id))
        self.prefill.remove(victim)
        self._requeue(victim)
        return True

    def _requeue(self, request: Request) -> None:
        """Drop a request's KV and queue it to recompute (preemption by recomputation)."""
        self.kv.free(request)  # (a no-op when the ladder already freed its pages)
        request.num_computed = 0
        request.num_preemptions += 1
        request.status = RequestStatus.WAITING
        self.prefill.push(request)

    def _kernels(self, buckets: np.ndarray,
                 chunks: list[tuple[Request, int]]) -> tuple[str, ...]:
        """Fastest candidate per decode bucket (a micro-batch) and for the prefill chunk.

        A micro-batch is looked up at its size and its bucket's upper edge (the longest
        context the bucket holds), so the answers repeat and are memoized per tick's inputs.
        """
        if self.cost_table is None:
            return ()
        names = []
        if len(buckets):
            counts = np.bincount(buckets)
            for bucket in np.flatnonzero(counts):
                edge = self.first_bucket_tokens << int(bucket)  # [edge/2, edge) for bucket > 0
                names.append(self._lookup("decode", int(counts[bucket]), edge))
        if chunks:  # looked up at the next power of two: the picks change only between them
            tokens = sum(t for _, t in chunks)
            names.append(self._lookup("prefill", 1, 1 << (tokens - 1).bit_length()))
        return tuple(names)

    def _lookup(self, phase: str, batch: int, seq_len: int) -> str:
        """The cost table's pick for (phase, B, T), memoized."""
        key = (phase, batch, seq_len)
        name = self._picks.get(key)
        if name is None:
            name = self._picks[key] = self.cost_table.lookup(phase, batch, seq_len,
                                                             clamp=True)[0]
        return name
