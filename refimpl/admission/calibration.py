"""The admission gate's calibrations, compiled: what it learns online of its own errors.

The capacity estimates (refimpl.admission.capacity and .rates) are calibrated online by the
error of their own predictions, not by observed latencies (a deadline-paced scheduler spends
TPOT slack on purpose, so observed TPOTs sit near their targets whether or not there is room):
`kappa` is the measured step time over the model's, and `eta` the prompt work the policy
actually delivered over what the model said was free, in the steps where it was the limit (a
prompt still waited after the step: the step that ends the last prompt says how little was
asked, not what could be given), both over the last `RING` steps (1 until
`MIN_OBSERVATIONS` steps are in); the pages' return rate is measured over the same steps.
The mean residual of the step in flight (`granularity_s`) and the rate admitted requests
end at (`end_rate`) are read from the same window. What is learned is kept per SLO class,
in a few class slots (`class_of`, `ttft_class`, `add_class`).

What is left of the error is learned too, as lateness: each admitted request's predicted
wait for its first token is noted, and how much later it came (the first token ends the step
that completes the prompt, chunks share steps, later admissions' decodes slow the rate) is
kept per TTFT class as lateness per predicted second (a least-squares slope over the class's
first tokens, decayed over the rate horizon); a newcomer's slack keeps room for that plus
`LATENESS_Z` deviations (the `lateness_quantile` of a normal reading), times its own
predicted wait. That is what stops a gate that admits up to the edge of its point estimate
from turning half of those admitted late under overload; and being proportional to the
wait, a queue's errors never turn away what an idle machine would serve at once.
The admitted prompts of the class still waiting past their predicted first token count too,
each as late as it already is (a lower bound): a first token comes only once its prompt is
served, so under a sudden overload the first tokens that would teach the gate come late, a
batch class's by tens of seconds, and it would admit on a stale, optimistic reading all the
while (the robustness matrix's conv/llama-3-8b/chat-batch cell at 2x: batch first tokens
came 18-27 s past their predictions before any of them was seen).
A model found pessimistic never shortens the waits: a stretch of early first tokens (a
burst's prompts batched into shared steps) says little of the next burst, and shortening
the waits on it admitted requests predicted past their deadline once the load rose (at 2x
the capacity of conv/llama-3-8b, half of those admitted; docs/admission.md).
"""

from __future__ import annotations

import numpy as np

from refimpl._numba import inline_kernel
from refimpl.admission import state as S
from refimpl.sched.table import FINISHED, STATUS, TTFT_SLO

__all__ = ["ETA_RANGE", "add_class", "class_of", "delivery", "end_rate",
           "granularity_s", "lateness_s", "learn_lateness", "return_rate", "step_error",
           "ttft_class"]

# The delivery calibration is clipped to this range, a guard against a window of a few
# steps that say little (a model that far off is better caught by `kappa`).
ETA_RANGE = (0.5, 2.0)


@inline_kernel
def step_error(s):
    """`kappa`: measured step seconds over the model's, over the window (1 until trusted)."""
    if s.counts[S.RING_LEN] < s.iparams[S.MIN_OBSERVATIONS] or s.totals[S.MODELLED_S] <= 0:
        return 1.0
    return s.totals[S.MEASURED_S] / s.totals[S.MODELLED_S]


@inline_kernel
def delivery(s):
    """`eta`: prompt seconds delivered over those the model said were free (1 until trusted)."""
    if (s.counts[S.RING_LEN] < s.iparams[S.MIN_OBSERVATIONS] or s.counts[S.RATE_STEPS] == 0
            or s.totals[S.AVAILABLE_S] <= 0):
        return 1.0
    return min(max(s.totals[S.DELIVERED_S] / s.totals[S.AVAILABLE_S], ETA_RANGE[0]),
               ETA_RANGE[1])


@inline_kernel
def granularity_s(s):
    """How long a newcomer waits for the step in flight to end before its prompt can start:
    that step's mean residual time seen from a random arrival, `E[d^2] / (2 E[d])` over the
    window's steps (a renewal process's; long steps are the likelier to be in flight), 0
    before any step."""
    t = s.totals
    return t[S.MEASURED_SQ] / (2.0 * t[S.MEASURED_S]) if t[S.MEASURED_S] > 0 else 0.0


@inline_kernel
def class_of(targets, target):
    """The slot of TTFT class `target` (-1: not seen)."""
    for c in range(S.MAX_CLASSES):
        if targets[c] == target:
            return c
    return -1


@inline_kernel
def add_class(targets, counts, target, delta):
    """Count `delta` requests into the class with `target` (a free slot for a new one): the
    TPOT classes' counts, booked as requests are admitted and released as they end."""
    free = S.MAX_CLASSES - 1
    for c in range(S.MAX_CLASSES):
        if counts[c] > 0 and targets[c] == target:
            counts[c] += delta
            return
        if counts[c] == 0 and free == S.MAX_CLASSES - 1:
            free = c
    targets[free] = target  # (with every slot taken, the last is shared)
    counts[free] += delta


@inline_kernel
def ttft_class(targets, target):
    """The slot of the TTFT class `target` (taken on first sight; the last one is shared)."""
    for c in range(S.MAX_CLASSES):
        if targets[c] == target:
            return c
        if targets[c] != targets[c]:  # NaN: free
            targets[c] = target
            return c
    return S.MAX_CLASSES - 1


@inline_kernel
def lateness_s(s, ints, floats, target, wait_s, now):
    """How much later than predicted a first token of TTFT class `target` predicted `wait_s`
    ahead may come: the class's lateness per predicted second (the least-squares slope of
    lateness on predicted wait, plus `LATENESS_Z` deviations of it; never below 0) times
    `wait_s`. The slope is over the class's first tokens once `MIN_OBSERVATIONS` are in,
    and its admitted prompts already past their predicted first token, each as late as it
    is `now` (the module doc). Weighted by the waits, so short waits (a step's granularity,
    large against them) barely count."""
    c = class_of(s.ttft_targets, target)
    if c < 0:
        return 0.0
    ww = ew = ee = 0.0
    if s.lateness[S.SEEN, c] >= s.iparams[S.MIN_OBSERVATIONS]:
        ww, ew, ee = s.lateness[S.SUM_WW, c], s.lateness[S.SUM_EW, c], s.lateness[S.SUM_EE, c]
    for k in range(s.counts[S.NUM_PENDING]):
        j = s.pending[k]
        predicted = s.prediction[S.FIRST_TOKEN_S, j]
        waited = predicted - s.prediction[S.DECIDED_S, j]
        if (floats[TTFT_SLO, j] == target and ints[STATUS, j] < FINISHED and predicted < now
                and waited > 0):  # (NaN, never predicted, compares false)
            late = now - predicted
            ww += waited * waited
            ew += late * waited
            ee += late * late
    if ww <= 0:
        return 0.0
    per_s = ew / ww
    spread = np.sqrt(max(ee / ww - per_s * per_s, 0.0))
    return max(per_s + s.fparams[S.LATENESS_Z] * spread, 0.0) * wait_s


@inline_kernel
def learn_lateness(s, c, decided, predicted, came):
    """A first token of class `c` that came at `came`, predicted at `decided` for `predicted`,
    into the class's sums (decayed over the rate horizon first)."""
    wait = predicted - decided
    if wait <= 0:
        return
    row = s.lateness
    decay = np.exp(-max(came - row[S.LATENESS_T, c], 0.0) / s.fparams[S.RATE_HORIZON_S])
    late = came - predicted
    row[S.SEEN, c] += 1
    row[S.SUM_WW, c] = row[S.SUM_WW, c] * decay + wait * wait
    row[S.SUM_EW, c] = row[S.SUM_EW, c] * decay + late * wait
    row[S.SUM_EE, c] = row[S.SUM_EE, c] * decay + late * late
    row[S.LATENESS_T, c] = came


@inline_kernel
def end_rate(s):
    """Admitted requests per second that ended over the window (0: none seen)."""
    if s.totals[S.MEASURED_S] <= 0:
        return 0.0
    return s.totals[S.ENDED] / s.totals[S.MEASURED_S]


@inline_kernel
def return_rate(s):
    """KV pages per second that admitted requests gave back over the window (0: none seen)."""
    if s.totals[S.MEASURED_S] <= 0:
        return 0.0
    return s.totals[S.RETURNED_PAGES] / s.totals[S.MEASURED_S]
