"""vLLM v1's scheduler: one token budget per step, running requests first, then waiting FCFS.

Mirrors `vllm/v1/core/sched/scheduler.py` (Kwon et al. 2023; the v1 engine, 2025): each step
has a budget of `token_budget` tokens (vLLM's `max_num_batched_tokens`, 2048 here). Running
requests are served first, in the order they started, each getting the tokens it still needs
(one for a decode, the rest of its prompt otherwise, capped by the budget: long prompts are
chunked). When the KV cache cannot hold a running request's tokens, the most recently started
request is preempted and recomputed later. Then waiting requests start in arrival order
(`QueuePolicy.budgeted_step` has the details).
"""

from __future__ import annotations

from refimpl.sched.plan import StepPlan
from refimpl.sched.policy import QueuePolicy

__all__ = ["VLLMPolicy"]


class VLLMPolicy(QueuePolicy):
    """vLLM v1: running first in start order under a token budget; FCFS admission."""

    name = "vllm"

    def schedule(self, now_s: float) -> StepPlan:
        """Plan one step."""
        return self.budgeted_step(list(self.running))
