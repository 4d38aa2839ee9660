"""The admission gate after a step, compiled: learn from it, then forget the ended requests.

`observe` runs once per committed step (refimpl.admission.decide re-exports it, as the gate
protocol's third call): it prices the step with the gate's model (decode sequences and their
context, the prompt chunks; a chunk's fixed part replaces the weights read where the read
hides under it), learns each finished prompt's first-token lateness against its prediction
(refimpl.admission.calibration.learn_lateness), measures the prompt work the policy delivered
where a prompt still waited, and puts the step into the calibration window (`_remember`, its
sums kept in O(1)). The admitted requests that ended give back their KV and decode
reservations (`_forget_finished`), which marks capacity as come back for the next poll.
"""

from __future__ import annotations

import numpy as np

from refimpl._numba import inline_kernel, kernel
from refimpl.admission import state as S
from refimpl.admission.calibration import add_class, class_of, learn_lateness, step_error
from refimpl.admission.rates import chunk_share, prompt_seconds
from refimpl.sched import plan as p
from refimpl.sched.table import (
    COMPUTED,
    FINISHED,
    FIRST_TOKEN,
    GENERATED,
    PROMPT,
    STATUS,
    TPOT_SLO,
    TTFT_SLO,
)

__all__ = ["WINDOW_TOTALS", "observe"]

# The calibration window's columns, in order, and the totals each one sums into.
WINDOW_TOTALS = (S.MEASURED_S, S.MODELLED_S, S.DELIVERED_S, S.AVAILABLE_S, S.RETURNED_PAGES,
                 S.MEASURED_SQ, S.ENDED)


@kernel
def observe(s, ints, floats, entries, sizes, finished, num_finished, duration):
    """Learn from a committed step of `duration` seconds and forget the ended requests;
    returns how many requests the gate holds."""
    f = s.fparams
    modelled = 0.0
    for k in range(sizes[p.NUM_DECODE]):
        j = entries[p.DECODE, k]
        modelled += f[S.C_SEQ_S] + f[S.C_KV_S] * (ints[PROMPT, j] + ints[GENERATED, j])
    prompts_s = 0.0
    for k in range(sizes[p.NUM_PREFILL]):
        j, tokens = entries[p.PREFILL, k], entries[p.PREFILL_TOKENS, k]
        prompts_s += prompt_seconds(f, tokens, max(ints[COMPUTED, j] - tokens, 0))
    # (a chunk's fixed part replaces the weights read where the read hides under it)
    modelled += max(f[S.BASE_S], f[S.PREFILL_FIXED_S] + prompts_s)
    kept = 0
    for k in range(s.counts[S.NUM_PENDING]):
        j = s.pending[k]
        if ints[STATUS, j] < FINISHED and ints[COMPUTED, j] < ints[PROMPT, j]:
            s.pending[kept] = j
            kept += 1
        elif ints[GENERATED, j] > 0 and s.prediction[S.FIRST_TOKEN_S, j] == s.prediction[
                S.FIRST_TOKEN_S, j]:  # (not NaN: the gate predicted it)
            c = class_of(s.ttft_targets, floats[TTFT_SLO, j])
            if c >= 0:  # its first token came: how late against the prediction
                learn_lateness(s, c, s.prediction[S.DECIDED_S, j],
                               s.prediction[S.FIRST_TOKEN_S, j], floats[FIRST_TOKEN, j])
    delivered = available = 0.0
    # the policy gave the step prompt work and some still waits after it: the step shows
    # what the policy could give (a step it held prompts back in, for KV pages, says
    # nothing of the rate: the KV estimate covers pages; one that ended the last prompt
    # shows how little was asked)
    if kept > 0 and prompts_s > 0:
        kappa = step_error(s)
        delivered = kappa * prompts_s
        available = duration * max(1.0 - chunk_share(s, 0.0, np.inf), 0.0)
    if kept < s.counts[S.NUM_PENDING]:
        s.counts[S.FREED] = 1  # prompts done: the ones queued behind them may fit now
    s.counts[S.NUM_PENDING] = kept
    returned, ended = _forget_finished(s, ints, floats, finished, num_finished)
    if duration > 0:
        _remember(s, duration, modelled, delivered, available, returned, ended)
    return s.counts[S.NUM_QUEUED]


@inline_kernel
def _remember(s, measured, modelled, delivered, available, returned, ended):
    """One step into the calibration window (its sums kept, O(1))."""
    t, ring, counts = s.totals, s.ring, s.counts
    k = counts[S.RING_NEXT]
    if counts[S.RING_LEN] == S.RING:
        for column, total in enumerate(WINDOW_TOTALS):
            t[total] -= ring[k, column]
        if ring[k, 3] > 0:
            counts[S.RATE_STEPS] -= 1
    else:
        counts[S.RING_LEN] += 1
    ring[k, 0], ring[k, 1], ring[k, 2], ring[k, 3] = measured, modelled, delivered, available
    ring[k, 4], ring[k, 5], ring[k, 6] = returned, measured * measured, ended
    for column, total in enumerate(WINDOW_TOTALS):
        t[total] += ring[k, column]
    if available > 0:
        counts[S.RATE_STEPS] += 1
    elif counts[S.RATE_STEPS] == 0:  # (what subtracting left is rounding, not a rate)
        t[S.DELIVERED_S] = t[S.AVAILABLE_S] = 0.0
    counts[S.RING_NEXT] = (k + 1) % S.RING


@inline_kernel
def _forget_finished(s, ints, floats, finished, num_finished):
    """Release the reservations of the admitted requests that ended in the step; returns
    the KV peaks given back and how many ended."""
    returned = ended = 0
    for k in range(num_finished):
        i = finished[k]
        if s.pages[i] == 0:
            continue
        returned += s.pages[i]
        ended += 1
        s.pages[i] = 0
        s.totals[S.LOAD] -= s.load[i]
        if s.load[i] > 0:
            add_class(s.tpot_targets, s.tpot_counts, floats[TPOT_SLO, i], -1)
        s.load[i] = 0.0
        s.counts[S.FREED] = 1
    if returned > 0:
        kept = 0
        for k in range(s.counts[S.NUM_ADMITTED]):
            j = s.admitted[k]
            if s.pages[j] > 0:
                s.admitted[kept] = j
                kept += 1
        s.counts[S.NUM_ADMITTED] = kept
    if s.counts[S.NUM_ADMITTED] == 0:
        s.totals[S.LOAD] = 0.0  # no drift left over from the sums
    return returned, ended
