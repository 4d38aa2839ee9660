"""What admitting a request would cost: its prefill time at the current backlog, the per-token
decode time with it in the batch, its KV peak, and rolling-window p95 predictions of both.

The seed's section 5 estimates, per new request i:
- `prefill_time(p_i)` at the current backlog: `ahead` = the prompt tokens admitted and not
  yet computed, and those in the admission queue (they arrived earlier: once accepted they
  are due first), of the classes whose TTFT target is no looser than its own (earliest
  deadline first runs those first), plus its own prompt, drained in steps of `C =
  chunk_tokens` prompt tokens that each also decode the batch, which grows as the `n` requests
  ahead finish their prompts: `drain = (ahead + p_i) / C * step(C, pairs(C), B + n/2,
  ctx + ahead/2)`. Where the last `window` steps that left prompts waiting (the machine
  drained at full speed, decodes interleaved as the policy chose) drained slower than that,
  their measured rate is used instead: how much prompt work fits between decode deadlines
  is the policy's choice, which no static model knows;
- `per_token_decode_time(B + 1, ctx + p_i + g_i / 2)`: one step of the decode batch with the
  newcomer at its mean context, plus a prompt chunk while prompts are waiting;
- `KV_peak = kv_bytes(p_i + g_i)`, with `g_i` its `max_new_tokens` or, when outputs are not
  known in advance (`output_known=False`), the rolling p90 of observed output lengths.

The p95 predictions combine a rolling window of observations with the cost model:
- TTFT: every admitted request's predicted TTFT is kept; when its first token comes,
  `observed - predicted` enters a window of the last `window` residuals, and
  `ttft_p95 = model_ttft + p95(residual)`. The model carries the effect of admitting this
  request (its prompt joins the backlog); the window carries what the model misses (step
  granularity, the policy's ordering, preemptions). An additive residual, not a ratio: at light
  load the error is a step or two, which a ratio would blow up at heavy load.
- TPOT: each finished request's mean TPOT enters the window as a share of its own target, and
  `tpot_p95 = p95(share) * tightest target + (step with it - step without it)`: the observed
  tail where the batch stands now, plus the cost model's change from one more sequence. (A
  residual against the prediction at admission would not do: a deadline-paced scheduler
  spends TPOT slack on purpose, and the batch a request decodes in is not the one it met.)
Until a window holds `min_observations`, the model's figure stands alone.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass

import numpy as np

from refimpl.admission.window import RollingWindow
from refimpl.costmodel.step import StepTimeModel
from refimpl.kv.manager import KVView
from refimpl.sched.plan import StepPlan
from refimpl.sched.table import RequestRow, RequestTable

__all__ = ["LoadPredictor", "Prediction"]


@dataclass(frozen=True, slots=True)
class Prediction:
    """The estimates for one request if admitted now; seconds and tokens."""

    ttft_s: float  # cost model: time since arrival plus the backlog drained, own prompt last
    tpot_s: float  # cost model: one step of the batch with this request in it
    ttft_p95_s: float  # ttft_s plus the rolling p95 of TTFT residuals
    tpot_p95_s: float  # rolling p95 of TPOT / target, at the tightest target, plus the change
    output_tokens: int  # g_i: requested maximum, or predicted
    kv_peak_pages: int  # pages of prompt + output at full precision


class LoadPredictor:
    """Tracks the admitted load incrementally (O(1) per event) and predicts a newcomer."""

    def __init__(self, step_model: StepTimeModel, kv: KVView, *, window: int = 256,
                 min_observations: int = 20, chunk_tokens: int = 2048,
                 output_known: bool = True, default_output_tokens: int = 256) -> None:
        self.step_model, self.kv = step_model, kv
        self.min_observations = min_observations  # residuals before the window is trusted
        self.chunk_tokens = chunk_tokens  # prompt tokens per step when draining the backlog
        self.output_known = output_known
        self.default_output_tokens = default_output_tokens  # g_i before any output is seen
        # One window per SLO class (keyed by its target): a scheduler that serves a loose
        # class late on purpose must not make a tight class look late.
        self.window = window
        self.ttft_residual_s: dict[float, RollingWindow] = {}  # TTFT target -> residuals
        self.tpot_ratio: dict[float, RollingWindow] = {}  # TPOT target -> TPOT / target
        self.output_tokens = RollingWindow(window)
        # TTFT target -> [prompt tokens, requests]: admitted and not computed, or queued
        self.backlog: dict[float, list[int]] = {}
        self.queued: dict[float, list[int]] = {}
        self.reserved_pages = 0  # KV peaks of admitted, unfinished requests
        self.decode_context_tokens = 0  # context of the requests past their first token
        self._drain: deque[tuple[int, float]] = deque(maxlen=window)  # (tokens, s) per step
        self._drain_tokens, self._drain_s = 0, 0.0  # sums over `_drain`
        self._pending: dict[int, int] = {}  # request id -> its prompt tokens not yet computed
        self._decoding: set[int] = set()
        self._admitted: dict[int, tuple[float, int]] = {}  # id -> (predicted ttft, pages)
        self._tpot_targets: Counter[float] = Counter()  # TPOT target -> admitted requests

    # ---- the estimates -----------------------------------------------------------------------
    def expected_output_tokens(self, request: RequestRow) -> int:
        """g_i: the requested maximum, or the rolling p90 of observed outputs if unknown."""
        if self.output_known:
            return request.max_new_tokens
        if len(self.output_tokens) < self.min_observations:
            return self.default_output_tokens
        return max(1, math.ceil(self.output_tokens.percentile(90)))

    def predict(self, request: RequestRow, now_s: float,
                output_tokens: int | None = None) -> Prediction:
        """The estimates for `request` if admitted at `now_s` (O(SLO classes)), its output
        `output_tokens` if given (a degraded request's cap)."""
        step = self.step_model.step_time_parts
        output = (self.expected_output_tokens(request) if output_tokens is None
                  else output_tokens)
        batch, context = len(self._decoding), self.decode_context_tokens
        ahead = num_ahead = 0
        for target_s, (more_tokens, more_requests) in (*self.backlog.items(),
                                                       *self.queued.items()):
            if target_s <= request.slo.ttft_s:
                ahead, num_ahead = ahead + more_tokens, num_ahead + more_requests
        tokens = ahead + request.prompt_tokens
        chunk = min(self.chunk_tokens, tokens)
        # Each step drains a chunk and decodes the batch once; the requests ahead join the
        # batch as their prompts complete: on average half of them, with half their prompts.
        drain_s = tokens / chunk * step(chunk, _pairs(chunk), batch + num_ahead // 2,
                                        context + ahead // 2)
        if len(self._drain) >= self.min_observations and self._drain_tokens > 0:
            drain_s = max(drain_s, tokens * self._drain_s / self._drain_tokens)
        ttft_s = max(now_s - request.arrival_s, 0.0) + drain_s
        mixed = min(self.chunk_tokens, ahead)  # a prompt chunk rides along while prompts wait
        without_s = step(mixed, _pairs(mixed), batch, context)
        tpot_s = step(mixed, _pairs(mixed), batch + 1,
                      context + request.prompt_tokens + output // 2 + 1)
        ttft_p95_s = ttft_s
        residuals = self.ttft_residual_s.get(request.slo.ttft_s)
        if residuals is not None and len(residuals) >= self.min_observations:
            ttft_p95_s += residuals.percentile(95)
        tpot_p95_s = tpot_s
        tightest_s = self.tightest_tpot_s(request)
        ratios = self.tpot_ratio.get(tightest_s)  # the class most at risk, by its own record
        if ratios is not None and len(ratios) >= self.min_observations:
            tpot_p95_s = ratios.percentile(95) * tightest_s + tpot_s - without_s
        return Prediction(ttft_s, tpot_s, ttft_p95_s, tpot_p95_s, output,
                          self.kv.pages_for_tokens(request.prompt_tokens + output))

    def tightest_tpot_s(self, request: RequestRow) -> float:
        """The smallest TPOT target among admitted requests and this one (few classes)."""
        return min((request.slo.tpot_s, *self._tpot_targets))

    # ---- the admitted load -------------------------------------------------------------------
    @property
    def num_admitted(self) -> int:
        """Admitted requests not yet finished."""
        return len(self._admitted)

    def on_queue(self, request: RequestRow, sign: int) -> None:
        """Count a request's prompt into (`sign` 1) or out of (-1) the admission queue."""
        _count(self.queued, request.slo.ttft_s, sign * request.prompt_tokens, sign)

    def on_admit(self, request: RequestRow, prediction: Prediction) -> None:
        """Count an admitted request's prompt, KV peak and predictions."""
        _count(self.backlog, request.slo.ttft_s, request.prompt_tokens, 1)
        self._pending[request.request_id] = request.prompt_tokens
        self.reserved_pages += prediction.kv_peak_pages
        self._admitted[request.request_id] = (prediction.ttft_s, prediction.kv_peak_pages)
        self._tpot_targets[request.slo.tpot_s] += 1

    def observe(self, plan: StepPlan, finished: np.ndarray, duration_s: float,
                table: RequestTable) -> list[RequestRow]:
        """Learn from a committed step: prompt tokens computed, first tokens, ended requests
        (finished, or ended by the plan); returns the admitted ones that ended.

        Work the step repeated after a preemption is not counted against the backlog (it was
        never added): the residuals absorb it.
        """
        for i in plan.decode:
            if int(table.request_id[i]) in self._decoding:
                self.decode_context_tokens += 1
        for i, tokens in plan.prefill:
            request = table.row(i)
            key = request.request_id
            left = self._pending.get(key, 0)
            if left:
                done = min(left, tokens)
                self._pending[key] = left - done
                _count(self.backlog, request.slo.ttft_s, -done, -1 if done == left else 0)
            if request.num_generated == 1 and key in self._admitted and key not in self._decoding:
                self._window(self.ttft_residual_s, request.slo.ttft_s).add(
                    request.first_token_s - request.arrival_s - self._admitted[key][0])
                if not request.is_finished:
                    self._decoding.add(key)
                    self.decode_context_tokens += request.num_tokens
        if any(tokens for tokens, _ in self.backlog.values()):  # prompts wait: full speed
            self._add_drain(sum(t for _, t in plan.prefill), duration_s)
        ended = [table.row(i) for i in finished]
        return [request for request in ended if self._finish(request)]

    def _window(self, windows: dict[float, RollingWindow], target_s: float) -> RollingWindow:
        """The window of the class with target `target_s` (made on first use)."""
        window = windows.get(target_s)
        if window is None:
            window = windows[target_s] = RollingWindow(self.window)
        return window

    def _add_drain(self, tokens: int, duration_s: float) -> None:
        """One saturated step into the measured prefill rate (sums kept, O(1))."""
        if len(self._drain) == self._drain.maxlen:
            old_tokens, old_s = self._drain[0]
            self._drain_tokens -= old_tokens
            self._drain_s -= old_s
        self._drain.append((tokens, duration_s))
        self._drain_tokens += tokens
        self._drain_s += duration_s

    def _finish(self, request: RequestRow) -> bool:
        """Forget an ended request (once); whether it was admitted and unfinished."""
        key = request.request_id
        if key not in self._admitted:
            return False
        _, pages = self._admitted.pop(key)
        self.reserved_pages -= pages
        self._tpot_targets[request.slo.tpot_s] -= 1
        if self._tpot_targets[request.slo.tpot_s] <= 0:
            del self._tpot_targets[request.slo.tpot_s]
        left = self._pending.pop(key, 0)
        _count(self.backlog, request.slo.ttft_s, -left, -1 if left else 0)
        if key in self._decoding:
            self._decoding.discard(key)
            self.decode_context_tokens -= request.num_tokens
        self.output_tokens.add(request.num_generated)
        if request.num_generated >= 2:
            observed = (request.finish_s - request.first_token_s) / (request.num_generated - 1)
            if math.isfinite(observed):  # a request ended by the plan may have no finish yet
                self._window(self.tpot_ratio, request.slo.tpot_s).add(
                    observed / request.slo.tpot_s)
        return True


def _count(totals: dict[float, list[int]], target_s: float, tokens: int, requests: int) -> None:
    """Add `tokens` and `requests` to a class's [tokens, requests] (negative to take away)."""
    entry = totals.setdefault(target_s, [0, 0])
    entry[0] += tokens
    entry[1] += requests


def _pairs(chunk_tokens: int) -> int:
    """Causal pairs of a chunk starting a prompt (its attention cost)."""
    return chunk_tokens * (chunk_tokens + 1) // 2
