"""The admission gate's decisions, compiled: on arrival and on polling the queue.

What the gate does after a step (learn from it, release the ended requests) is
`refimpl.admission.observe`, re-exported here: this module is the gate protocol the serving
loop calls (`arrive`, `poll`, `observe`).

For each arrival, first match wins (low priority means `priority >= low_priority`; for it
the prompt work ahead counts `1 / low_priority_margin` times, so that it gives way first as
the load grows, and not at all on an idle machine):
1. `ttft_capacity`: its first token cannot come by its deadline, even admitted now
   (refimpl.admission.capacity.assess): rejected, since waiting cannot bring it sooner.
   A low-priority request that is on time by the point estimate (the work ahead counted
   once, no lateness allowed for) and late only by the margins (its own, and its class's
   lateness) **gives way** instead: it is queued while admitted requests run, and once
   queued it waits until its own prompt alone could no longer be on time, neither holding
   up the queue behind it nor refused by a later point estimate.
   Why: its margin is a guess at how much tighter work will still jump ahead of it, and the
   guess is wrong both ways in bursts; refused at once, 3.0-3.4% of the arrivals of the
   robustness matrix's chat-batch cells at capacity were false rejects (30 s batch requests
   predicted at 14-23 s that took 16.6-24.7 s ungated); waiting, it learns how the burst ends.
   The class lateness is such a guess too, learned from first tokens that came late against
   their predictions: MLPerf's 2 s class on Llama-2-70B was refused for it at predictions of
   1.1-1.8 s that took 1.3-2.0 s ungated (docs/admission.md, fourth pass).
2. `kv_watermark`: the KV the admitted requests and it would hold while it lives passes the
   watermark (refimpl.admission.capacity.kv_projection), and the pages it lacks would come
   back too late for its deadline: rejected; or nothing has been seen returning pages yet:
   queued while admitted requests run, else rejected. Where its own peak does not fit in
   what the others leave under the watermark, a long-context low-priority request is
   degraded instead: its output is capped to fit (it ends `length_capped`), unless that
   leaves under `min_capped` (then it is decided as any other).
3. `max_running`: the policy runs at most that many requests at once and those it serves
   before this one fill them: they end too slowly (at the rate admitted requests were seen
   ending) for its deadline, rejected; none seen ending yet, queued, else rejected.
4. `tpot_capacity`: with it, decoding would take more than `decode_cap` of the machine:
   queued until the decode load falls, else rejected.
5. `delays_admitted`: it would push a prompt due after it, on time now, past its deadline:
   queued (the other may soon be done), else rejected.
A request one of these would reject (`ttft_capacity`, or a wait with nothing admitted to
free capacity) is first decided again as each looser SLO class of the run in turn (targets
no tighter, by TTFT then TPOT, `AdmissionConfig.lower_class`): the first that accepts it
**lowers** it to that class, so it is scheduled by the looser targets and priority (the
table's SLO rows) while it is still judged by the ones it asked for (its `Request.slo`).
Serving late beats not serving: a lowered request runs in the slack the on-time ones leave,
since the scheduler orders by priority and deadline, and may still meet its own targets.
A request's prompt work is what its computed tokens leave, or, before it starts, what the
prefix cache's hit for it leaves (looked up when the gate decides; a prefix other requests are
still computing is not cached yet, so it is counted as work). "Else rejected": when nothing
admitted is left to free capacity. A queued request leaves the queue accepted or degraded once
a decision says so (decided again, first come first served, whenever capacity came back), or
rejected `queue_timeout` once its first token could no longer be on time (by the point
estimate, or for one giving way by its own prompt alone); an arrival
finding the queue full (`max_queue`) is rejected `queue_full`. This is the seed's "degrade
before reject": wait (bounded by the request's own deadline), lower the class, cap the output,
and only then refuse; quantizing and spilling pages are the KV ladder's rungs, which the `slo`
policy climbs on the admitted requests.
"""

from __future__ import annotations

import numpy as np

from refimpl._numba import inline_kernel, kernel
from refimpl.admission import state as S
from refimpl.admission.calibration import add_class, granularity_s, ttft_class
from refimpl.admission.capacity import assess, is_low_priority
from refimpl.admission.observe import observe
from refimpl.admission.rates import decode_load, prompt_rate, remaining_s
from refimpl.kv import manager as kvm
from refimpl.kv import prefix_facade as kvp
from refimpl.sched.table import (
    ARRIVAL,
    COMPUTED,
    DELAYS_ADMITTED,
    KV_WATERMARK,
    MAX_NEW,
    MAX_RUNNING,
    PRIORITY,
    PROMPT,
    QUEUE_FULL,
    QUEUE_TIMEOUT,
    TPOT_CAPACITY,
    TPOT_SLO,
    TTFT_CAPACITY,
    TTFT_SLO,
)

__all__ = ["arrive", "commit", "decide", "observe", "poll"]

ACCEPT, QUEUE, DEGRADE, REJECT, LOWER = range(5)  # the loop's action codes


@kernel
def decide(s, ints, floats, kv, i, now):
    """(action, reason, output cap or, to lower, the class) for request `i` at `now`;
    changes nothing but the gate's notes of its cached prefix and prediction (module doc)."""
    action, reason, cap = _decide_as_scheduled(s, ints, floats, kv, i, now)
    if action == REJECT and s.iparams[S.LOWER_CLASS] != 0:
        k = _looser_class(s, ints, floats, kv, i, now)
        if k >= 0:
            return LOWER, reason, k
    return action, reason, cap


@kernel
def _looser_class(s, ints, floats, kv, i, now):
    """The first class of the run looser than request `i`'s as which it would be accepted
    now, -1 for none; its targets are left as they were."""
    ttft, tpot, priority = floats[TTFT_SLO, i], floats[TPOT_SLO, i], ints[PRIORITY, i]
    found = -1
    for k in range(S.MAX_CLASSES):
        t, p = s.classes[S.CLASS_TTFT, k], s.classes[S.CLASS_TPOT, k]
        if not (t >= ttft and p >= tpot) or (t == ttft and p == tpot):  # (NaN: no class)
            continue
        _schedule_as(s, ints, floats, i, k, priority)
        if _decide_as_scheduled(s, ints, floats, kv, i, now)[0] == ACCEPT:
            found = k
            break
    floats[TTFT_SLO, i], floats[TPOT_SLO, i], ints[PRIORITY, i] = ttft, tpot, priority
    return found


@inline_kernel
def _schedule_as(s, ints, floats, i, k, priority):
    """Write class `k`'s targets into request `i`'s SLO rows, and its priority where that is
    less urgent than `priority` (lowering never makes a request more urgent)."""
    floats[TTFT_SLO, i] = s.classes[S.CLASS_TTFT, k]
    floats[TPOT_SLO, i] = s.classes[S.CLASS_TPOT, k]
    ints[PRIORITY, i] = max(priority, int(s.classes[S.CLASS_PRIORITY, k]))


@kernel
def _decide_as_scheduled(s, ints, floats, kv, i, now):
    """(action, reason, output cap) for request `i` at `now` by the SLO rows it has now."""
    f, c = s.fparams, s.iparams
    if kv.prefix.enabled:  # (its prompt work is what a prefix cache hit leaves)
        s.cached[i] = kvp.prefix_start(kv, i, ints[COMPUTED, i], ints[PROMPT, i])[0]
    is_low = is_low_priority(s, ints, i)
    output = ints[MAX_NEW, i]
    total = ints[PROMPT, i] + output
    pages, num_pages = kvm.pages_for(total, kv.page_size), kv.num_pages
    slack, point_slack, harm, share, kv_slack, slot_slack, projected = assess(
        s, ints, floats, i, now, output, f[S.LOW_MARGIN] if is_low else 1.0, kv.page_size,
        num_pages)
    waits = QUEUE if s.counts[S.NUM_ADMITTED] > 0 else REJECT
    if slack < 0:
        # low priority gives way, it is not turned away: on time by the point estimate, it
        # waits for the work ahead to drain and is refused only once that says it is late
        return (waits if is_low and point_slack >= 0 else REJECT), TTFT_CAPACITY, 0
    room = int(f[S.WATERMARK] * num_pages) - (projected - pages)  # what the others leave
    if room < pages and is_low and total >= c[S.LONG_CONTEXT]:
        cap = min(room * kv.page_size - ints[PROMPT, i], output - 1)
        if cap >= c[S.MIN_CAPPED]:  # (a shorter cap is no service: it goes on as it is)
            return DEGRADE, KV_WATERMARK, cap
    if kv_slack < 0:
        return (waits if kv_slack == -np.inf else REJECT), KV_WATERMARK, 0
    if slot_slack < 0:
        return (waits if slot_slack == -np.inf else REJECT), MAX_RUNNING, 0
    if share > f[S.DECODE_CAP]:
        return waits, TPOT_CAPACITY, 0
    if harm:
        return waits, DELAYS_ADMITTED, 0
    return ACCEPT, 0, 0


@kernel
def arrive(s, ints, floats, kv, i, now, gate_out):
    """Decide on arrival `i` and commit it into column 0 of `gate_out`."""
    action, reason, cap = decide(s, ints, floats, kv, i, now)
    if action == QUEUE:
        if s.counts[S.NUM_QUEUED] >= s.iparams[S.MAX_QUEUE]:
            action, reason = REJECT, QUEUE_FULL
        else:
            s.queue[s.counts[S.NUM_QUEUED]] = i
            s.counts[S.NUM_QUEUED] += 1
    commit(s, ints, floats, kv, i, now, action, reason, cap, gate_out, 0)


@kernel
def poll(s, ints, floats, kv, now, gate_out):
    """Decide again on the queued requests; those leaving go to `gate_out`'s columns, in
    queue order; returns how many left."""
    num_left = kept = 0
    freed = s.counts[S.FREED] > 0
    for k in range(s.counts[S.NUM_QUEUED]):
        i = s.queue[k]
        if freed:
            action, reason, cap = decide(s, ints, floats, kv, i, now)
            # (queued or refused by the TTFT estimate: a low-priority one gives way)
            giving_way = reason == TTFT_CAPACITY and is_low_priority(s, ints, i)
            if action == REJECT and reason == TTFT_CAPACITY:
                if giving_way and not _too_late(s, ints, floats, i, now):
                    action = QUEUE  # the tighter work ahead may drain in time
                else:
                    reason = QUEUE_TIMEOUT
            # first come, first served: the ones behind a request that still waits wait too
            # (and a poll costs one decision, not one per queued request), but not behind
            # a low-priority one that gives way
            freed = action != QUEUE or giving_way
        elif _too_late(s, ints, floats, i, now):
            action, reason, cap = REJECT, QUEUE_TIMEOUT, 0
        else:
            action = QUEUE
        if action == QUEUE:
            s.queue[kept] = i
            kept += 1
        else:
            commit(s, ints, floats, kv, i, now, action, reason, cap, gate_out, num_left)
            num_left += 1
    s.counts[S.NUM_QUEUED] = kept
    s.counts[S.FREED] = 0
    return num_left


@kernel
def _too_late(s, ints, floats, i, now):
    """Whether queued request `i`'s prompt alone, started now, would miss its deadline."""
    rate = prompt_rate(s, 0.0, np.inf)
    if rate <= 0:
        return True
    own = remaining_s(s.fparams, s.cached, ints, i)
    return now + granularity_s(s) + own / rate > floats[ARRIVAL, i] + floats[TTFT_SLO, i]


@kernel
def commit(s, ints, floats, kv, i, now, action, reason, cap, gate_out, column):
    """Count the decision, book an admitted request's load, and write the decision out."""
    s.decisions[action, reason] += 1
    gate_out[0, column], gate_out[1, column] = i, action
    gate_out[2, column], gate_out[3, column] = reason, cap
    if action == LOWER:
        _schedule_as(s, ints, floats, i, cap, ints[PRIORITY, i])
    elif action != ACCEPT and action != DEGRADE:
        return
    f = s.fparams
    output = cap if action == DEGRADE else ints[MAX_NEW, i]
    s.pages[i] = kvm.pages_for(ints[PROMPT, i] + output, kv.page_size)
    s.load[i] = decode_load(f, ints, floats, i, output)
    s.totals[S.LOAD] += s.load[i]
    s.admitted[s.counts[S.NUM_ADMITTED]] = i
    s.counts[S.NUM_ADMITTED] += 1
    if s.load[i] > 0:
        add_class(s.tpot_targets, s.tpot_counts, floats[TPOT_SLO, i], 1)
    s.pending[s.counts[S.NUM_PENDING]] = i
    s.counts[S.NUM_PENDING] += 1
    c = ttft_class(s.ttft_targets, floats[TTFT_SLO, i])
    decay = np.exp(-(now - s.class_time_s[c]) / f[S.RATE_HORIZON_S])
    s.class_work_s[c] = s.class_work_s[c] * decay + remaining_s(f, s.cached, ints, i)
    s.class_requests[c] = s.class_requests[c] * decay + 1.0
    s.class_time_s[c] = now
