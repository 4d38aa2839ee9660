"""Admission control (the seed's section 5): accept, queue, degrade or reject each new request.

For every arrival the controller asks `LoadPredictor` what admitting it would cost and applies
these rules, first match wins (low-priority means `priority >= low_priority`):

1. TTFT. Predicted TTFT p95 over `ttft_headroom` (0.8) of the request's own TTFT target:
   reject (`ttft_p95`); waiting cannot bring the first token sooner. The headroom absorbs
   what the window has not seen yet (it learns a TTFT only a TTFT later), and costs little
   goodput under overload: the machine stays busy whatever the depth of the backlog.
2. KV peak. `projected = (pages reserved by admitted requests + this one's KV peak) / pool`.
   Above 1 the peaks could not coexist: a high-priority request is queued until pages return,
   a low-priority one rejected (`kv_watermark`). Above the watermark (85%) a long-context
   low-priority request is not accepted as it is: its generation is capped to fit under the
   watermark (degrade, it finishes `length_capped`), or, if that leaves under
   `min_capped_tokens`, it is rejected (`kv_watermark`).
3. TPOT. Predicted TPOT p95 over the tightest TPOT target among the admitted classes and its
   own: a low-priority request is rejected (`tpot_p95`); a high-priority one is queued
   (`tpot_p95`) until the batch shrinks (rejected if nothing admitted is left to shrink).
Low-priority requests must pass 1 within a further `low_priority_margin` (0.8) of the target,
so they give way first as the backlog grows (no margin on TPOT: one more sequence changes a
step by microseconds, and a scheduler that paces decodes to their deadlines keeps observed
TPOTs near the target by design). A queued request is decided again at every step; it leaves
with `queue_timeout` after `queue_wait_fraction` of its TTFT target, and an arrival finding the
queue full (`max_queue`) is rejected (`queue_full`). Requests that cannot fit even alone
(`exceeds_context`, `exceeds_kv_capacity`) never reach the controller: the engine rejects them.
A decision is O(SLO classes), queue upkeep O(max_queue) per step: both O(1) in N.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass

import numpy as np

from refimpl.admission.gate import Action, Decision, Gate
from refimpl.admission.predict import LoadPredictor, Prediction
from refimpl.config._validate import positive_int, positive_real
from refimpl.errors import ConfigError
from refimpl.sched.plan import StepPlan
from refimpl.sched.policy import PolicyContext
from refimpl.sched.table import RequestRow

__all__ = ["REASONS", "AdmissionConfig", "AdmissionController"]

# Every reason a request can be queued, degraded or refused for (the last two by the engine).
REASONS = ("ttft_p95", "tpot_p95", "kv_watermark", "queue_full", "queue_timeout",
           "exceeds_context", "exceeds_kv_capacity")


@dataclass(frozen=True)
class AdmissionConfig:
    """The controller's thresholds; fractions of the pool or of a target, tokens, counts."""

    kv_watermark: float = 0.85  # the seed's conservative watermark
    low_priority: int = 1  # priority numbers from here on are low priority
    long_context_tokens: int = 2048  # prompt + output from which a request is long-context
    min_capped_tokens: int = 16  # a cap shorter than this rejects instead of degrading
    ttft_headroom: float = 0.8  # accept while the predicted TTFT p95 is within this share
    low_priority_margin: float = 0.8  # low priority must fit within this share of a target
    max_queue: int = 64  # requests the admission queue holds
    queue_wait_fraction: float = 0.5  # longest wait in the queue, as a share of the TTFT target
    window: int = 256  # observations in each rolling window
    min_observations: int = 20  # residuals before the window's p95 is used
    chunk_tokens: int = 2048  # prompt tokens per step when predicting the backlog's drain
    output_known: bool = True  # max_new_tokens is the real output (else: predicted)

    def __post_init__(self) -> None:
        for name in ("kv_watermark", "ttft_headroom", "low_priority_margin",
                     "queue_wait_fraction"):
            positive_real(name, getattr(self, name))
        if self.kv_watermark > 1:
            raise ConfigError("kv_watermark", self.kv_watermark, "is a fraction of the pool")
        for name in ("long_context_tokens", "min_capped_tokens", "max_queue", "window",
                     "min_observations", "chunk_tokens"):
            positive_int(name, getattr(self, name))


class AdmissionController(Gate):
    """Decides at arrival, holds a bounded queue, and counts every decision by reason."""

    passes_everything = False

    def __init__(self, config: AdmissionConfig | None = None) -> None:
        self.config = config or AdmissionConfig()
        self.predictor: LoadPredictor | None = None
        self.queue: deque[RequestRow] = deque()  # arrival order: the oldest times out first
        self.counts: Counter[str] = Counter()  # "action" or "action:reason" -> requests

    def bind(self, ctx: PolicyContext) -> None:
        """Attach the run's context (the loop does, once)."""
        c = self.config
        self.ctx, self.kv = ctx, ctx.kv
        self.queue, self.counts = deque(), Counter()
        self.predictor = LoadPredictor(ctx.step_model, ctx.kv, window=c.window,
                                       min_observations=c.min_observations,
                                       chunk_tokens=c.chunk_tokens, output_known=c.output_known)

    def num_queued(self) -> int:
        """Requests held in the admission queue."""
        return len(self.queue)

    # ---- deciding ----------------------------------------------------------------------------
    def decide(self, request: RequestRow, now_s: float) -> Decision:
        """The decision for `request` at `now_s` (changes nothing)."""
        c = self.config
        p = self.predictor.predict(request, now_s)
        is_low = request.priority >= c.low_priority
        margin = c.low_priority_margin if is_low else 1.0
        num_pages = self.kv.num_pages
        reserved = self.predictor.reserved_pages
        # Queueing helps only while admitted requests run and will free pages or batch slots,
        # and only high priority waits: under pressure low priority gives way at once.
        waits = Action.QUEUE if self.predictor.num_admitted > 0 and not is_low else Action.REJECT
        if p.ttft_p95_s > c.ttft_headroom * margin * request.slo.ttft_s:
            return Decision(Action.REJECT, "ttft_p95")
        if reserved + p.kv_peak_pages > num_pages:
            return Decision(waits, "kv_watermark")
        if (reserved + p.kv_peak_pages > c.kv_watermark * num_pages and is_low
                and request.prompt_tokens + p.output_tokens >= c.long_context_tokens):
            return self._capped(request, p, int(c.kv_watermark * num_pages) - reserved)
        if p.tpot_p95_s > self.predictor.tightest_tpot_s(request):
            return Decision(waits, "tpot_p95")
        return Decision(Action.ACCEPT)

    def _capped(self, request: RequestRow, p: Prediction, free_pages: int) -> Decision:
        """Degrade to the output that keeps the KV peak under the watermark, or reject."""
        room_tokens = free_pages * self.kv.page_size - request.prompt_tokens
        cap = min(room_tokens, p.output_tokens, request.max_new_tokens - 1)
        if cap < self.config.min_capped_tokens:
            return Decision(Action.REJECT, "kv_watermark")
        return Decision(Action.DEGRADE, "kv_watermark", cap)

    # ---- committing --------------------------------------------------------------------------
    def on_arrival(self, i: int, now_s: float) -> Decision:
        """Decide on an arrival and commit it; a QUEUE decision leaves it in the queue (or,
        the queue being full, turns into a `queue_full` rejection)."""
        request = self.ctx.requests.row(i)
        decision = self.decide(request, now_s)
        if decision.action is Action.QUEUE and len(self.queue) >= self.config.max_queue:
            decision = Decision(Action.REJECT, "queue_full")
        if decision.action is Action.QUEUE:
            self.queue.append(request)
            self.predictor.on_queue(request, 1)
        self._commit(request, decision, now_s)
        return decision

    def poll(self, now_s: float) -> list[tuple[int, Decision]]:
        """Decide again on every queued request; those that leave the queue, with why."""
        leaving = []
        for request in list(self.queue):
            self.predictor.on_queue(request, -1)  # not ahead of itself
            decision = self.decide(request, now_s)
            waited_s = now_s - request.arrival_s
            if (decision.action is Action.QUEUE
                    and waited_s > self.config.queue_wait_fraction * request.slo.ttft_s):
                decision = Decision(Action.REJECT, "queue_timeout")
            if decision.action is Action.QUEUE:
                self.predictor.on_queue(request, 1)
                continue
            self.queue.remove(request)
            self._commit(request, decision, now_s)
            leaving.append((request.i, decision))
        return leaving

    def _commit(self, request: RequestRow, decision: Decision, now_s: float) -> None:
        key = decision.action.value + (f":{decision.reason}" if decision.reason else "")
        self.counts[key] += 1
        if decision.action in (Action.ACCEPT, Action.DEGRADE):
            output = decision.output_cap if decision.action is Action.DEGRADE else None
            self.predictor.on_admit(request, self.predictor.predict(request, now_s, output))

    def observe(self, plan: StepPlan, finished: np.ndarray, duration_s: float,
                now_s: float) -> None:
        """Learn from a committed step of `duration_s` (the loop calls it after each)."""
        self.predictor.observe(plan, finished, duration_s, self.ctx.requests)
