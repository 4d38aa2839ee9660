"""The scheduling-policy protocol: what a policy reads, what it returns, and the factory by name.

Every policy runs on the one serving loop (refimpl.engine.loop). Each step the loop asks the
policy for a plan (`refimpl.sched.plan.StepPlan`): which requests decode, which compute how
many prompt tokens, which are preempted, finished early, spilled, restored or quantized. The
policy only reads; the loop's commit carries the plan out. Built-in policies are compiled
(their decision is a Numba function over the run's arrays, dispatched by `code`); a policy of
your own is plain Python (the README's "Writing a policy" has a tested example).

Override `schedule` (and, for state of your own, `add_request` and `update_from_output`).
`self.ctx` (`PolicyContext`, set by `bind`) is what it may read: the request table (live,
read-only views by row `i`), the KV facade, the loop's waiting and running queues, the step
model, the model, the hardware and the cost table. It returns a `StepPlan`; an empty plan
means nothing can run now (the loop then waits for the next arrival). It must not ask for more
pages than `ctx.kv.num_free_pages` plus what its own preemptions free.
"""

from __future__ import annotations

import importlib
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from refimpl.config._validate import positive_int
from refimpl.errors import ConfigError
from refimpl.sched.plan import StepPlan

if TYPE_CHECKING:
    from refimpl.kv.view import KVView
    from refimpl.sched.table import RequestTable

__all__ = ["BASELINES", "POLICIES", "BuiltinPolicy", "Policy", "PolicyContext", "make_policy"]

# Codes the loop dispatches on (refimpl.engine.dispatch): one per compiled policy, and one for
# every plain-Python policy. `slo` runs compiled with the roofline step model, on the Python
# path otherwise.
PYTHON, VLLM, SARATHI, PREFILL_FIRST, SLO, EDF, SARATHI_EDF = range(7)


@dataclass(frozen=True)
class PolicyContext:
    """What a policy plans against: live read-only views of the run, and its models."""

    requests: RequestTable  # the request table, by row i (in arrival order)
    kv: KVView  # the KV cache facade, read-only
    waiting: Callable[[], np.ndarray]  # admitted requests not running, in queue order
    running: Callable[[], np.ndarray]  # requests holding KV, in start order
    step_model: Any  # a StepTimeModel: the predicted time of a step
    model: Any = None  # the ModelConfig served
    hardware: Any = None  # the HardwareSpec it runs on
    cost_table: Any = None  # the kernels' CostTable, where there is one
    arrays: Any = None  # the run's own arrays (RunArrays), for compiled decisions and tests
    prefill_order: str = "arrival"  # the policy's `prefill_order` (what admission predicts)
    max_running: int = 0  # the policy's `max_running` (what admission predicts)


class Policy:
    """The base of every policy: override `schedule`; the other methods have defaults."""

    name = "custom"
    code = PYTHON
    prefill_order = "arrival"  # the order prompts are served in: "arrival" or "deadline"
    max_running = 0  # the most requests it runs at once (0: no cap of its own)
    tick_budget_s = math.nan  # the time its last plan allowed the step (NaN: no tick)
    ctx: PolicyContext

    def bind(self, ctx: PolicyContext) -> None:
        """Attach the run's context (the loop calls it once, before the first step)."""
        self.ctx = ctx

    def add_request(self, i: int, now_s: float) -> None:
        """Request `i` was admitted at `now_s` (it is in `ctx.waiting()` already)."""

    def schedule(self, now_s: float) -> StepPlan:
        """The plan of the next step; changes nothing."""
        raise NotImplementedError

    def update_from_output(self, plan: StepPlan, finished: np.ndarray, now_s: float) -> None:
        """The loop committed `plan`; `finished` are the requests that ended in it."""

    def num_waiting(self) -> int:
        """Requests admitted and not yet running (for the step records)."""
        return len(self.ctx.waiting())

    def kv_actions(self) -> dict[str, int]:
        """How often each step of the KV ladder acted, if the policy uses it."""
        return {}


class BuiltinPolicy(Policy):
    """A compiled baseline: its decision is a Numba function; these are its parameters."""

    default_token_budget = 2048  # vLLM's max_num_batched_tokens

    def __init__(self, *, max_num_seqs: int = 256, token_budget: int | None = None) -> None:
        token_budget = self.default_token_budget if token_budget is None else token_budget
        positive_int("max_num_seqs", max_num_seqs)
        positive_int("token_budget", token_budget)
        self.max_num_seqs = max_num_seqs  # most requests running at once
        self.token_budget = token_budget  # most tokens computed in one step

    @property
    def max_running(self) -> int:
        """The most requests it runs at once: `max_num_seqs`."""
        return self.max_num_seqs

    def schedule(self, now_s: float) -> StepPlan:
        """The compiled decision runs inside the loop; `refimpl.engine.plan_once` runs it once
        from Python (e.g. to inspect a plan)."""
        raise ConfigError("policy", self.name, "is compiled: the loop runs its decision; "
                          "refimpl.engine.plan_once(policy, now_s) runs it from Python")


# Where each built-in policy's class lives (imported when first named).
_BUILTIN = {"slo": ("refimpl.sched.slo", "SLOPolicy"),
            "vllm": ("refimpl.sched.policies.vllm", "VLLMPolicy"),
            "sarathi": ("refimpl.sched.policies.sarathi", "SarathiPolicy"),
            "prefill-first": ("refimpl.sched.policies.prefill_first", "PrefillFirstPolicy"),
            "edf": ("refimpl.sched.policies.edf", "EDFPolicy"),
            "sarathi-edf": ("refimpl.sched.policies.sarathi_edf", "SarathiEDFPolicy")}


# The built-in policies, the default first: the seed's SLA-aware scheduler, then the
# baselines that mirror production engines, then the deadline-aware ones from the literature.
POLICIES: tuple[str, ...] = ("slo", "vllm", "sarathi", "prefill-first", "edf", "sarathi-edf")
BASELINES: tuple[str, ...] = POLICIES[1:]


def make_policy(policy: str | type | Policy, **params: object) -> Policy:
    """A policy from its name, its class (built with `params`), or an instance as it is."""
    if isinstance(policy, str):
        if policy not in _BUILTIN:
            raise ConfigError("policy", policy, "unknown policy", choices=_BUILTIN)
        module, name = _BUILTIN[policy]
        policy = getattr(importlib.import_module(module), name)
    if isinstance(policy, type):
        if not issubclass(policy, Policy):
            raise ConfigError("policy", policy.__name__, "must subclass refimpl.Policy")
        _check_param_names(policy, params)
        try:
            policy = policy(**params)
        except TypeError as error:
            raise ConfigError("policy_params", sorted(params), str(error)) from None
    elif params:
        raise ConfigError("policy_params", sorted(params), "apply to a policy given by name "
                          "or class, not to an instance")
    if not isinstance(policy, Policy):
        raise ConfigError("policy", policy, "must be a refimpl.Policy (a subclass instance)")
    return policy


def _check_param_names(cls: type, params: dict) -> None:
    """Refuse a parameter `cls` does not take, listing those it does."""
    accepted = inspect.signature(cls).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values()):
        return  # it takes any keyword: its own checks decide
    for name in params:
        if name not in accepted:
            raise ConfigError("policy_params", name, f"is not a parameter of {cls.__name__}",
                              choices=accepted)
