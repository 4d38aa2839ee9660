"""What the scheduler can deliver: the admission gate's estimates, compiled.

Two capacities bound what a deadline-paced scheduler (seed section 6) can serve:
- **Decode time.** A request decoding at its TPOT target `tau` needs one step's share of its
  sequence, `c_seq + c_kv * context`, every `tau`: a load of `(c_seq + c_kv * context) / tau`
  seconds of machine time per second, at its mean context (prompt plus half its output).
  Every step also pays the fixed part `base` (weights, overhead), once per tick, and a tick
  lasts about the tightest TPOT target decoding. The decode share of the machine is
  `kappa * (base / tick + sum(load))`.
- **Prompt time.** A prompt of `u` tokens after `c` computed costs `a * u + b * pairs` model
  seconds, and a step carrying a chunk costs `F` more, the intercept of that line
  (refimpl.admission.state.linearise_prefill): less than `base` where the weights read hides
  under the chunk's arithmetic, as it does on a GPU. So the decodes leave prompts the rate
  `r = eta * (1 - kappa * (F / tick + sum(load))) / kappa` (0 while the decode share is 1).
  The newcomer's first token comes once the prompt work ahead of it in the policy's own
  order (every admitted prompt for an arrival-order policy; those due no later for a
  deadline-order one) and its own prompt are done, after the step in flight: `now + g +
  work / r`, `g` that step's mean residual time (`granularity_s`). Under deadline order,
  tighter classes keep arriving ahead of it at their admitted rate `rho` (model prompt
  seconds per second): the
  wait is then `work / (r - rho)`, a priority queue's residual rate, and never more than
  `(work + W) / r` with `W` all the tighter work that can arrive while still due before it.
  Under deadline order a newcomer also delays every prompt due after it: the gate checks that
  none of those that would be on time is pushed late.
- **KV pages.** While it lives (its TTFT target, then its output at its TPOT pace) every
  admitted request grows at its own pace from where it is, up to its peak: that projection
  with its own peak must fit under the watermark (above it a policy starts no prompt; for
  a high-priority request, the low-priority requests' pages do not count: the ladder takes
  its room from them);
  pages it lacks come back at the rate the admitted requests were seen returning them, and
  its first token waits for them.
- **Slots.** A policy that runs at most `max_running` requests at once (vLLM's
  `max_num_seqs`, `slo`'s `max_batch`) starts a prompt only once those it serves before it
  leave a slot: they end at the rate admitted requests were seen ending.
What is left of the error is learned too: each admitted request's predicted wait for its
first token is noted, and how much later it came (the first token ends the step that
completes the prompt, chunks share steps, later admissions' decodes slow the rate) is kept
per TTFT class as lateness per predicted second (a least-squares slope over the class's
first tokens, decayed over the rate horizon); a newcomer's slack keeps room for that plus
`LATENESS_Z` deviations (the `lateness_quantile` of a normal reading), times its own
predicted wait. That is what stops a gate that admits up to the edge of its point estimate
from turning half of those admitted late under overload; a model found pessimistic shortens
the waits instead (by at most `MAX_EARLY`); and being proportional to the wait, a queue's
errors never turn away what an idle machine would serve at once.
Both are calibrated online by the error of their own predictions, not by observed latencies
(a deadline-paced scheduler spends TPOT slack on purpose, so observed TPOTs sit near their
targets whether or not there is room): `kappa` is the measured step time over the model's, and
`eta` the prompt work the policy actually delivered over what the model said was free, in
the steps where it was the limit (a prompt still waited after the step: the step that ends
the last prompt says how little was asked, not what could be given), both over the last
`RING` steps (1 until `MIN_OBSERVATIONS` steps are in); the pages' return
rate is measured over the same steps.
"""

from __future__ import annotations

import numpy as np

from refimpl._numba import inline_kernel, kernel
from refimpl.admission import state as S
from refimpl.kv import manager as kvm
from refimpl.sched.table import (
    ARRIVAL,
    COMPUTED,
    FINISHED,
    GENERATED,
    PRIORITY,
    PROMPT,
    STATUS,
    TPOT_SLO,
    TTFT_SLO,
)

__all__ = [
    "assess",
    "chunk_share",
    "class_of",
    "decode_load",
    "decode_share",
    "delivery",
    "end_rate",
    "granularity_s",
    "kv_projection",
    "lateness_s",
    "learn_lateness",
    "prompt_rate",
    "prompt_seconds",
    "remaining_s",
    "return_rate",
    "step_error",
    "tick_s",
    "wait_s",
]

# A class's first tokens found early shorten its predicted waits by at most this share (a
# guard, as `ETA_RANGE`: a few early tokens on a quiet machine say little of a busy one).
MAX_EARLY = 0.5
# The delivery calibration is clipped to this range, a guard against a window of a few
# steps that say little (a model that far off is better caught by `kappa`).
ETA_RANGE = (0.5, 2.0)


@inline_kernel
def prompt_seconds(f, tokens, computed):
    """Model seconds of `tokens` prompt tokens after `computed` cached ones."""
    pairs = tokens * computed + tokens * (tokens + 1) / 2
    return tokens * f[S.PREFILL_TOKEN_S] + pairs * f[S.PREFILL_PAIR_S]


@inline_kernel
def decode_load(f, ints, floats, i, output):
    """Seconds of decoding per second that request `i` needs at its TPOT pace."""
    if output < 2:
        return 0.0
    context = ints[PROMPT, i] + output // 2
    return (f[S.C_SEQ_S] + f[S.C_KV_S] * context) / floats[TPOT_SLO, i]


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
def tick_s(s, extra_tpot):
    """How long a step lasts: the tightest admitted TPOT target (and `extra_tpot`), within
    the tick bounds, as the `slo` policy paces its ticks."""
    f = s.fparams
    tightest = extra_tpot
    for c in range(S.MAX_CLASSES):
        if s.tpot_counts[c] > 0 and s.tpot_targets[c] < tightest:
            tightest = s.tpot_targets[c]
    return min(max(tightest, f[S.MIN_TICK_S]), f[S.MAX_TICK_S])


@inline_kernel
def granularity_s(s):
    """How long a newcomer waits for the step in flight to end before its prompt can start:
    that step's mean residual time seen from a random arrival, `E[d^2] / (2 E[d])` over the
    window's steps (a renewal process's; long steps are the likelier to be in flight), 0
    before any step."""
    t = s.totals
    return t[S.MEASURED_SQ] / (2.0 * t[S.MEASURED_S]) if t[S.MEASURED_S] > 0 else 0.0


@inline_kernel
def decode_share(s, extra_load, extra_tpot):
    """The machine's share spent decoding with `extra_load` added at TPOT `extra_tpot`."""
    return _share(s, extra_load, extra_tpot, s.fparams[S.BASE_S])


@inline_kernel
def prompt_rate(s, extra_load, extra_tpot):
    """Model prompt seconds per second left by the decodes with `extra_load` added: a step
    that carries a chunk pays the chunk line's fixed part, not the decode step's weights
    read (the read hides under the chunk's arithmetic); none while decodes alone fill the
    machine."""
    if decode_share(s, extra_load, extra_tpot) >= 1.0:
        return 0.0
    return delivery(s) * (1.0 - chunk_share(s, extra_load, extra_tpot)) / step_error(s)


@inline_kernel
def chunk_share(s, extra_load, extra_tpot):
    """The decodes' share of a step that carries a prompt chunk (`decode_share`'s, with the
    chunk line's fixed part in place of the weights read)."""
    return _share(s, extra_load, extra_tpot, s.fparams[S.PREFILL_FIXED_S])


@inline_kernel
def _share(s, extra_load, extra_tpot, fixed_s):
    """The decodes' share of the machine, each tick paying `fixed_s` once."""
    load = s.totals[S.LOAD] + extra_load
    if load <= 0:
        return 0.0
    return step_error(s) * (fixed_s / tick_s(s, extra_tpot) + load)


@inline_kernel
def _before(ints, floats, j, i):
    """Whether prompt `j` runs before prompt `i` in deadline order (ties: shorter first)."""
    dj, di = floats[ARRIVAL, j] + floats[TTFT_SLO, j], floats[ARRIVAL, i] + floats[TTFT_SLO, i]
    if dj != di:
        return dj < di
    return ints[PROMPT, j] - ints[COMPUTED, j] <= ints[PROMPT, i] - ints[COMPUTED, i]


@inline_kernel
def remaining_s(f, cached, ints, j):
    """Model seconds of prompt `j`'s work left: after its computed tokens, or, before it
    starts, after the cached prefix the gate saw when it decided on it (`cached`, the gate
    state's array: handed the arrays, not the state, as the hot helpers are)."""
    done = max(ints[COMPUTED, j], cached[j])
    return prompt_seconds(f, max(ints[PROMPT, j] - done, 0), done)


@kernel
def tighter_arrivals(s, floats, i, now):
    """(model prompt seconds per second that tighter classes bring, the seconds of it that
    may arrive while still due before request `i`'s deadline): the work that will jump ahead
    of `i` under deadline order, at the classes' admitted arrival rates (0, 0 otherwise)."""
    if s.iparams[S.ORDER] != S.DEADLINE_ORDER:
        return 0.0, 0.0
    horizon = s.fparams[S.RATE_HORIZON_S]
    deadline, target = floats[ARRIVAL, i] + floats[TTFT_SLO, i], floats[TTFT_SLO, i]
    rate = work = 0.0
    for c in range(S.MAX_CLASSES):
        t = s.ttft_targets[c]
        if t == t and t < target:  # (not NaN: a class seen)
            decayed = s.class_work_s[c] * np.exp(-(now - s.class_time_s[c]) / horizon)
            rate += decayed / horizon
            work += decayed / horizon * max(deadline - t - now, 0.0)
    return rate, work


@inline_kernel
def wait_s(work, rate, tighter_rate, tighter_work):
    """Seconds to do `work` at `rate` while tighter work keeps arriving at `tighter_rate`
    (a priority queue's residual rate), no more than when all `tighter_work` that can jump
    ahead is done too."""
    bounded = (work + tighter_work) / rate
    if rate > tighter_rate:
        return min(work / (rate - tighter_rate), bounded)
    return bounded


@inline_kernel
def class_of(targets, target):
    """The slot of TTFT class `target` (-1: not seen)."""
    for c in range(S.MAX_CLASSES):
        if targets[c] == target:
            return c
    return -1


@inline_kernel
def lateness_s(s, target, wait_s):
    """How much later than predicted a first token of TTFT class `target` predicted `wait_s`
    ahead may come: the class's lateness per predicted second (the least-squares slope of
    lateness on predicted wait, plus `LATENESS_Z` deviations of it; never below
    `-MAX_EARLY`) times `wait_s`; 0 until `MIN_OBSERVATIONS` are in. Proportional to the
    wait, so a queue's errors never turn away what an idle machine serves at once; weighted
    by the waits, so short waits (a step's granularity, large against them) barely count."""
    c = class_of(s.ttft_targets, target)
    if c < 0 or s.lateness[S.SEEN, c] < s.iparams[S.MIN_OBSERVATIONS]:
        return 0.0
    ww, ew, ee = s.lateness[S.SUM_WW, c], s.lateness[S.SUM_EW, c], s.lateness[S.SUM_EE, c]
    if ww <= 0:
        return 0.0
    per_s = ew / ww
    spread = np.sqrt(max(ee / ww - per_s * per_s, 0.0))
    return max(per_s + s.fparams[S.LATENESS_Z] * spread, -MAX_EARLY) * wait_s


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


@kernel
def kv_projection(s, ints, floats, i, output, page_size):
    """KV pages the admitted requests and request `i` would hold at most while `i` lives
    (its TTFT target and its output at its TPOT pace): each grows at its own pace from its
    tokens now, up to its peak. A prompt not started that the policy serves after `i` gets
    no pages before `i` has its own (no prompt starts above the watermark), so it is left
    out. Returns (pages in all, of which low-priority requests')."""
    life = floats[TTFT_SLO, i] + output * floats[TPOT_SLO, i]
    total = kvm.pages_for(ints[PROMPT, i] + output, page_size)
    low = 0
    deadline_order = s.iparams[S.ORDER] == S.DEADLINE_ORDER
    for k in range(s.counts[S.NUM_ADMITTED]):
        j = s.admitted[k]
        if j == i or s.pages[j] == 0:
            continue
        if deadline_order and ints[COMPUTED, j] == 0 and not _before(ints, floats, j, i):
            continue
        grown = ints[PROMPT, j] + ints[GENERATED, j] + int(life / floats[TPOT_SLO, j])
        pages = min(s.pages[j], kvm.pages_for(grown, page_size))
        total += pages
        if ints[PRIORITY, j] >= s.iparams[S.LOW_PRIORITY]:
            low += pages
    return total, low


@kernel
def assess(s, ints, floats, i, now, output, margin, page_size, num_pages):
    """(slack of request `i`'s first token against its TTFT target if admitted now with
    `output` tokens, the work ahead of it counted `1 / margin` times, less its class's
    lateness; 1 if it would push an on-time admitted prompt late; its decode share; the
    slack left once it also waited for KV pages, +inf when they are there, -inf when none
    are seen coming back; the same for a slot under the policy's `max_running`; the KV
    projection with it) (module doc). Notes the prediction in
    `s.prediction`."""
    f, cached = s.fparams, s.cached
    load = decode_load(f, ints, floats, i, output)
    tpot = floats[TPOT_SLO, i] if output >= 2 else np.inf
    share_with = decode_share(s, load, tpot)
    deadline = floats[ARRIVAL, i] + floats[TTFT_SLO, i]
    if share_with >= 1.0:
        return -np.inf, 0, share_with, np.inf, np.inf, 0
    rate_with = prompt_rate(s, load, tpot)  # model prompt seconds per second
    own = remaining_s(f, cached, ints, i)
    tighter_rate, tighter_work = tighter_arrivals(s, floats, i, now)
    ahead = 0.0
    num_later = 0
    deadline_order = s.iparams[S.ORDER] == S.DEADLINE_ORDER
    for k in range(s.counts[S.NUM_PENDING]):
        j = s.pending[k]
        if j == i or ints[STATUS, j] >= FINISHED:
            continue
        if not deadline_order or _before(ints, floats, j, i):
            ahead += remaining_s(f, cached, ints, j)
        else:
            s.scratch_i[num_later] = j
            s.scratch_f[num_later] = floats[ARRIVAL, j] + floats[TTFT_SLO, j]
            num_later += 1
    tick = granularity_s(s)
    first_token = now + tick + wait_s(ahead + own, rate_with, tighter_rate, tighter_work)
    # a margin below 1 makes the work ahead weigh more (low priority gives way under load,
    # never when the machine is idle: its own prompt is not scaled); the slack keeps room
    # for how late first tokens of its class came against these predictions
    late = lateness_s(s, floats[TTFT_SLO, i], first_token - now)
    slack = deadline - late - (now + tick + wait_s(ahead / margin + own, rate_with,
                                                   tighter_rate, tighter_work / margin))
    harm = 0
    if num_later > 0 and slack >= 0:
        harm = _delays_on_time(s, ints, floats, num_later, ahead + own, own, now + tick,
                               rate_with, prompt_rate(s, 0.0, np.inf))
    # pages it must wait for: a policy starts no prompt above the watermark (the `slo`
    # ladder's first rung), so that is the room the admitted requests and it grow in; for a
    # high-priority request the low-priority ones' pages are room too, since the ladder's
    # later rungs (cap, quantize, spill, preempt) take from them first
    projected, low = kv_projection(s, ints, floats, i, output, page_size)
    is_low = ints[PRIORITY, i] >= s.iparams[S.LOW_PRIORITY]
    short = projected - (0 if is_low else low) - f[S.WATERMARK] * num_pages
    kv_slack = np.inf
    if short > 0:
        returned = return_rate(s)
        if returned > 0:
            after_pages = now + short / returned + tick + own / rate_with
            first_token = max(first_token, after_pages)
            kv_slack = deadline - late - after_pages
        else:
            kv_slack = -np.inf
    # a slot: a policy that runs at most `MAX_RUNNING` requests starts a prompt only once
    # those it serves before it (decoding, or prompts ahead) leave one
    slot_slack = np.inf
    excess = s.counts[S.NUM_ADMITTED] - num_later + 1 - s.iparams[S.MAX_RUNNING]
    if s.iparams[S.MAX_RUNNING] > 0 and excess > 0:
        ending = end_rate(s)
        if ending > 0:
            after_slots = now + excess / ending + tick + own / rate_with
            first_token = max(first_token, after_slots)
            slot_slack = deadline - late - after_slots
        else:
            slot_slack = -np.inf
    s.prediction[S.DECIDED_S, i], s.prediction[S.FIRST_TOKEN_S, i] = now, first_token
    return slack, harm, share_with, kv_slack, slot_slack, projected


@kernel
def _delays_on_time(s, ints, floats, num_later, done_before, own, start, rate_with,
                    rate_without):
    """1 if some prompt in the scratch (due after the newcomer) is on time without it and
    late with it, from `start`: walked in deadline order, each after those before it."""
    if rate_without <= 0:  # nothing is on time without it either
        return 0
    f, cached = s.fparams, s.cached
    order = np.argsort(s.scratch_f[:num_later], kind="mergesort")  # stable: reproducible
    work = done_before
    for k in range(num_later):
        j = s.scratch_i[order[k]]
        work += remaining_s(f, cached, ints, j)
        deadline = floats[ARRIVAL, j] + floats[TTFT_SLO, j]
        on_time = start + (work - own) / rate_without <= deadline
        if on_time and start + work / rate_with > deadline:
            return 1
    return 0
