"""Sarathi-Serve in deadline order: its fixed chunk and stall-free batches, prompts by TTFT due.

Sarathi-Serve's step (refimpl.sched.policies.sarathi: a token budget of 512, every running
decode first so none stalls behind a prompt, prompts chunked to what is left), with one
change: prompts are taken earliest TTFT deadline first (arrival + TTFT target; ties in arrival
order) instead of in arrival order, both the chunks of prompts under way and the waiting
ones. The waiting queue is kept in that order by the loop (`order_waiting_by`: each arrival,
and each preempted request, is inserted at its deadline, O(log n) to find the place), so a
step costs what Sarathi's does. Nothing is rejected here; `edf` adds SCORPIO's TTFT guard.
"""

from __future__ import annotations

from refimpl._numba import inline_kernel, kernel
from refimpl.sched.policies.budget import budgeted_step, is_decoding
from refimpl.sched.policy import SARATHI_EDF, BuiltinPolicy, PolicyContext
from refimpl.sched.queues import NUM_RUNNING, new_decision, order_waiting_by
from refimpl.sched.table import ARRIVAL, TTFT_SLO

__all__ = ["SarathiEDFPolicy", "deadline_order", "plan_sarathi_edf"]


@kernel
def deadline_order(ints, q):
    """Running requests into `q.order`: decodes in start order, then prompts by deadline;
    returns how many."""
    num_running, order, ranks = q.sizes[NUM_RUNNING], q.order, q.ranks
    k = 0
    for m in range(num_running):
        if is_decoding(ints, q.running[m]):
            order[k] = q.running[m]
            k += 1
    first = k
    # An insertion sort: at most one running prompt is part-way at a time (a waiting request
    # starts only once every running one got all it still needs), so it sorts one or two.
    for m in range(num_running):
        i = q.running[m]
        if not is_decoding(ints, i):
            place = k
            while place > first and ranks[order[place - 1]] > ranks[i]:
                order[place] = order[place - 1]
                place -= 1
            order[place] = i
            k += 1
    return num_running


@inline_kernel
def plan_sarathi_edf(token_budget, max_num_seqs, ints, kv, q, entries, sizes):
    """One Sarathi-EDF step: running decodes, then prompts under way and waiting ones, each
    by TTFT deadline."""
    epoch = new_decision(q)
    num_running = deadline_order(ints, q)
    budgeted_step(token_budget, max_num_seqs, epoch, num_running, ints, kv, q, entries, sizes)


class SarathiEDFPolicy(BuiltinPolicy):
    """Sarathi-Serve's fixed chunk and stall-free batches, prompts earliest deadline first."""

    name = "sarathi-edf"
    code = SARATHI_EDF
    prefill_order = "deadline"
    default_token_budget = 512  # Sarathi-Serve's chunk size

    def bind(self, ctx: PolicyContext) -> None:
        """Attach the run's context; its waiting queue is kept in TTFT-deadline order."""
        super().bind(ctx)
        floats = ctx.arrays.floats
        order_waiting_by(ctx.arrays.queues, floats[ARRIVAL] + floats[TTFT_SLO])
