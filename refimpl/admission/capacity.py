"""What the scheduler can deliver: the admission gate's estimates, compiled.

What a deadline-paced scheduler (seed section 6) can still deliver to a newcomer, from the
machine's rates (refimpl.admission.rates: the decodes' load, a tick, and the prompt rate `r`
they leave):
- **First token.** The newcomer's first token comes once the prompt work ahead of it in
  the policy's own order (every admitted prompt for an arrival-order policy; those due no
  later for a deadline-order one) and its own prompt are done, after the step in flight:
  `now + g + work / r`, `g` that step's mean residual time (`granularity_s`), `r` without
  its own decode load (its decodes start with its first token; they slow the prompts after
  it).
  Under deadline order, tighter classes keep arriving ahead of it at their admitted rate
  `rho` (model prompt seconds per second): the wait is then `work / (r - rho)`, a priority
  queue's residual rate, and never more than `(work + W) / r` with `W` all the tighter work
  that can arrive while still due before it.
  Under deadline order a newcomer whose first token would then be late is predicted with
  its own prompt in steps stretched to `max_tick_s` (`rates.stretched_rate`), as the `slo`
  policy stretches a step for the most urgent prompt where it would miss
  (refimpl.sched.slo.budget): that prompt is this one once the work ahead is done.
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
  leave a slot: they end at the rate admitted requests were seen ending. Under deadline
  order the tighter classes' arrivals take the slots that free first, at their admitted
  rate, as they take the prompt rate (`wait_s` in requests): with the decode set full, a
  30 s batch class otherwise waited until its deadline came within an interactive class's
  0.5 s target, for a predicted 4 s (conv/llama-3-8b/chat-batch at 2x capacity).
The calibrations these estimates are scaled by, and the lateness margin, are in
refimpl.admission.calibration.
"""

from __future__ import annotations

import numpy as np

from refimpl._numba import inline_kernel, kernel
from refimpl.admission import state as S
from refimpl.admission.calibration import (
    end_rate,
    granularity_s,
    lateness_s,
    return_rate,
)
from refimpl.admission.rates import (
    decode_load,
    decode_share,
    prompt_rate,
    remaining_s,
    stretched_rate,
    wait_s,
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

__all__ = ["assess", "is_low_priority", "kv_projection", "tighter_arrivals"]


@kernel
def tighter_arrivals(s, floats, i, now):
    """(model prompt seconds per second that tighter classes bring, the seconds of it that
    may arrive while still due before request `i`'s deadline, the same two in requests):
    the work and the requests that will jump ahead of `i` under deadline order, at the
    classes' admitted arrival rates (zeros otherwise)."""
    if s.iparams[S.ORDER] != S.DEADLINE_ORDER:
        return 0.0, 0.0, 0.0, 0.0
    horizon = s.fparams[S.RATE_HORIZON_S]
    deadline, target = floats[ARRIVAL, i] + floats[TTFT_SLO, i], floats[TTFT_SLO, i]
    rate = work = request_rate = requests = 0.0
    for c in range(S.MAX_CLASSES):
        t = s.ttft_targets[c]
        if t == t and t < target:  # (not NaN: a class seen)
            decay = np.exp(-(now - s.class_time_s[c]) / horizon) / horizon
            due = max(deadline - t - now, 0.0)  # how long its arrivals still come first
            rate += s.class_work_s[c] * decay
            request_rate += s.class_requests[c] * decay
            work += s.class_work_s[c] * decay * due
            requests += s.class_requests[c] * decay * due
    return rate, work, request_rate, requests


@inline_kernel
def is_low_priority(s, ints, i):
    """Whether request `i` is of low priority (`AdmissionConfig.low_priority` or above)."""
    return ints[PRIORITY, i] >= s.iparams[S.LOW_PRIORITY]


@inline_kernel
def _before(ints, floats, j, i):
    """Whether prompt `j` runs before prompt `i` in deadline order (ties: shorter first)."""
    dj, di = floats[ARRIVAL, j] + floats[TTFT_SLO, j], floats[ARRIVAL, i] + floats[TTFT_SLO, i]
    if dj != di:
        return dj < di
    return ints[PROMPT, j] - ints[COMPUTED, j] <= ints[PROMPT, i] - ints[COMPUTED, i]


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
        if is_low_priority(s, ints, j):
            low += pages
    return total, low


@kernel
def assess(s, ints, floats, i, now, output, margin, page_size, num_pages):
    """(slack of request `i`'s first token against its TTFT target if admitted now with
    `output` tokens, the work ahead of it counted `1 / margin` times, less its class's
    lateness; the point estimate's slack (the work ahead counted once, no lateness); 1 if it
    would push an
    on-time admitted prompt late; its decode share; the slack left once it also waited for
    KV pages, +inf when they are there, -inf when none are seen coming back; the same for a
    slot under the policy's `max_running`; the KV projection with it) (module doc). Notes
    the prediction in `s.prediction`."""
    f, cached = s.fparams, s.cached
    load = decode_load(f, ints, floats, i, output)
    tpot = floats[TPOT_SLO, i] if output >= 2 else np.inf
    share_with = decode_share(s, load, tpot)
    deadline = floats[ARRIVAL, i] + floats[TTFT_SLO, i]
    if share_with >= 1.0:
        return -np.inf, -np.inf, 0, share_with, np.inf, np.inf, 0
    # model prompt seconds per second: while its prompt waits and runs the newcomer does not
    # decode yet, so its own decode load slows only the prompts after it
    # (both > 0: the decodes leave room, share_with < 1)
    rate_own, rate_with = prompt_rate(s, 0.0, np.inf), prompt_rate(s, load, tpot)
    own = remaining_s(f, cached, ints, i)
    tighter_rate, tighter_work, tighter_requests_rate, tighter_requests = tighter_arrivals(
        s, floats, i, now)
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
    if deadline_order and first_token > deadline:
        # a deadline-order policy stretches a step past the decodes' pace for the most
        # urgent prompt if it would miss (refimpl.sched.slo.budget), as this one is once
        # the work ahead is done: its chunk's fixed part is paid once a long tick, not once
        # a TPOT; its work counts as the seconds at the paced rate that take as long
        own *= rate_own / max(rate_own, stretched_rate(s))
        first_token = now + tick + wait_s(ahead + own, rate_own, tighter_rate, tighter_work)
    # a margin below 1 makes the work ahead weigh more (low priority gives way under load,
    # never when the machine is idle: its own prompt is not scaled); the slack keeps room
    # for how late first tokens of its class came against these predictions
    late = lateness_s(s, ints, floats, floats[TTFT_SLO, i], first_token - now, now)
    slack = deadline - late - (now + tick + wait_s(ahead / margin + own, rate_own,
                                                   tighter_rate, tighter_work / margin))
    point_slack = deadline - first_token
    harm = 0
    if num_later > 0 and slack >= 0:
        harm = _delays_on_time(s, ints, floats, num_later, ahead + own, own, now + tick,
                               rate_own, rate_with)
    # pages it must wait for: a policy starts no prompt above the watermark (the `slo`
    # ladder's first rung), so that is the room the admitted requests and it grow in; for a
    # high-priority request the low-priority ones' pages are room too, since the ladder's
    # later rungs (cap, quantize, spill, preempt) take from them first
    projected, low = kv_projection(s, ints, floats, i, output, page_size)
    is_low = is_low_priority(s, ints, i)
    short = projected - (0 if is_low else low) - f[S.WATERMARK] * num_pages
    kv_slack = slot_slack = np.inf
    if short > 0:
        after = _after_waiting(short, return_rate(s), 0.0, 0.0, now, tick, own, rate_own)
        kv_slack = deadline - late - after
        first_token = max(first_token, after) if after < np.inf else first_token
    # a slot: a policy that runs at most `MAX_RUNNING` requests starts a prompt only once
    # those it serves before it (decoding, or prompts ahead, and under deadline order the
    # tighter classes' arrivals, which take the slots that free first) leave one
    excess = s.counts[S.NUM_ADMITTED] - num_later + 1 - s.iparams[S.MAX_RUNNING]
    if s.iparams[S.MAX_RUNNING] > 0 and excess > 0:
        after = _after_waiting(excess, end_rate(s), tighter_requests_rate, tighter_requests,
                               now, tick, own, rate_own)
        slot_slack = deadline - late - after
        first_token = max(first_token, after) if after < np.inf else first_token
    s.prediction[S.DECIDED_S, i], s.prediction[S.FIRST_TOKEN_S, i] = now, first_token
    return slack, point_slack, harm, share_with, kv_slack, slot_slack, projected


@inline_kernel
def _after_waiting(missing, rate, tighter_rate, tighter, now, tick, own, rate_own):
    """When a first token comes that waits first for `missing` pages or requests to come
    back at `rate` per second, while tighter arrivals take `tighter_rate` per second of
    them first, up to `tighter` in all (`wait_s`; inf: none seen coming back)."""
    if rate <= 0:
        return np.inf
    return now + wait_s(missing, rate, tighter_rate, tighter) + tick + own / rate_own


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
