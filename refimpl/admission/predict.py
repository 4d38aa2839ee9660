"""What admitting a request would cost: its prefill time at the current backlog, the per-token
decode time with it in the batch, its KV peak, and rolling-window p95 predictions of both.

The seed's section 5 estimates, per new request i:
- `prefill_time(p_i)` at the current backlog: the prompt tokens already admitted and not yet
  computed of the classes whose TTFT target is no looser than its own (under earliest-deadline
  order those were due first; looser classes arrived earlier are usually due later), plus its
  own prompt, drained
  in steps of `chunk_tokens` prompt tokens that also carry the current decode batch, timed by
  the cost model: `ceil-free (ahead + p_i) / C * step(C, pairs(C), B, ctx)`;
- `per_token_decode_time(B + 1, ctx + p_i + g_i / 2)`: one step of the decode batch with the
  newcomer at its mean context, plus a prompt chunk while prompts are waiting;
- `KV_peak = kv_bytes(p_i + g_i)`, with `g_i` its `max_new_tokens` or, when outputs are not
  known in advance (`output_known=False`), the rolling p90 of observed output lengths.

The p95 predictions are the cost model's figure plus the rolling p95 of its error: every
admitted request's prediction is kept, and when its first token (TTFT) or its last (mean TPOT)
is observed, `observed - predicted` enters a window of the last `window` residuals. So
`ttft_p95 = model_ttft + p95(residual)`: the model carries the effect of admitting this request
(its own prompt joins the backlog, its sequence joins the batch), the window carries what the
model misses (step granularity, the policy's ordering, preemptions). An additive residual, not a
ratio: at light load the error is a step or two, which a ratio would blow up at heavy load.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from refimpl.admission.window import RollingWindow
from refimpl.costmodel.step import StepTimeModel
from refimpl.kv.manager import KVManager
from refimpl.sched.plan import StepPlan
from refimpl.sched.request import Request

__all__ = ["LoadPredictor", "Prediction"]


@dataclass(frozen=True, slots=True)
class Prediction:
    """The estimates for one request if admitted now; seconds and tokens."""

    ttft_s: float  # cost model: time since arrival plus the backlog drained, own prompt last
    tpot_s: float  # cost model: one step of the batch with this request in it
    ttft_p95_s: float  # ttft_s plus the rolling p95 of TTFT residuals
    tpot_p95_s: float  # tpot_s plus the rolling p95 of TPOT residuals
    output_tokens: int  # g_i: requested maximum, or predicted
    kv_peak_pages: int  # pages of prompt + output at full precision


class LoadPredictor:
    """Tracks the admitted load incrementally (O(1) per event) and predicts a newcomer."""

    def __init__(self, step_model: StepTimeModel, kv: KVManager, *, window: int = 256,
                 min_observations: int = 20, chunk_tokens: int = 2048,
                 output_known: bool = True, default_output_tokens: int = 256) -> None:
        self.step_model, self.kv = step_model, kv
        self.min_observations = min_observations  # residuals before the window is trusted
        self.chunk_tokens = chunk_tokens  # prompt tokens per step when draining the backlog
        self.output_known = output_known
        self.default_output_tokens = default_output_tokens  # g_i before any output is seen
        self.ttft_residual_s = RollingWindow(window)
        self.tpot_residual_s = RollingWindow(window)
        self.output_tokens = RollingWindow(window)
        self.backlog_tokens: dict[float, int] = {}  # TTFT target -> admitted uncomputed prompt
        self.reserved_pages = 0  # KV peaks of admitted, unfinished requests
        self.decode_context_tokens = 0  # context of the requests past their first token
        self._pending: dict[int, int] = {}  # request id -> its prompt tokens not yet computed
        self._decoding: set[int] = set()
        self._admitted: dict[int, tuple[float, float, int]] = {}  # id -> (ttft, tpot, pages)

    # ---- the estimates -----------------------------------------------------------------------
    def expected_output_tokens(self, request: Request) -> int:
        """g_i: the requested maximum, or the rolling p90 of observed outputs if unknown."""
        if self.output_known:
            return request.max_new_tokens
        if len(self.output_tokens) < self.min_observations:
            return self.default_output_tokens
        return max(1, math.ceil(self.output_tokens.percentile(90)))

    def predict(self, request: Request, now_s: float) -> Prediction:
        """The estimates for `request` if admitted at `now_s` (O(SLO classes))."""
        step = self.step_model.step_time_parts
        output = self.expected_output_tokens(request)
        batch, context = len(self._decoding), self.decode_context_tokens
        ahead = sum(t for target_s, t in self.backlog_tokens.items()
                    if target_s <= request.slo.ttft_s)
        tokens = ahead + request.prompt_tokens
        chunk = min(self.chunk_tokens, tokens)
        # every step drains one chunk and decodes the batch once
        drain_s = tokens / chunk * step(chunk, _pairs(chunk), batch, context)
        ttft_s = max(now_s - request.arrival_s, 0.0) + drain_s
        mixed = min(self.chunk_tokens, ahead)  # a prompt chunk rides along while prompts wait
        tpot_s = step(mixed, _pairs(mixed), batch + 1,
                      context + request.prompt_tokens + output // 2 + 1)
        return Prediction(
            ttft_s, tpot_s, ttft_s + self._residual(self.ttft_residual_s),
            tpot_s + self._residual(self.tpot_residual_s), output,
            self.kv.pages_for_tokens(request.prompt_tokens + output))

    def _residual(self, window: RollingWindow) -> float:
        """p95 of the model's recent error; 0 until the window holds enough observations."""
        return window.percentile(95) if len(window) >= self.min_observations else 0.0

    # ---- the admitted load -------------------------------------------------------------------
    @property
    def num_admitted(self) -> int:
        """Admitted requests not yet finished."""
        return len(self._admitted)

    def on_admit(self, request: Request, prediction: Prediction) -> None:
        """Count an admitted request's prompt, KV peak and predictions."""
        target_s = request.slo.ttft_s
        self.backlog_tokens[target_s] = self.backlog_tokens.get(target_s, 0) + request.prompt_tokens
        self._pending[request.request_id] = request.prompt_tokens
        self.reserved_pages += prediction.kv_peak_pages
        self._admitted[request.request_id] = (prediction.ttft_s, prediction.tpot_s,
                                              prediction.kv_peak_pages)

    def observe(self, plan: StepPlan, finished: Sequence[Request]) -> None:
        """Learn from a committed step: prompt tokens computed, first tokens, finished requests.

        Work the step repeated after a preemption is not counted against the backlog (it was
        never added): the residuals absorb it.
        """
        for request in plan.decode:
            if request.request_id in self._decoding:
                self.decode_context_tokens += 1
        for request, tokens in plan.prefill:
            key = request.request_id
            left = self._pending.get(key, 0)
            if left:
                done = min(left, tokens)
                self._pending[key] = left - done
                self.backlog_tokens[request.slo.ttft_s] -= done
            if request.num_generated == 1 and key in self._admitted and key not in self._decoding:
                self.ttft_residual_s.add(request.first_token_s - request.arrival_s
                                         - self._admitted[key][0])
                if not request.is_finished:
                    self._decoding.add(key)
                    self.decode_context_tokens += request.num_tokens
        for request in finished:
            self._finish(request)

    def _finish(self, request: Request) -> None:
        key = request.request_id
        if key not in self._admitted:
            return
        _, tpot_s, pages = self._admitted.pop(key)
        self.reserved_pages -= pages
        self.backlog_tokens[request.slo.ttft_s] -= self._pending.pop(key, 0)
        if key in self._decoding:
            self._decoding.discard(key)
            self.decode_context_tokens -= request.num_tokens
        self.output_tokens.add(request.num_generated)
        if request.num_generated >= 2:
            observed = (request.finish_s - request.first_token_s) / (request.num_generated - 1)
            self.tpot_residual_s.add(observed - tpot_s)


def _pairs(chunk_tokens: int) -> int:
    """Causal pairs of a chunk starting a prompt (its attention cost)."""
    return chunk_tokens * (chunk_tokens + 1) // 2
