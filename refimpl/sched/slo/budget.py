"""The `slo` policy's tick budget: how long the next step may take, and what decodes cost.

The cost model splits a decode step's time into a fixed part (weights, overhead) and a
per-request part (`c_seq + c_kv * context`), by finite differences of the step model, so any
`StepTimeModel` works. The tick may last until the tightest decoding request's next token is
due, `clamp(min(deadline) - now, min_tick_s, max_tick_s)` (just `max_tick_s` when nothing
decodes), and never less than the step's fixed part, the urgent decodes and (when prompts
wait) a minimal prefill chunk take: urgent decodes are never squeezed out.

A step may outlast the decodes' per-token pace while the most urgent prompt would miss its
TTFT deadline at that pace (its work in ticks of the prompt share the budget leaves): then
the budget stretches to hold that prompt whole, as far as the decodes' slack on the mean
reaches, and `max_tick_s`. Paying the chunk's fixed part once, not once a TPOT, is what a
long prompt under a tight TPOT needs (a 4k-token prompt on Llama-2-70B beside 30 ms
decodes); the decodes stay urgent per token, decoded every step, so they do not live longer
than they must (pacing their deadlines on the mean instead filled the decode set and the pool
near capacity: docs/admission.md).

A decode's slack on the mean (`decode_slack_s`) is what it has banked, `first token + n *
TPOT - now` (TPOT is a mean over the request: tokens that came early left time), and what it
should bank again before it ends: each quiet step (one that carries no prompt chunk) lasts
`quiet_s`, the fixed part and the decode set's own times, and banks `TPOT - quiet_s`; it has
at least `m - n` tokens left with odds of `1 - loan_quantile`, `m` that quantile of the output
lengths of the requests seen finishing (a server does not know a request's output length,
only how long outputs have been), and a share `q` of the steps have been quiet, so it may
borrow `q * max(m - n, 0) * max(TPOT - quiet_s, 0)` ahead. The lower the quantile, the fewer
decodes end before they repay (each such one a TPOT miss): at the median, conv on Llama-2-70B
under chat-batch missed 79 interactive TPOTs of 1,007 at capacity, at the lower quartile (the
default) 28. A decode fresh from a burst has banked nothing, so without that loan a long prompt
arriving with the burst was chunked at the decodes' pace, and the run fell below EDF's
(ShareGPT on Llama-2-70B under MLPerf's 8B mix: docs/admission.md). `q` and `m` are learned as
the run goes (`learned_quiet_share`, `learned_output`); before a request has finished, `m` is
0 and no decode borrows anything.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from refimpl._numba import inline_kernel
from refimpl.sched.slo.knapsack import tick_inputs

__all__ = ["DecodeCosts", "Tick", "decode_slack_s", "learned_output", "learned_quiet_share",
           "linearise", "plan_tick", "prefill_time", "stretch_s"]

PROBE = 4096  # context at which the per-request decode cost is linearised
QUIET_RATE = 0.01  # the quiet share's weight of the latest step (about the last 100 steps)
QUANTILE_STEP = 0.02  # the output quantile's step: this share of itself, and one token


class DecodeCosts(NamedTuple):
    """A decode step's time as `base_s + sum(c_seq_s + c_kv_s * context)`."""

    base_s: float
    c_seq_s: float
    c_kv_s: float


def linearise(step_model) -> DecodeCosts:
    """The decode costs of `step_model`, by finite differences at `PROBE` tokens."""
    step = step_model.step_time_parts
    one = step(0, 0, 1, PROBE)
    c_kv_s = (step(0, 0, 1, 2 * PROBE) - one) / PROBE
    c_seq_s = max(step(0, 0, 2, 2 * PROBE) - one - c_kv_s * PROBE, 0.0)
    return DecodeCosts(max(one - c_seq_s - c_kv_s * PROBE, 0.0), c_seq_s, c_kv_s)


def prefill_time(step_model, costs: DecodeCosts, tokens: int) -> float:
    """Step time of a lone prompt chunk of `tokens`, less the step's fixed part."""
    return step_model.step_time_parts(tokens, tokens * (tokens + 1) // 2, 0, 0) - costs.base_s


class Tick(NamedTuple):
    """One tick's budget and the decode set's per-slot inputs to the knapsack."""

    est_s: np.ndarray  # each slot's decode time
    buckets: np.ndarray  # each slot's length bucket
    kv_need: np.ndarray  # each slot's new pages (1 when its last page is full)
    tick_s: float  # the tick before stretching for urgent decodes
    budget_s: float  # the step's time limit
    window_s: float  # of it, the decode batch's own time


@inline_kernel
def stretch_s(budget_s, tick_s, urgent_s, base_s, whole_s, deadline_s, now_s):
    """How long a step must last to hold the head prompt whole (`whole_s` of its own work,
    due at `deadline_s`) where it would miss in ticks of the prompt share `budget_s` leaves;
    0 where it would not (the module doc). The caller bounds it by the decodes' slack."""
    share_s = budget_s - base_s - urgent_s
    if share_s <= 0 or whole_s <= share_s or now_s + whole_s / share_s * tick_s <= deadline_s:
        return 0.0
    return base_s + urgent_s + whole_s


@inline_kernel
def decode_slack_s(rows, active, num_slots, est_s, first_token_s, generated, tpot_s, now_s,
                   base_s, quiet_share, output_quantile):
    """How far a step may outlast the decodes' pace: the least, over the decode set's slots,
    of a decode's banked time on its mean TPOT and what it should bank again in quiet steps
    before it ends (the module doc)."""
    quiet_s = base_s
    for slot in range(num_slots):
        if active[slot]:
            quiet_s += est_s[slot]
    slack_s = np.inf
    for slot in range(num_slots):
        if active[slot]:
            i = rows[slot]
            left = max(output_quantile - generated[i], 0.0)
            slack_s = min(slack_s, first_token_s[i] + generated[i] * tpot_s[i] - now_s
                          + quiet_share * left * max(tpot_s[i] - quiet_s, 0.0))
    return slack_s


@inline_kernel
def learned_quiet_share(share, quiet, num_steps):
    """The share of quiet steps (no prompt chunk) after one more step, `num_steps` in all:
    the mean of the first `1 / QUIET_RATE`, then an exponential average."""
    return share + max(QUIET_RATE, 1.0 / num_steps) * ((1.0 if quiet else 0.0) - share)


@inline_kernel
def learned_output(estimate, generated, quantile):
    """The `quantile` of the output lengths after one more request finished with
    `generated` tokens: a stochastic-approximation quantile (up `quantile` steps, down
    `1 - quantile`, in tokens that scale with it; the first output sets it)."""
    if estimate <= 0.0:
        return float(generated)
    step = 2.0 * (QUANTILE_STEP * estimate + 1.0)
    if generated > estimate:
        return estimate + step * quantile
    if generated < estimate:
        return max(estimate - step * (1.0 - quantile), 0.0)
    return estimate


def _stretch(policy, decode, head: tuple[float, int, int], requests, costs: DecodeCosts,
             step_model, est_s: np.ndarray, budget_s: float, tick_s: float, urgent_s: float,
             now_s: float) -> float:
    """The budget, stretched for the head prompt where it would miss (the module doc)."""
    deadline_s, computed, left = head
    left = min(left, policy.max_chunk)
    whole_s = step_model.step_time_parts(left, left * computed + left * (left + 1) // 2, 0,
                                         0) - costs.base_s
    wanted_s = stretch_s(budget_s, tick_s, urgent_s, costs.base_s, whole_s, deadline_s, now_s)
    if wanted_s <= 0:
        return budget_s
    slack_s = decode_slack_s(decode.rows, decode.active, len(decode.active), est_s,
                             requests.first_token_s, requests.num_generated,
                             requests.tpot_slo_s, now_s, costs.base_s, policy.quiet_share,
                             policy.output_quantile)
    return max(budget_s, min(wanted_s, slack_s, policy.max_tick_s))


def plan_tick(policy, decode, costs: DecodeCosts, step_model, page_size: int, now_s: float,
              prompts_wait: bool, head: tuple[float, int, int] | None = None,
              requests=None) -> Tick:
    """The tick of `decode` (a decode set or draft) at `now_s` under `policy`'s limits;
    `head`: the most urgent prompt's (deadline, computed tokens, tokens left), and the
    request table, to stretch the tick for it (the module doc)."""
    est_s, buckets, kv_need, tick_s, urgent_s = tick_inputs(
        decode.context, decode.deadline_s, decode.active, now_s, policy.min_tick_s,
        policy.max_tick_s, policy.horizon_ticks, costs.c_seq_s, costs.c_kv_s, page_size,
        policy.first_bucket_tokens)
    reserve_s = prefill_time(step_model, costs, policy.min_chunk) if prompts_wait else 0.0
    # A hair of slack, so that summing the urgent times in another order cannot drop the last.
    budget_s = max(tick_s, costs.base_s + urgent_s * (1 + 1e-9) + reserve_s)
    if head is not None and len(decode) > 0:
        budget_s = _stretch(policy, decode, head, requests, costs, step_model, est_s,
                            budget_s, tick_s, urgent_s, now_s)
    return Tick(est_s, buckets, kv_need, tick_s, budget_s, budget_s - reserve_s - costs.base_s)
