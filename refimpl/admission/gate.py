"""The admission gate: what the serving loop asks before a request reaches the policy.

A small protocol, so the loop knows nothing of any gate's internals. On each arrival the gate
decides: accept (the policy gets the request), degrade (accepted with its output capped: it
ends `length_capped` at `Decision.output_cap` tokens), lower (accepted, scheduled by the looser
`Decision.slo` and `Decision.priority`, still judged by its own SLO), queue (held by the gate)
or reject (with a reason). Before every step the loop polls the queued ones; after every step
it shows the gate what happened. `Gate` itself is the pass-through default: everything is
accepted, and the loop then skips the gate altogether.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from refimpl.config.slo import SLO
    from refimpl.sched.plan import StepPlan
    from refimpl.sched.policy import PolicyContext

__all__ = ["Action", "Decision", "Gate"]


class Action(StrEnum):
    """What admission does with a request."""

    ACCEPT = "accept"
    QUEUE = "queue"
    DEGRADE = "degrade"  # accepted with its generation capped
    REJECT = "reject"
    LOWER = "lower"  # accepted as a looser class: scheduled by its targets and priority


@dataclass(frozen=True, slots=True)
class Decision:
    """An action, its reason ("" for a plain accept); to degrade, the capped output; to
    lower, the class the request is scheduled as."""

    action: Action
    reason: str = ""
    output_cap: int = 0  # DEGRADE only: output tokens after which it ends `length_capped`
    slo: SLO | None = None  # LOWER only: the targets it is scheduled by
    priority: int | None = None  # LOWER only: the priority it is scheduled at


ACCEPTED = Decision(Action.ACCEPT)


class Gate:
    """The pass-through gate (accepts everything); subclass it for a gate of your own."""

    passes_everything = True  # the loop skips a gate that says so (no call per arrival)
    compiled = False  # True: the loop runs refimpl.admission.decide on the gate's `state`
    ctx: PolicyContext
    counts: dict[str, int]

    def bind(self, ctx: PolicyContext) -> None:
        """Attach the run's context (the loop calls it once, before the first arrival)."""
        self.ctx = ctx
        self.counts = {}

    def on_arrival(self, i: int, now_s: float) -> Decision:
        """The decision for request `i`, arrived at `now_s`; QUEUE keeps it in the gate."""
        return ACCEPTED

    def poll(self, now_s: float) -> list[tuple[int, Decision]]:
        """Queued requests that leave the gate now (accepted, degraded, lowered or
        rejected)."""
        return []

    def observe(self, plan: StepPlan, finished: np.ndarray, duration_s: float,
                now_s: float) -> None:
        """The step `plan` ran for `duration_s`, ending at `now_s`; `finished` ended in it."""

    def num_queued(self) -> int:
        """Requests the gate holds."""
        return 0

    def settings(self) -> dict[str, Any]:
        """What the run report says of the gate."""
        return {}
