"""vLLM v1's scheduler: one token budget per step, running requests first, then waiting FCFS.

Mirrors `vllm/v1/core/sched/scheduler.py` (Kwon et al. 2023; the v1 engine, 2025): each step
has a budget of `token_budget` tokens (vLLM's `max_num_batched_tokens`, 2048 here). Running
requests are served first, in the order they started, each getting the tokens it still needs
(one for a decode, the rest of its prompt otherwise, capped by the budget: long prompts are
chunked). When the KV cache cannot hold a running request's tokens, the most recently started
request is preempted and recomputed later. Then waiting requests start in arrival order
(`refimpl.sched.policies.budget` has the details). vLLM v0's default, which Vidur calls
`vllm`, is refimpl's `prefill-first`.
"""

from __future__ import annotations

from refimpl._numba import inline_kernel
from refimpl.sched.policies.budget import budgeted_step
from refimpl.sched.policy import VLLM, BuiltinPolicy
from refimpl.sched.queues import NUM_RUNNING, new_decision

__all__ = ["VLLMPolicy", "plan_vllm"]


@inline_kernel
def plan_vllm(token_budget, max_num_seqs, ints, kv, q, entries, sizes):
    """One vLLM step: running requests in start order, then waiting ones."""
    epoch = new_decision(q)
    num_running = q.sizes[NUM_RUNNING]
    for k in range(num_running):
        q.order[k] = q.running[k]
    budgeted_step(token_budget, max_num_seqs, epoch, num_running, ints, kv, q, entries, sizes)


class VLLMPolicy(BuiltinPolicy):
    """vLLM v1: running first in start order under a token budget; FCFS admission."""

    name = "vllm"
    code = VLLM
