"""The serving loop: the policy plans a step, the executor runs it, the engine commits it.

One loop for both clocks (Vidur's discrete-event core, nano-vllm's plan/run/commit step). The
clock is virtual: it jumps to the next arrival when nothing can run, and advances by each
step's duration otherwise. Requests that arrive while a step runs wait for the next step.
Every request ends finished or rejected with a reason, and every KV page is back in the pool
when `run` returns; `run` checks both before returning. With an admission controller
(refimpl.admission), each arrival is accepted, queued, degraded or rejected before the policy
sees it, queued ones are decided again before every step, and the controller's time counts in
the step's decision time.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np

from refimpl.admission import Action, AdmissionController, Decision
from refimpl.config.model import ModelConfig
from refimpl.engine.executor import Executor
from refimpl.kv.manager import KVManager
from refimpl.metrics.records import FINISHED, REJECTED, RequestRecords, StepRecords
from refimpl.sched.plan import StepPlan
from refimpl.sched.policy import Policy
from refimpl.sched.request import Request, RequestStatus

__all__ = ["Engine", "EngineRun"]

Progress = Callable[[int, int], None]  # (requests ended, requests in all)


class EngineRun:
    """The records of one run, and the requests themselves for inspection."""

    def __init__(self, requests: list[Request], steps: StepRecords) -> None:
        self.request_list = requests
        self.requests = _request_records(requests)
        self.steps = steps


class Engine:
    """Drives a policy and an executor over a stream of requests."""

    def __init__(self, policy: Policy, executor: Executor, kv: KVManager,
                 model: ModelConfig, cost_table=None,
                 admission: AdmissionController | None = None) -> None:
        self.policy = policy
        self.admission = admission
        self.executor = executor
        self.kv = kv
        self.model = model
        policy.bind(kv, getattr(executor, "step_model", None), cost_table)
        if admission is not None:
            admission.bind(kv, executor.step_model)
        self._admission_s = 0.0  # the controller's wall time since the last step
        self._steps: dict[str, list] = {name: [] for name in _STEP_FIELDS}
        self._kernel_usage: Counter[str] = Counter()  # candidate name -> plans naming it

    def run(self, requests: Sequence[Request], progress: Progress | None = None) -> EngineRun:
        """Serve `requests` (in arrival order) to the end; returns the records."""
        pending = sorted(requests, key=lambda r: (r.arrival_s, r.request_id))
        num_ended = next_arrival = 0
        now = 0.0
        while True:
            while next_arrival < len(pending) and pending[next_arrival].arrival_s <= now:
                num_ended += self._arrive(pending[next_arrival], now)
                next_arrival += 1
            if self.admission is not None and self.admission.queue:
                num_ended += self._poll_admission(now)
            started = time.perf_counter()
            plan = self.policy.schedule(now)
            decision_s = time.perf_counter() - started + self._admission_s
            self._admission_s = 0.0
            if not plan:
                if next_arrival < len(pending):
                    now = max(now, pending[next_arrival].arrival_s)
                    continue
                self._reject_stranded(pending, now)
                break
            ended = [self._end(request, reason, now) for request, reason in plan.finish]
            self.kv.grow([*plan.decode, *(r for r, _ in plan.prefill)],
                         [1] * len(plan.decode) + [t for _, t in plan.prefill])
            duration_s = self.executor.execute(plan) + plan.extra_s
            finished = [*ended, *self._commit(plan, now, now + duration_s)]
            self.policy.update_from_output(plan, finished, now + duration_s)
            if self.admission is not None:
                self.admission.observe(plan, finished, duration_s)
            self._record_step(plan, now, duration_s, decision_s)
            now += duration_s
            num_ended += len(finished)
            if progress is not None and finished:
                progress(num_ended, len(pending))
        self._check_nothing_lost(pending)
        return EngineRun(pending, StepRecords(
            **{name: np.asarray(values, dtype=_STEP_FIELDS[name])
               for name, values in self._steps.items()},
            kv_total_pages=self.kv.pool.num_pages, kernel_usage=dict(self._kernel_usage),
            admission_counts=dict(self.admission.counts) if self.admission else {},
            kv_actions=self.policy.kv_actions() if hasattr(self.policy, "kv_actions") else {},
        ))

    def _arrive(self, request: Request, now: float) -> int:
        """Hand an arrived request to the policy, or reject it at once; returns 1 if rejected."""
        total = request.prompt_tokens + request.max_new_tokens
        if total > self.model.max_context:
            return self._reject(request, "exceeds_context", request.arrival_s)
        if self.kv.pages_for_tokens(total) > self.kv.pool.num_pages:
            return self._reject(request, "exceeds_kv_capacity", request.arrival_s)
        if self.admission is None:
            self.policy.add_request(request, now)
            return 0
        started = time.perf_counter()
        decision = self.admission.admit(request, now)
        self._admission_s += time.perf_counter() - started
        return self._apply(request, decision, now)

    def _poll_admission(self, now: float) -> int:
        """Decide again on the queued requests; returns how many were rejected."""
        started = time.perf_counter()
        leaving = self.admission.poll(now)
        self._admission_s += time.perf_counter() - started
        return sum(self._apply(request, decision, now) for request, decision in leaving)

    def _apply(self, request: Request, decision: Decision, now: float) -> int:
        """Carry out an admission decision; returns 1 if it rejected the request."""
        if decision.action is Action.REJECT:
            return self._reject(request, decision.reason, now)
        if decision.action is not Action.QUEUE:  # accepted, maybe degraded
            self.policy.add_request(request, now)
        return 0

    def _close(self, request: Request, status: RequestStatus, reason: str,
               now: float) -> Request:
        """Put a request in its terminal state, with its reason and time; free its pages."""
        request.status = status
        request.finish_reason = reason
        request.finish_s = now
        self.kv.free(request)
        return request

    def _reject(self, request: Request, reason: str, now: float) -> int:
        self._close(request, RequestStatus.REJECTED, reason, now)
        return 1

    def _end(self, request: Request, reason: str, now: float) -> Request:
        """Finish a request the policy ends early (e.g. `length_capped`), its output kept."""
        return self._close(request, RequestStatus.FINISHED, reason, now)

    def _commit(self, plan: StepPlan, start_s: float, end_s: float) -> list[Request]:
        """Count the computed tokens; emit output tokens at `end_s`; finish completed requests."""
        finished = []
        for request, tokens in (*((r, 1) for r in plan.decode), *plan.prefill):
            if math.isnan(request.first_scheduled_s):
                request.first_scheduled_s = start_s
            request.num_computed += tokens
            if request.num_computed < request.num_tokens:
                continue  # a prompt chunk short of the end: no token yet
            request.num_generated += 1
            if request.num_generated == 1:
                request.first_token_s = end_s
            request.last_token_s = end_s
            if request.num_generated >= request.max_new_tokens:
                reason = request.extra.get("finish_reason", "completed")
                finished.append(self._close(request, RequestStatus.FINISHED, reason, end_s))
        return finished

    def _record_step(self, plan: StepPlan, start_s: float, duration_s: float,
                     decision_s: float) -> None:
        steps = self._steps
        steps["start_s"].append(start_s)
        steps["duration_s"].append(duration_s)
        steps["num_decode"].append(len(plan.decode))
        steps["num_prefill_tokens"].append(sum(t for _, t in plan.prefill))
        steps["num_prefill_chunks"].append(len(plan.prefill))
        steps["kv_used_pages"].append(self.kv.pool.num_used_pages)
        queued = self.admission.num_queued() if self.admission is not None else 0
        steps["num_waiting"].append(self.policy.num_waiting() + queued)
        steps["decision_s"].append(decision_s)
        self._kernel_usage.update(plan.kernels)

    def _reject_stranded(self, requests: Sequence[Request], now: float) -> None:
        """Requests the policy holds but can never run (nothing runs, nothing will arrive)."""
        for request in requests:
            if not request.is_finished:
                self._reject(request, "unschedulable", now)

    def _check_nothing_lost(self, requests: Sequence[Request]) -> None:
        unfinished = [r.request_id for r in requests if not r.is_finished]
        if unfinished or self.kv.pool.num_free_pages != self.kv.pool.num_pages:
            raise AssertionError(  # an engine or policy bug, never the user's input
                f"run ended with requests {unfinished[:5]} unfinished and "
                f"{self.kv.pool.num_used_pages} KV pages still held"
            )


_STEP_FIELDS = {
    "start_s": np.float64, "duration_s": np.float64, "num_decode": np.int64,
    "num_prefill_tokens": np.int64, "num_prefill_chunks": np.int64,
    "kv_used_pages": np.int64, "num_waiting": np.int64, "decision_s": np.float64,
}


def _request_records(requests: Sequence[Request]) -> RequestRecords:
    def column(getter, dtype):
        return np.fromiter((getter(r) for r in requests), dtype=dtype, count=len(requests))

    def text(getter):
        values = np.empty(len(requests), dtype=object)
        values[:] = [getter(r) for r in requests]
        return values

    return RequestRecords(
        request_id=column(lambda r: r.request_id, np.int64),
        arrival_s=column(lambda r: r.arrival_s, np.float64),
        prompt_tokens=column(lambda r: r.prompt_tokens, np.int64),
        max_new_tokens=column(lambda r: r.max_new_tokens, np.int64),
        priority=column(lambda r: r.priority, np.int64),
        slo_class=text(lambda r: r.slo_class),
        ttft_slo_s=column(lambda r: r.slo.ttft_s, np.float64),
        tpot_slo_s=column(lambda r: r.slo.tpot_s, np.float64),
        status=text(lambda r: FINISHED if r.status is RequestStatus.FINISHED else REJECTED),
        reason=text(lambda r: r.finish_reason),
        first_scheduled_s=column(lambda r: r.first_scheduled_s, np.float64),
        first_token_s=column(lambda r: r.first_token_s, np.float64),
        finish_s=column(lambda r: r.finish_s, np.float64),
        num_generated=column(lambda r: r.num_generated, np.int64),
        num_preemptions=column(lambda r: r.num_preemptions, np.int64),
    )
