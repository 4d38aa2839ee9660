"""Sarathi-Serve's stall-free batching: decodes first, then partial prefills, then new ones.

Mirrors Agrawal et al., "Taming Throughput-Latency Tradeoff in LLM Inference with
Sarathi-Serve" (OSDI 2024): every step has a fixed token budget (the chunk size, 512 by
default); all running decodes are taken first so they never stall behind a prompt, then the
chunks of prompts already under way, then new prompts in arrival order, each chunked to what
is left of the budget. KV exhaustion preempts the most recently started request, as in vLLM.
"""

from __future__ import annotations

from refimpl.sched.plan import StepPlan
from refimpl.sched.policy import QueuePolicy

__all__ = ["SarathiPolicy"]


class SarathiPolicy(QueuePolicy):
    """Sarathi-Serve: stall-free batching under a fixed per-step token budget."""

    name = "sarathi"

    def __init__(self, *, max_num_seqs: int = 256, token_budget: int = 512) -> None:
        super().__init__(max_num_seqs=max_num_seqs, token_budget=token_budget)

    def schedule(self, now_s: float) -> StepPlan:
        """Plan one step."""
        decodes = [r for r in self.running if r.is_decoding]
        partial = [r for r in self.running if not r.is_decoding]
        return self.budgeted_step(decodes + partial)
