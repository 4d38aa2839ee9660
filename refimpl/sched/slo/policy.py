"""The seed's SLA-aware scheduler (`slo`): decode time reserved first, prompts in the slack.

One engine step is one scheduling tick (seed section 6), each part in its own module:
1. **Pressure** (`pressure`). Above the KV watermark no new prompt starts (the ladder's first
   rung); past the higher rungs the seed's ladder caps low-priority long requests, quantizes
   pages, spills requests to the CPU tier and last preempts; below it, spilled requests come
   back.
2. **Tick budget** (`budget`). The tick may last until the tightest decoding request's next
   token is due, stretched to hold every urgent decode and a minimal prompt chunk, and, while
   the most urgent prompt would miss at that pace, the prompt whole, within the decodes'
   slack on their mean TPOT (what they banked, and what quiet steps should bank back).
3. **Decode window** (`decode`). The bucketed deadline knapsack picks the decode batch under
   the tick's decode time, the free pages and `max_batch`; when urgent decodes still lack
   pages, the least important decoding request is preempted.
4. **Prefill in the slack** (`prefill`). The adaptive chunk: the most prompt tokens, in
   deadline order, whose step still fits the budget and the pages.
5. **Kernels** (`kernels`). With a cost table, the fastest candidate per decode micro-batch
   and for the prefill chunk.
When nothing can run and half-done prompts fill the pool, the last-queued one is preempted
and the tick planned again (`prefill.partial_prefill_victim`).

`schedule` changes nothing: each decision is drafted (`draft.TickDraft`) on a projection of
the KV cache and views of the two queues, so a later decision of the same tick sees the
earlier ones as carried out (a request preempted in the plan may start its prompt again in
it). Once the loop has committed the plan, `update_from_output` takes the draft's moves on and
moves requests by what the step produced.
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

import numpy as np

from refimpl.config._validate import positive_int, positive_real
from refimpl.costmodel.choose import compiled_coefficients
from refimpl.errors import ConfigError
from refimpl.kv.ladder import LadderConfig, LadderStep
from refimpl.sched.plan import StepPlan
from refimpl.sched.policy import PYTHON, SLO, Policy, PolicyContext
from refimpl.sched.slo.budget import (
    learned_output,
    learned_quiet_share,
    linearise,
    plan_tick,
)
from refimpl.sched.slo.compiled import state as C
from refimpl.sched.slo.decode import choose_decodes
from refimpl.sched.slo.draft import TickDraft
from refimpl.sched.slo.kernels import KernelPicks
from refimpl.sched.slo.knapsack import (
    VALUE_LATENESS,
    VALUE_PER_TIME,
    select_decode_batch,
)
from refimpl.sched.slo.prefill import choose_prefill, partial_prefill_victim
from refimpl.sched.slo.pressure import draft_relief
from refimpl.sched.slo.queues import (
    DecodeSet,
    PrefillQueue,
    next_token_deadline_s,
    next_token_deadlines_s,
    prefill_key,
)
from refimpl.sched.table import FINISHED

__all__ = ["LADDER", "CompiledSLO", "PythonSLOPolicy", "SLOPolicy"]

# The ladder's thresholds for the slo policy: new prompts stop at 85% (the seed's watermark),
# low-priority long requests are capped from 90%, pages are quantized from 93%, spilled from
# 96%, and requests preempted only past 99%.
LADDER = LadderConfig()
# The methods of the decision: a subclass that overrides one runs the Python policy.
_DECISION = ("schedule", "add_request", "update_from_output", "_relieve_pressure", "_select")
_STEP_NAMES = tuple(str(step) for step in LadderStep)  # by the ladder kernel's step codes


class CompiledSLO(NamedTuple):
    """A bound compiled `slo` policy: its state, and the kernel names its picks index."""

    state: C.SLOState
    kernel_names: tuple[str, ...]


class SLOPolicy(Policy):
    """Two deadline queues, decode reservation, adaptive chunked prefill, bucketed knapsack."""

    name = "slo"
    prefill_order = "deadline"
    code = SLO  # the compiled decision; bound to another step model than the roofline (or
    # as a subclass that changes the decision), the Python one (PYTHON)
    python = False  # True: always the Python decision (`PythonSLOPolicy`, the oracle)
    compiled: CompiledSLO | None = None
    _select = staticmethod(select_decode_batch)  # the knapsack (a benchmark swaps in Python)

    def __init__(self, *, max_batch: int = 256, min_tick_s: float = 1e-3,
                 max_tick_s: float = 0.25, min_chunk: int = 64, max_chunk: int = 8192,
                 horizon_ticks: float = 2.0, first_bucket_tokens: int = 512,
                 value_mode: int = VALUE_PER_TIME, lateness_scale_s: float = 0.05,
                 kv_watermark: float = 0.85, loan_quantile: float = 0.25, cost_table=None,
                 ladder: LadderConfig | None = LADDER) -> None:
        positive_int("max_batch", max_batch)
        positive_int("min_chunk", min_chunk)
        positive_int("max_chunk", max_chunk)
        positive_int("first_bucket_tokens", first_bucket_tokens)
        for field in ("min_tick_s", "max_tick_s", "horizon_ticks", "lateness_scale_s",
                      "kv_watermark", "loan_quantile"):
            positive_real(field, locals()[field])
        if kv_watermark > 1:
            raise ConfigError("kv_watermark", kv_watermark, "is a share of the pool, at most 1")
        if value_mode not in (VALUE_PER_TIME, VALUE_LATENESS):
            raise ConfigError("value_mode", value_mode, "w/time or w*lateness",
                              choices=(VALUE_PER_TIME, VALUE_LATENESS))
        if ladder is not None and not isinstance(ladder, LadderConfig):
            raise ConfigError("ladder", ladder, "must be a refimpl.kv.LadderConfig or None")
        if loan_quantile >= 1:
            raise ConfigError("loan_quantile", loan_quantile, "is a quantile of the output "
                              "lengths, between 0 and 1 (both excluded)")
        if min_chunk > max_chunk:
            raise ConfigError("min_chunk", min_chunk, f"must be <= max_chunk={max_chunk}")
        if min_tick_s > max_tick_s:
            raise ConfigError("min_tick_s", min_tick_s, f"must be <= max_tick_s={max_tick_s}")
        self.max_batch, self.min_tick_s, self.max_tick_s = max_batch, min_tick_s, max_tick_s
        self.min_chunk, self.max_chunk, self.horizon_ticks = min_chunk, max_chunk, horizon_ticks
        self.first_bucket_tokens, self.value_mode = first_bucket_tokens, value_mode
        self.lateness_scale_s, self.kv_watermark = lateness_scale_s, kv_watermark
        # the output quantile a decode borrows step time against (refimpl.sched.slo.budget)
        self.loan_quantile = loan_quantile
        self.cost_table = cost_table
        self.ladder = ladder  # None: no ladder, only preemption when pages run out
        self._reset()

    def _reset(self) -> None:
        self.prefill = PrefillQueue()
        self.decode = DecodeSet()
        self.spilled: list[int] = []  # rows in the CPU tier, in spill order
        self._holding = False  # above the ladder's first watermark when it last ran
        self._actions: Counter[str] = Counter()  # ladder step -> actions committed
        self._drafted: tuple[StepPlan, TickDraft] | None = None  # the last plan, its draft
        # what the tick budget lends on (refimpl.sched.slo.budget): the share of steps without
        # a prompt chunk, over `_num_steps` steps, and the loan quantile of the finished outputs
        self.quiet_share, self.output_quantile, self._num_steps = 0.0, 0.0, 0

    # ---- Policy protocol ---------------------------------------------------------------------
    def bind(self, ctx: PolicyContext) -> None:
        """Attach the run's context; the step-time model is required, the cost table optional
        (without one the plan names no kernels)."""
        if ctx.step_model is None:
            raise ConfigError("step_model", None, "the slo policy plans with the cost model")
        super().bind(ctx)
        self.cost_table = ctx.cost_table if ctx.cost_table is not None else self.cost_table
        self._picks = KernelPicks(self.cost_table, self.first_bucket_tokens)
        self._costs = linearise(ctx.step_model)
        self._reset()
        kind = type(self)
        compiles = (not self.python and ctx.arrays is not None
                    and compiled_coefficients(ctx.step_model) is not None
                    and all(getattr(kind, name) is getattr(SLOPolicy, name)
                            for name in _DECISION))
        self.compiled = self._compile(ctx) if compiles else None
        self.code = SLO if compiles else PYTHON

    def _compile(self, ctx: PolicyContext) -> CompiledSLO:
        """The compiled decision's state for this run (`compiled.state.for_policy`)."""
        state, names = C.for_policy(self, ctx.arrays.ints, self._picks, self._costs,
                                    self.ladder if self.ladder is not None else LadderConfig())
        return CompiledSLO(state, names)

    @property
    def max_running(self) -> int:
        """The most requests it runs at once: `max_batch` (a new prompt joins the decodes
        only below it)."""
        return self.max_batch

    def add_request(self, i: int, now_s: float) -> None:
        """Queue an admitted request for prefill."""
        self.prefill.push(i, prefill_key(self.ctx.requests, i, 0))

    def num_waiting(self) -> int:
        """Requests with prompt tokens left (new, part-way, or recomputing)."""
        if self.code == SLO and self.compiled is not None:
            return int(self.compiled.state.st[C.HEAP_LEN])
        return len(self.prefill)

    def kv_actions(self) -> dict[str, int]:
        """How often each step of the KV ladder acted (for the run's metrics)."""
        if self.code == SLO and self.compiled is not None:
            counts = self.compiled.state.st[C.COUNTS:C.COUNTS + len(_STEP_NAMES)].tolist()
            return {name: n for name, n in zip(_STEP_NAMES, counts, strict=True) if n}
        self._settle_empty_plan()
        return dict(self._actions)

    # ---- the tick ----------------------------------------------------------------------------
    def schedule(self, now_s: float) -> StepPlan:
        """Plan one tick; changes nothing (the module doc)."""
        self._settle_empty_plan()
        ctx = self.ctx
        draft = TickDraft(ctx, self.decode, self.prefill, self.spilled, self._holding)
        while True:
            self._relieve_pressure(draft, now_s)
            waiting = draft.num_waiting() > 0
            tick = plan_tick(self, draft.decode, self._costs, ctx.step_model,
                             ctx.kv.page_size, now_s, waiting,
                             draft.head() if waiting else None, ctx.requests)
            slots, decode_pages = choose_decodes(self, draft, tick, now_s)
            decode = draft.decode
            chunks = choose_prefill(
                self, draft, ctx.step_model, tick.budget_s, len(slots),
                int((decode.context[slots] + 1).sum()),  # each reads its cache, newest token
                draft.kv.free - decode_pages, hold_new=len(slots) > 0) if waiting else []
            if waiting and not len(slots) and not chunks:
                victim = partial_prefill_victim(draft)
                if victim >= 0:  # the pool was full of half-done prompts: free one, again
                    draft.preempt_queued(victim)
                    continue
            break
        self.tick_budget_s = tick.budget_s
        plan = draft.plan(tuple(decode.rows[slots].tolist()), tuple(chunks),
                          self._picks.names(tick.buckets[slots], chunks))
        self._drafted = (plan, draft)
        return plan

    def _relieve_pressure(self, draft: TickDraft, now_s: float) -> None:
        """Draft the ladder's actions (if any) and move the requests they touch."""
        if self.ladder is not None:
            draft_relief(self.ladder, draft, now_s)

    # ---- after the step ----------------------------------------------------------------------
    def update_from_output(self, plan: StepPlan, finished: np.ndarray, now_s: float) -> None:
        """Take the plan's drafted moves on, then move requests by what the step produced."""
        drafted, self._drafted = self._drafted, None
        if drafted is not None and drafted[0] == plan:
            requeued = set(self._take_draft(drafted[1]))
        else:
            requeued = set(self._take_plan(plan))
        requests = self.ctx.requests
        status, generated = requests.status, requests.num_generated
        computed = requests.num_computed
        prefilled = [i for i, _ in plan.prefill]
        again = set(prefilled)
        for i in plan.preempt:  # preempted ones wait to recompute (unless they started again)
            if i in requeued and i not in again:
                self.prefill.push(i, prefill_key(requests, i, int(computed[i])))
        self.prefill.take(i for i in prefilled if i not in requeued)
        self._num_steps += 1
        self.quiet_share = learned_quiet_share(self.quiet_share, not plan.prefill,
                                               self._num_steps)
        decoded = np.asarray(plan.decode, np.int64)
        ended = status[decoded] >= FINISHED
        for i in decoded[ended].tolist():
            self.decode.remove(i)
            self.output_quantile = learned_output(self.output_quantile, int(generated[i]),
                                                  self.loan_quantile)
        decoded = decoded[~ended]
        self.decode.update_rows(decoded, next_token_deadlines_s(requests, decoded),
                                computed[decoded])
        for i in prefilled:
            if status[i] >= FINISHED:
                continue
            if generated[i] > 0 and requests.num_uncomputed(i) == 1:  # its prompt is done
                self.decode.add(i, next_token_deadline_s(requests, i), int(computed[i]),
                                float(requests.weight[i]))
            else:
                self.prefill.push(i, prefill_key(requests, i, int(computed[i])))

    def _take_draft(self, draft: TickDraft) -> list[int]:
        """Adopt the moves the plan's draft made; returns the rows it (re)queued."""
        self.decode.adopt(draft.decode)
        for i in draft.unqueued:
            self.prefill.remove(i)
        self.spilled = draft.spilled
        self._holding = draft.holding
        self._actions.update(draft.counts)
        return list(draft.requeued)

    def _take_plan(self, plan: StepPlan) -> list[int]:
        """The moves of a plan this policy did not just draft, from the plan alone."""
        queued = {i for _, i in self.prefill.entries()}
        counts = Counter({str(LadderStep.SPILL): len(plan.spill),
                          str(LadderStep.QUANTIZE): len(plan.quantize)})
        for i, reason in plan.finish:
            if i in self.decode:
                self.decode.remove(i)
            if reason == str(LadderStep.CAP_LENGTH):
                counts[reason] += 1
        for i in plan.preempt:
            if i in self.decode:
                self.decode.remove(i)
            elif i in queued:
                self.prefill.remove(i)
        for i in plan.spill:
            if i in self.decode:
                self.decode.remove(i)
            self.spilled.append(i)
        requests = self.ctx.requests
        for i in plan.restore:
            self.spilled.remove(i)
            self.decode.add(i, next_token_deadline_s(requests, i),
                            int(requests.num_computed[i]), float(requests.weight[i]))
        self._actions.update(+counts)  # (+: only the steps that acted)
        return list(plan.preempt)

    def _settle_empty_plan(self) -> None:
        """An empty plan is committed by doing nothing: what its draft decided of the
        ladder's state (holding new prompts) stands."""
        if self._drafted is not None and not self._drafted[0]:
            draft = self._drafted[1]
            self._holding = draft.holding
            self._actions.update(draft.counts)
            self._drafted = None


class PythonSLOPolicy(SLOPolicy):
    """The `slo` policy's decision in Python, whatever the step model: the compiled one's
    oracle (the same plans, step for step)."""

    code = PYTHON
    python = True
