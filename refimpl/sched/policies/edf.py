"""Earliest-deadline-first with SCORPIO's TTFT guard: requests that cannot make it are refused.

Mirrors the TTFT Guard of Tang et al., "SCORPIO: Serving the Right Requests at the Right Time
for Heterogeneous SLOs in LLM Inference" (2025, arXiv:2505.23022): prompts are served least
deadline first, and a waiting request whose TTFT target is already unattainable is rejected
instead of being served late (its place goes to one that can still make it). The step is
`sarathi-edf`'s (stall-free: decodes first, a token budget of 512, prompts by TTFT deadline);
before it, every waiting request with no output yet is checked:

    now + prefill_floor_s(its prompt) - arrival > TTFT target  =>  rejected, `ttft_unattainable`

`prefill_floor_s` is a floor under the time its prefill takes on the roofline step model
(refimpl.costmodel.step) under any schedule this policy can make: with at most `token_budget`
tokens a step it needs k = ceil(tokens / budget) steps, and the roofline sums of those steps
are at least k fixed overheads, max(all tokens' linear time, k weight reads) and max(all
causal pairs' attention time, all tokens' moves); decodes batched alongside only add. So the
guard rejects only requests that would miss for certain (SCORPIO predicts with a fitted model
instead; a floor never rejects one that could have been served). With the fitted CPU model
(`LinearStepModel`, the real engine's) the same sums are a floor under its prediction (its
other terms left out), not under the machine; with any other step model the coefficients are
zero and the guard rejects those whose deadline has passed. A request
that produced a token is never checked (its TTFT is decided). The rejection goes through the
plan (a finish entry; the commit ends a request without output as rejected); it holds no KV.
"""

from __future__ import annotations

from refimpl._numba import inline_kernel
from refimpl.kv import prefix_facade as kvp
from refimpl.sched.plan import add_finish
from refimpl.sched.policies.budget import budgeted_step
from refimpl.sched.policies.sarathi_edf import SarathiEDFPolicy, deadline_order
from refimpl.sched.policy import EDF
from refimpl.sched.queues import WAIT_LEN, new_decision, waiting_at
from refimpl.sched.table import (
    ARRIVAL,
    COMPUTED,
    GENERATED,
    PROMPT,
    TTFT_SLO,
    TTFT_UNATTAINABLE,
)

__all__ = ["EDFPolicy", "plan_edf", "prefill_floor_s"]


@inline_kernel
def prefill_floor_s(c, tokens, computed, token_budget):
    """A floor under the seconds to prefill `tokens` prompt tokens after `computed` cached
    ones, at most `token_budget` a step, on roofline coefficients `c` (module doc)."""
    steps = (tokens + token_budget - 1) // token_budget
    pairs = tokens * computed + tokens * (tokens + 1) // 2
    return (steps * c.overhead_s
            + max(tokens * c.linear_s_per_token, steps * c.weights_s)
            + max(pairs * c.attn_s_per_pair, tokens * c.new_token_s))


@inline_kernel
def ttft_guard(token_budget, c, ints, floats, kv, q, entries, sizes, epoch, now):
    """Reject each waiting request without output that would miss its TTFT even alone from
    `now` (marked ended for the step, so it is not started)."""
    for k in range(q.sizes[WAIT_LEN]):
        i = waiting_at(q, k)
        if ints[GENERATED, i] > 0:
            continue
        start = ints[COMPUTED, i]
        if kv.prefix.enabled:  # its cached prefix (an inlined call on the KV state costs)
            start, _ = kvp.prefix_start(kv, i, ints[COMPUTED, i], ints[PROMPT, i])
        floor_s = prefill_floor_s(c, ints[PROMPT, i] - start, start, token_budget)
        # TTFT as the metrics take it (first token - arrival), compared as they compare it
        if now + floor_s - floats[ARRIVAL, i] > floats[TTFT_SLO, i]:
            add_finish(entries, sizes, i, TTFT_UNATTAINABLE)
            q.marks[i] = -epoch


@inline_kernel
def plan_edf(token_budget, max_num_seqs, c, ints, floats, kv, q, entries, sizes, now):
    """One EDF step: the TTFT guard, then sarathi-edf's step over what is left."""
    epoch = new_decision(q)
    ttft_guard(token_budget, c, ints, floats, kv, q, entries, sizes, epoch, now)
    num_running = deadline_order(ints, q)
    budgeted_step(token_budget, max_num_seqs, epoch, num_running, ints, kv, q, entries, sizes)


class EDFPolicy(SarathiEDFPolicy):
    """Earliest TTFT deadline first, stall-free, refusing requests that cannot make it."""

    name = "edf"
    code = EDF
