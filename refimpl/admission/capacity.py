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
  work / r`, `g` that step's mean residual time (`granularity_s`), `r` without its own
  decode load (its decodes start with its first token; they slow the prompts after it).
  Under deadline order, tighter classes keep arriving ahead of it at their admitted rate
  `rho` (model prompt seconds per second): the wait is then `work / (r - rho)`, a priority
  queue's residual rate, and never more than `(work + W) / r` with `W` all the tighter work
  that can arrive while still due before it.
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
The calibrations these estimates are scaled by, and the lateness margin, are in
refimpl.admission.calibration.
"""

from __future__ import annotations

import numpy as np

from refimpl._numba import inline_kernel, kernel
from refimpl.admission import state as S
from refimpl.admission.calibration import (
    delivery,
    end_rate,
    granularity_s,
    lateness_s,
    return_rate,
    step_error,
)
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
    "decode_load",
    "decode_share",
    "kv_projection",
    "prompt_rate",
    "prompt_seconds",
    "remaining_s",
    "tick_s",
    "wait_s",
]


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
def decode_share(s, extra_load, extra_tpot):
    """The machine's share spent decoding with `extra_load` added at TPOT `extra_tpot`."""
    return _share(s, extra_load, s.fparams[S.BASE_S], tick_s(s, extra_tpot))


@inline_kernel
def prompt_rate(s, extra_load, extra_tpot):
    """Model prompt seconds per second left by the decodes with `extra_load` added: a step
    that carries a chunk pays the chunk line's fixed part, not the decode step's weights
    read (the read hides under the chunk's arithmetic); none while decodes alone fill the
    machine."""
    return _prompt_rate(s, extra_load, extra_tpot, tick_s(s, extra_tpot))


@inline_kernel
def stretched_rate(s):
    """`prompt_rate` in steps stretched to the longest tick (its fixed part paid once)."""
    return _prompt_rate(s, 0.0, np.inf, s.fparams[S.MAX_TICK_S])


@inline_kernel
def _prompt_rate(s, extra_load, extra_tpot, chunk_tick):
    """`prompt_rate` with steps that carry a chunk lasting `chunk_tick` seconds."""
    if decode_share(s, extra_load, extra_tpot) >= 1.0:
        return 0.0
    share = _share(s, extra_load, s.fparams[S.PREFILL_FIXED_S], chunk_tick)
    return delivery(s) * (1.0 - share) / step_error(s)


@inline_kernel
def chunk_share(s, extra_load, extra_tpot):
    """The decodes' share of a step that carries a prompt chunk (`decode_share`'s, with the
    chunk line's fixed part in place of the weights read)."""
    return _share(s, extra_load, s.fparams[S.PREFILL_FIXED_S], tick_s(s, extra_tpot))


@inline_kernel
def _share(s, extra_load, fixed_s, tick):
    """The decodes' share of the machine, each `tick` seconds paying `fixed_s` once."""
    load = s.totals[S.LOAD] + extra_load
    if load <= 0:
        return 0.0
    return step_error(s) * (fixed_s / tick + load)


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
    # model prompt seconds per second: while its prompt waits and runs the newcomer does not
    # decode yet, so its own decode load slows only the prompts after it
    # (both > 0: the decodes leave room, share_with < 1)
    rate_own, rate_with = prompt_rate(s, 0.0, np.inf), prompt_rate(s, load, tpot)
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
    first_token = now + tick + wait_s(ahead + own, rate_own, tighter_rate, tighter_work)
    if deadline_order and ahead == 0.0 and first_token > deadline:
        # a deadline-order policy stretches a step past the decodes' pace for the most
        # urgent prompt if it would miss (refimpl.sched.slo.budget), as this one is with
        # none ahead: its chunk's fixed part is paid once a long tick, not once a TPOT
        rate_own = max(rate_own, stretched_rate(s))
        first_token = now + tick + wait_s(ahead + own, rate_own, tighter_rate, tighter_work)
    # a margin below 1 makes the work ahead weigh more (low priority gives way under load,
    # never when the machine is idle: its own prompt is not scaled); the slack keeps room
    # for how late first tokens of its class came against these predictions
    late = lateness_s(s, floats[TTFT_SLO, i], first_token - now)
    slack = deadline - late - (now + tick + wait_s(ahead / margin + own, rate_own,
                                                   tighter_rate, tighter_work / margin))
    harm = 0
    if num_later > 0 and slack >= 0:
        harm = _delays_on_time(s, ints, floats, num_later, ahead + own, own, now + tick,
                               rate_own, rate_with)
    # pages it must wait for: a policy starts no prompt above the watermark (the `slo`
    # ladder's first rung), so that is the room the admitted requests and it grow in; for a
    # high-priority request the low-priority ones' pages are room too, since the ladder's
    # later rungs (cap, quantize, spill, preempt) take from them first
    projected, low = kv_projection(s, ints, floats, i, output, page_size)
    is_low = ints[PRIORITY, i] >= s.iparams[S.LOW_PRIORITY]
    short = projected - (0 if is_low else low) - f[S.WATERMARK] * num_pages
    kv_slack = slot_slack = np.inf
    if short > 0:
        after = _after_waiting(short, return_rate(s), now, tick, own, rate_own)
        kv_slack = deadline - late - after
        first_token = max(first_token, after) if after < np.inf else first_token
    # a slot: a policy that runs at most `MAX_RUNNING` requests starts a prompt only once
    # those it serves before it (decoding, or prompts ahead) leave one
    excess = s.counts[S.NUM_ADMITTED] - num_later + 1 - s.iparams[S.MAX_RUNNING]
    if s.iparams[S.MAX_RUNNING] > 0 and excess > 0:
        after = _after_waiting(excess, end_rate(s), now, tick, own, rate_own)
        slot_slack = deadline - late - after
        first_token = max(first_token, after) if after < np.inf else first_token
    s.prediction[S.DECIDED_S, i], s.prediction[S.FIRST_TOKEN_S, i] = now, first_token
    return slack, harm, share_with, kv_slack, slot_slack, projected


@inline_kernel
def _after_waiting(missing, rate, now, tick, own, rate_own):
    """When a first token comes that waits first for `missing` pages or requests to come
    back at `rate` per second (inf: none seen coming back)."""
    if rate <= 0:
        return np.inf
    return now + missing / rate + tick + own / rate_own


@kernel
def _delays_on_time(s, ints, floats, num_later, done_before, own, start, rate_own,
                    rate_with):
    """1 if some prompt in the scratch (due after the newcomer) is on time without it and
    late with it, from `start`: walked in deadline order, each after those before it (at
    `rate_own` until the newcomer's prompt is done, at `rate_with` once it decodes)."""
    f, cached = s.fparams, s.cached
    newcomer_done = start + done_before / rate_own
    order = np.argsort(s.scratch_f[:num_later], kind="mergesort")  # stable: reproducible
    work = done_before
    for k in range(num_later):
        j = s.scratch_i[order[k]]
        work += remaining_s(f, cached, ints, j)
        deadline = floats[ARRIVAL, j] + floats[TTFT_SLO, j]
        on_time = start + (work - own) / rate_own <= deadline
        if on_time and newcomer_done + (work - done_before) / rate_with > deadline:
            return 1
    return 0
