"""Admission control (the seed's section 5): accept, queue, lower, degrade or reject each request.

`AdmissionController` is a `Gate` whose decisions are compiled (refimpl.admission.decide, from
the capacity estimates of refimpl.admission.capacity over the rates of
refimpl.admission.rates): the serving loop calls them directly, without a crossing to Python.
Its methods below are the same decisions reached from Python, for a gate that wraps it or a
test. Requests that cannot fit even alone (`exceeds_context`,
`exceeds_kv_capacity`) never reach it: the loop rejects them. A decision is O(admitted
prompts not yet computed), a step's upkeep O(that + the step's requests).
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from refimpl.admission import decide
from refimpl.admission import state as S
from refimpl.admission.gate import Action, Decision, Gate
from refimpl.config._validate import positive_int, positive_real
from refimpl.config.slo import SLO
from refimpl.errors import ConfigError
from refimpl.sched.plan import StepPlan, new_plan_arrays, write_plan
from refimpl.sched.policy import PolicyContext
from refimpl.sched.slo.budget import linearise
from refimpl.sched.table import REASONS

__all__ = ["REASONS", "AdmissionConfig", "AdmissionController"]

ACTIONS = (Action.ACCEPT, Action.QUEUE, Action.DEGRADE, Action.REJECT, Action.LOWER)  # by code
# Every reason a request can be queued, degraded or refused for (the last two by the loop).
GATE_REASONS = ("ttft_capacity", "tpot_capacity", "delays_admitted", "kv_watermark",
                "max_running", "queue_full", "queue_timeout", "exceeds_context",
                "exceeds_kv_capacity")


@dataclass(frozen=True)
class AdmissionConfig:
    """The gate's thresholds: fractions of the pool, a target or the machine; tokens, counts,
    seconds."""

    kv_watermark: float = 0.85  # the seed's conservative watermark
    low_priority: int = 1  # priority numbers from here on are low priority
    long_context_tokens: int = 2048  # prompt + output from which a request is long-context
    min_capped_tokens: int = 16  # a cap shorter than this rejects instead of degrading
    low_priority_margin: float = 0.8  # low priority: the work ahead of it counts 1/this times
    decode_cap: float = 0.95  # the most of the machine admitted decodes may take
    max_queue: int = 256  # requests the admission queue holds
    min_observations: int = 20  # steps before the calibration is trusted
    rate_horizon_s: float = 10.0  # arrivals' prompt work is averaged over about this long
    lateness_quantile: float = 0.5  # first tokens later than predicted: plan for this share
    min_tick_s: float = 1e-3  # the scheduler's tick bounds (as the `slo` policy's)
    max_tick_s: float = 0.25
    lower_class: bool = False  # a request it would reject runs as a looser class instead

    def __post_init__(self) -> None:
        for name in ("kv_watermark", "low_priority_margin", "decode_cap", "rate_horizon_s",
                     "min_tick_s", "max_tick_s", "lateness_quantile"):
            positive_real(name, getattr(self, name))
        for name in ("kv_watermark", "low_priority_margin", "decode_cap"):
            if getattr(self, name) > 1:
                raise ConfigError(name, getattr(self, name), "is a fraction, at most 1")
        if self.lateness_quantile >= 1:
            raise ConfigError("lateness_quantile", self.lateness_quantile,
                              "is a quantile, strictly between 0 and 1")
        if self.min_tick_s > self.max_tick_s:
            raise ConfigError("min_tick_s", self.min_tick_s,
                              f"must be <= max_tick_s={self.max_tick_s}")
        for name in ("long_context_tokens", "min_capped_tokens", "max_queue",
                     "min_observations"):
            positive_int(name, getattr(self, name))
        if isinstance(self.low_priority, bool) or not isinstance(self.low_priority, int):
            raise ConfigError("low_priority", self.low_priority, "must be an integer")
        if not isinstance(self.lower_class, bool):
            raise ConfigError("lower_class", self.lower_class, "must be True or False")


class AdmissionController(Gate):
    """Decides at arrival from what the scheduler can deliver, holds a bounded queue, and
    counts every decision by reason."""

    passes_everything = False
    compiled = True  # the loop runs `refimpl.admission.decide` on `state` itself

    def __init__(self, config: AdmissionConfig | None = None) -> None:
        self.config = config or AdmissionConfig()
        self.state: S.GateState | None = None

    def bind(self, ctx: PolicyContext) -> None:
        """Attach the run's context and lay out a fresh state (the loop does, once)."""
        c = self.config
        self.ctx = ctx
        costs = linearise(ctx.step_model)
        per_token, per_pair, prefill_fixed = S.linearise_prefill(ctx.step_model)
        fparams = np.zeros(S.NUM_FPARAMS)
        fparams[[S.BASE_S, S.C_SEQ_S, S.C_KV_S, S.PREFILL_TOKEN_S, S.PREFILL_PAIR_S,
                 S.PREFILL_FIXED_S]] = (costs.base_s, costs.c_seq_s, costs.c_kv_s, per_token,
                                        per_pair, min(prefill_fixed, costs.base_s))
        fparams[[S.WATERMARK, S.DECODE_CAP, S.MIN_TICK_S, S.MAX_TICK_S, S.LOW_MARGIN,
                 S.RATE_HORIZON_S, S.LATENESS_Z]] = (
            c.kv_watermark, c.decode_cap, c.min_tick_s, c.max_tick_s, c.low_priority_margin,
            c.rate_horizon_s, NormalDist().inv_cdf(c.lateness_quantile))
        order = S.DEADLINE_ORDER if ctx.prefill_order == "deadline" else S.ARRIVAL_ORDER
        iparams = np.array([order, c.max_queue, c.low_priority, c.long_context_tokens,
                            c.min_capped_tokens, c.min_observations, ctx.max_running,
                            int(c.lower_class)], np.int64)
        table = ctx.requests
        classes = S.slo_classes(table.ttft_slo_s, table.tpot_slo_s, table.priority) if len(
            table) else None
        self.state = S.new_gate_state(fparams, iparams, len(table), classes)
        self._out = np.zeros((4, max(len(ctx.requests), 1)), np.int64)

    @property
    def counts(self) -> dict[str, int]:
        """Decisions so far: "action" or "action:reason" -> requests."""
        if self.state is None:
            return {}
        counts = {}
        for action, reason in zip(*np.nonzero(self.state.decisions), strict=True):
            key = ACTIONS[action].value + (f":{REASONS[reason]}" if reason else "")
            counts[key] = int(self.state.decisions[action, reason])
        return counts

    def predicted_first_token_s(self) -> np.ndarray:
        """Per request (by row, as the run's records), the first-token time the gate last
        predicted for it; NaN where it never predicted one (rejected before, or forced in)."""
        if self.state is None:
            return np.zeros(0)
        return self.state.prediction[S.FIRST_TOKEN_S].copy()

    def num_queued(self) -> int:
        """Requests held in the admission queue."""
        return int(self.state.counts[S.NUM_QUEUED])

    def on_arrival(self, i: int, now_s: float) -> Decision:
        """Decide on an arrival and commit it (a QUEUE decision keeps it in the queue)."""
        a = self.ctx.arrays
        decide.arrive(self.state, a.ints, a.floats, a.kv, i, now_s, self._out)
        return self._decision(0)

    def admit(self, i: int, now_s: float) -> Decision:
        """Accept request `i` whatever the estimates say, booked as any accepted one (an
        override: e.g. to replay the counterfactual of a rejection)."""
        a = self.ctx.arrays
        decide.commit(self.state, a.ints, a.floats, a.kv, i, now_s, decide.ACCEPT, 0, 0,
                      self._out, 0)
        return self._decision(0)

    def poll(self, now_s: float) -> list[tuple[int, Decision]]:
        """Decide again on the queued requests; those that leave the queue, with why."""
        a = self.ctx.arrays
        num_left = decide.poll(self.state, a.ints, a.floats, a.kv, now_s, self._out)
        return [(int(self._out[0, k]), self._decision(k)) for k in range(num_left)]

    def observe(self, plan: StepPlan, finished: np.ndarray, duration_s: float,
                now_s: float) -> None:
        """Learn from a committed step of `duration_s` (the loop calls it after each)."""
        a = self.ctx.arrays
        arrays = new_plan_arrays(a.ints.shape[1])
        write_plan(plan, arrays, lambda name: 0, lambda name: 0)
        decide.observe(self.state, a.ints, a.floats, arrays.entries, arrays.sizes,
                       np.asarray(finished, np.int64), len(finished), duration_s)

    def settings(self) -> dict[str, Any]:
        """What the run report says of the gate."""
        return {"admission": type(self).__name__, **vars(self.config)}

    def _decision(self, k: int) -> Decision:
        action, reason, cap = (int(v) for v in self._out[1:, k])
        reason_name = REASONS[reason] if reason else ""
        if ACTIONS[action] is Action.LOWER:  # `cap` names the class
            ttft, tpot, _ = self.state.classes[:, cap]
            i = int(self._out[0, k])
            return Decision(Action.LOWER, reason_name, slo=SLO(float(ttft), float(tpot)),
                            priority=int(self.ctx.requests.priority[i]))
        return Decision(ACTIONS[action], reason_name, cap)
