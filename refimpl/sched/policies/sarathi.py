"""Sarathi-Serve's stall-free batching: decodes first, then partial prefills, then new ones.

Mirrors Agrawal et al., "Taming Throughput-Latency Tradeoff in LLM Inference with
Sarathi-Serve" (OSDI 2024): every step has a fixed token budget (the chunk size, 512 by
default); all running decodes are taken first so they never stall behind a prompt, then the
chunks of prompts already under way, then new prompts in arrival order, each chunked to what
is left of the budget. KV exhaustion preempts the most recently started request, as in vLLM.
"""

from __future__ import annotations

from refimpl._numba import inline_kernel
from refimpl.sched.policies.budget import budgeted_step, is_decoding
from refimpl.sched.policy import SARATHI, BuiltinPolicy
from refimpl.sched.queues import NUM_RUNNING, new_decision

__all__ = ["SarathiPolicy", "plan_sarathi"]


@inline_kernel
def plan_sarathi(token_budget, max_num_seqs, ints, kv, q, entries, sizes):
    """One Sarathi step: running decodes, then running prompt chunks, then waiting ones."""
    epoch = new_decision(q)
    num_running = q.sizes[NUM_RUNNING]
    k = 0
    for decoding in (True, False):
        for m in range(num_running):
            i = q.running[m]
            if is_decoding(ints, i) == decoding:
                q.order[k] = i
                k += 1
    budgeted_step(token_budget, max_num_seqs, epoch, num_running, ints, kv, q, entries, sizes)


class SarathiPolicy(BuiltinPolicy):
    """Sarathi-Serve: stall-free batching under a fixed per-step token budget."""

    name = "sarathi"
    code = SARATHI
    default_token_budget = 512  # Sarathi-Serve's chunk size
