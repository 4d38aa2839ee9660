"""The scheduling-policy protocol, the shared queue bookkeeping, and the factory by name.

A policy owns the waiting and running requests. Each step the engine calls `schedule(now_s)`
for a `StepPlan`, runs it, commits the tokens, and calls `update_from_output` with the requests
that finished. Planning may preempt (free a running request's pages so it recomputes later),
as vLLM does; it must never schedule more pages than are free, since the engine grows every
scheduled request's KV in one call after planning.

To try a policy of your own, subclass `QueuePolicy` (or implement the protocol) and pass the
class, or an instance, wherever a policy name is accepted.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from refimpl.costmodel.step import StepTimeModel
from refimpl.errors import ConfigError
from refimpl.kv.manager import KVManager
from refimpl.sched.plan import StepPlan
from refimpl.sched.request import Request, RequestStatus

if TYPE_CHECKING:
    from refimpl.costmodel.table import CostTable

__all__ = ["BASELINES", "POLICIES", "Policy", "QueuePolicy", "make_policy"]


@runtime_checkable
class Policy(Protocol):
    """What the engine needs from a scheduling policy."""

    name: str

    def bind(self, kv: KVManager, step_model: StepTimeModel | None = None,
             cost_table: CostTable | None = None) -> None:
        """Attach what the policy plans against (once, before the first step): the KV cache,
        the step-time model and, where there is one, the kernels' cost table."""

    def add_request(self, request: Request, now_s: float) -> None:
        """Take an arrived request into the waiting queue."""

    def schedule(self, now_s: float) -> StepPlan:
        """Plan the next step; an empty plan means nothing can run now."""

    def update_from_output(self, plan: StepPlan, finished: Sequence[Request],
                           now_s: float) -> None:
        """Learn which requests finished in the step just run."""

    def num_waiting(self) -> int:
        """Requests queued, not running."""


class QueuePolicy:
    """A waiting deque and a running list, with preemption by recomputation (vLLM's default)."""

    name = "queue"

    def __init__(self, *, max_num_seqs: int = 256, token_budget: int = 2048) -> None:
        for field, value in (("max_num_seqs", max_num_seqs), ("token_budget", token_budget)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(field, value, "must be an integer >= 1")
        self.max_num_seqs = max_num_seqs  # most requests running at once
        self.token_budget = token_budget  # most tokens computed in one step
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.kv: KVManager | None = None

    def bind(self, kv: KVManager, step_model: StepTimeModel | None = None,
             cost_table: CostTable | None = None) -> None:
        """Attach the KV cache, the step-time model and the cost table (the baselines use
        only the KV cache; a subclass may plan with the others)."""
        self.kv, self.step_model, self.cost_table = kv, step_model, cost_table

    def add_request(self, request: Request, now_s: float) -> None:
        """Queue an arrived request at the back."""
        self.waiting.append(request)

    def num_waiting(self) -> int:
        """Requests queued, not running."""
        return len(self.waiting)

    def update_from_output(self, plan: StepPlan, finished: Sequence[Request],
                           now_s: float) -> None:
        """Drop finished requests from the running list."""
        if finished:
            self.running = [r for r in self.running if not r.is_finished]

    def schedule(self, now_s: float) -> StepPlan:
        """Plan a step (subclasses decide how)."""
        raise NotImplementedError

    # ---- helpers for subclasses --------------------------------------------------------------
    def budgeted_step(self, order: Sequence[Request]) -> StepPlan:
        """Running requests in `order`, then waiting ones FCFS, under the token budget.

        Each running request gets the tokens it still needs (one for a decode; the rest of its
        prompt, chunked to the budget, otherwise). Where its pages do not fit, the newest
        running request not yet scheduled is preempted, or failing that itself. Waiting
        requests start in arrival order until one does not fit (no skipping ahead), and none
        starts in a step that preempted.
        """
        budget, free = self.token_budget, self.kv.num_free_pages
        decode: list[Request] = []
        prefill: list[tuple[Request, int]] = []
        scheduled: set[int] = set()
        preempted = False
        for request in order:
            if budget == 0:
                break
            if request.status is not RequestStatus.RUNNING:  # preempted for an earlier one
                continue
            tokens = min(request.num_uncomputed, budget)
            need = self.kv.pages_needed(request, tokens)
            while need > free:
                victim = self._newest_unscheduled(scheduled, request)
                free += self.kv.pages_held(victim)
                self.preempt(victim)
                preempted = True
                if victim is request:
                    break
            if request.status is not RequestStatus.RUNNING:
                continue
            free -= need
            budget -= tokens
            scheduled.add(request.request_id)
            if request.is_decoding:
                decode.append(request)
            else:
                prefill.append((request, tokens))
        while (self.waiting and budget > 0 and not preempted
               and len(self.running) < self.max_num_seqs):
            request = self.waiting[0]
            tokens = min(request.num_uncomputed, budget)
            need = self.kv.pages_needed(request, tokens)
            if need > free:
                break
            self.admit(request)
            free -= need
            budget -= tokens
            prefill.append((request, tokens))
        return StepPlan(tuple(decode), tuple(prefill))

    def _newest_unscheduled(self, scheduled: set[int], fallback: Request) -> Request:
        for request in reversed(self.running):
            if request.request_id not in scheduled and request is not fallback:
                return request
        return fallback

    def preempt(self, request: Request) -> None:
        """Free a running request's KV and put it at the front of the queue to recompute."""
        self.running.remove(request)
        self.kv.free(request)
        request.num_computed = 0
        request.num_preemptions += 1
        request.status = RequestStatus.WAITING
        self.waiting.appendleft(request)

    def admit(self, request: Request) -> None:
        """Move the head of the waiting queue to the running list."""
        self.waiting.remove(request)
        request.status = RequestStatus.RUNNING
        self.running.append(request)


def _builtin_policies() -> dict[str, type]:
    from refimpl.sched.policies.prefill_first import PrefillFirstPolicy
    from refimpl.sched.policies.sarathi import SarathiPolicy
    from refimpl.sched.policies.vllm import VLLMPolicy
    from refimpl.sched.slo.policy import SLOPolicy

    return {"slo": SLOPolicy, "vllm": VLLMPolicy, "sarathi": SarathiPolicy,
            "prefill-first": PrefillFirstPolicy}


# The built-in policies, the default first: the seed's SLA-aware scheduler, then the
# baselines that mirror production engines.
POLICIES: tuple[str, ...] = ("slo", "vllm", "sarathi", "prefill-first")
BASELINES: tuple[str, ...] = POLICIES[1:]


def make_policy(policy: str | type | Policy, **params: object) -> Policy:
    """A policy from its name, its class (built with `params`), or an instance as it is."""
    if isinstance(policy, str):
        classes = _builtin_policies()
        if policy not in classes:
            raise ConfigError("policy", policy, "unknown policy", choices=classes)
        policy = classes[policy]
    if isinstance(policy, type):
        policy = policy(**params)
    if not isinstance(policy, Policy):
        raise ConfigError("policy", policy, "does not implement the Policy protocol "
                          "(bind, add_request, schedule, update_from_output, num_waiting)")
    return policy
