"""The seed's decode batching: a greedy deadline knapsack over length buckets (section 3).

Every active decoding request is an item with a deadline (its next token is due), an estimated
time (what adding it to the step costs: its KV read and per-sequence work), a weight, a length
bucket and a KV need (one page when its last page is full). The knapsack has three limits: the
tick's decode time, the free KV pages and the maximum batch size. Solving it exactly is
exponential; the seed's greedy is:

1. the *urgent* requests (next token due within `horizon_s`) in deadline order, each taken if
   it fits: missing it now means missing its deadline;
2. then *fill* from the buckets the urgent ones opened (or, when no urgent one fitted, the
   bucket of the earliest deadline): other requests of those buckets by value, highest first,
   while they fit. Value is `w / estimated_time` (VALUE_PER_TIME, the default: tokens per
   second of step time, weighted) or `w * lateness_penalty` (VALUE_LATENESS, with the
   penalty `1 / (1 + slack / scale)`, rising as the deadline nears).

Cost: a pass over the N active requests; a linear-time partition keeps the B candidates that
can still make the batch, which alone are heaped and popped: O(N + B log B) when they fit,
never more than O(N log N). `select_decode_batch` is the Numba
version the `slo` policy runs; `select_decode_batch_python` is the same algorithm in plain
Python, the baseline of `refimpl bench sched`.
"""

from __future__ import annotations

import heapq

import numpy as np

from refimpl._numba import kernel

__all__ = [
    "VALUE_LATENESS",
    "VALUE_PER_TIME",
    "bucket_of",
    "select_decode_batch",
    "select_decode_batch_python",
    "tick_inputs",
]

VALUE_PER_TIME = 0  # value = weight / estimated time (default)
VALUE_LATENESS = 1  # value = weight * 1 / (1 + slack / lateness_scale_s)


@kernel
def bucket_of(context_tokens, first_bucket_tokens):
    """Bucket index of a context length: [0, b), [b, 2b), [2b, 4b), ... for b the first edge."""
    bucket = 0
    edge = first_bucket_tokens
    while context_tokens >= edge:
        bucket += 1
        edge *= 2
    return bucket


@kernel
def tick_inputs(context, deadline_s, active, now_s, min_tick_s, max_tick_s, horizon_ticks,
                c_seq_s, c_kv_s, page_size, first_bucket_tokens):
    """One pass over the decode set: each slot's estimated time, bucket and page need, the
    tick (`clamp(earliest deadline - now, min_tick_s, max_tick_s)`, or `max_tick_s` with
    nothing active) and the time of all requests due within `horizon_ticks` ticks."""
    n = active.shape[0]
    est_s = np.empty(n, np.float64)
    buckets = np.empty(n, np.int64)
    kv_need = np.empty(n, np.int64)
    earliest = np.inf
    for slot in range(n):
        est_s[slot] = c_seq_s + c_kv_s * (context[slot] + 1)  # its KV and its newest token
        buckets[slot] = bucket_of(context[slot], first_bucket_tokens)
        kv_need[slot] = 1 if context[slot] % page_size == 0 else 0  # last page full: one more
        if active[slot]:
            earliest = min(earliest, deadline_s[slot])
    tick_s = max_tick_s if earliest == np.inf else min(max(earliest - now_s, min_tick_s),
                                                       max_tick_s)
    urgent_s = 0.0
    for slot in range(n):
        if active[slot] and deadline_s[slot] < now_s + horizon_ticks * tick_s:
            urgent_s += est_s[slot]
    return est_s, buckets, kv_need, tick_s, urgent_s


@kernel
def _take_in_order(heap, est_time_s, kv_need, bucket, opened, taken, out, count, time_left,
                   pages_left, max_batch):
    """Pop `(key, slot)` entries smallest key first, taking each slot that still fits.

    Heapified in O(len) and popped only while something can still fit (the batch is not
    full, and time is left for the cheapest entry): O(len + B log len) in practice.
    """
    cheapest = np.inf  # the smallest time of any entry, and of entries needing no page
    cheapest_no_page = np.inf
    for _, slot in heap:
        cheapest = min(cheapest, est_time_s[slot])
        if kv_need[slot] == 0:
            cheapest_no_page = min(cheapest_no_page, est_time_s[slot])
    heapq.heapify(heap)
    while heap and count < max_batch:
        if time_left < cheapest or (pages_left <= 0 and time_left < cheapest_no_page):
            break  # no entry left can fit: stop popping (the choice is the same)
        slot = heapq.heappop(heap)[1]
        if est_time_s[slot] <= time_left and kv_need[slot] <= pages_left:
            time_left -= est_time_s[slot]
            pages_left -= kv_need[slot]
            taken[slot] = True
            opened[bucket[slot]] = True
            out[count] = slot
            count += 1
    return count, time_left, pages_left


@kernel
def _any_fits(keys, slots, size, cut, est_time_s, kv_need, time_left, pages_left):
    """Whether any entry with key above `cut` fits the time and pages left (a cheap scan)."""
    for i in range(size):
        if keys[i] > cut:
            slot = slots[i]
            if est_time_s[slot] <= time_left and kv_need[slot] <= pages_left:
                return True
    return False


@kernel
def _take_best(keys, slots, size, est_time_s, kv_need, bucket, opened, taken, out, count,
               time_left, pages_left, max_batch):
    """`_take_in_order` over the first `size` (key, slot) entries of two arrays.

    The batch takes at most `room` more entries, so only the best are heaped (a linear-time
    partition finds them); the others, still in order, only if misfits leave room and one of
    them fits. Every key of the first part is <= every key of the rest: the order is the full
    one, at O(size + B log B) instead of O(size log size).
    """
    room = max_batch - count
    cut = np.inf if size <= 4 * room + 64 else np.partition(keys[:size], room)[room]
    best = [(keys[i], slots[i]) for i in range(size) if keys[i] <= cut]
    count, time_left, pages_left = _take_in_order(best, est_time_s, kv_need, bucket, opened,
                                                  taken, out, count, time_left, pages_left,
                                                  max_batch)
    if count < max_batch and cut < np.inf and _any_fits(keys, slots, size, cut, est_time_s,
                                                       kv_need, time_left, pages_left):
        rest = [(keys[i], slots[i]) for i in range(size) if keys[i] > cut]
        count, time_left, pages_left = _take_in_order(rest, est_time_s, kv_need, bucket,
                                                      opened, taken, out, count, time_left,
                                                      pages_left, max_batch)
    return count, time_left, pages_left


@kernel
def select_decode_batch(deadline_s, est_time_s, weight, bucket, kv_need, active, now_s,
                        horizon_s, time_budget_s, kv_budget_pages, max_batch, value_mode,
                        lateness_scale_s, out, stats):
    """Greedy deadline knapsack; writes chosen slots to `out` and returns how many.

    All per-slot arrays have one entry per policy slot; `active[slot]` marks decodable ones.
    Ties go to the lower slot (entries are ordered as `(key, slot)` pairs), so the choice is
    total. `stats` receives the pages the batch takes and the pages the urgent requests left
    out would need (the scheduler preempts when those exceed what is free).
    """
    n = active.shape[0]
    keys = np.empty(n, np.float64)  # urgent deadlines, then fill candidates' -values
    slots = np.empty(n, np.int64)
    num_urgent = 0
    earliest = -1
    for slot in range(n):
        if not active[slot]:
            continue
        if earliest < 0 or deadline_s[slot] < deadline_s[earliest]:
            earliest = slot
        if deadline_s[slot] < now_s + horizon_s:
            keys[num_urgent], slots[num_urgent] = deadline_s[slot], slot
            num_urgent += 1
    stats[0] = stats[1] = 0
    if earliest < 0:
        return 0
    opened = np.zeros(bucket.max() + 1, np.bool_)
    taken = np.zeros(n, np.bool_)
    count, time_left, pages_left = _take_best(keys, slots, num_urgent, est_time_s, kv_need,
                                              bucket, opened, taken, out, 0, time_budget_s,
                                              kv_budget_pages, max_batch)
    for i in range(num_urgent):  # urgent requests left out, and the pages they need
        if not taken[slots[i]]:
            stats[1] += kv_need[slots[i]]
    if count == 0:  # nothing urgent fitted: fill around the earliest deadline
        opened[bucket[earliest]] = True
    num_fill = 0
    for slot in range(n):
        if active[slot] and not taken[slot] and opened[bucket[slot]]:
            if value_mode == VALUE_PER_TIME:
                value = weight[slot] / max(est_time_s[slot], 1e-12)
            else:
                slack_s = max(deadline_s[slot] - now_s, 0.0)
                value = weight[slot] / (1.0 + slack_s / lateness_scale_s)
            keys[num_fill], slots[num_fill] = -value, slot  # the highest value first
            num_fill += 1
    # Filling never opens a bucket that counts: `opened` is read before this pass.
    count, _, pages_left = _take_best(keys, slots, num_fill, est_time_s, kv_need, bucket,
                                      opened, taken, out, count, time_left, pages_left,
                                      max_batch)
    stats[0] = kv_budget_pages - pages_left
    return count


def select_decode_batch_python(deadline_s, est_time_s, weight, bucket, kv_need, active, now_s,
                               horizon_s, time_budget_s, kv_budget_pages, max_batch,
                               value_mode, lateness_scale_s) -> list[int]:
    """`select_decode_batch` written plainly in Python over lists: the benchmark's baseline."""
    slots = [s for s in range(len(active)) if active[s]]
    if not slots:
        return []
    chosen: list[int] = []
    left = [time_budget_s, kv_budget_pages]

    def take_in_order(candidates: list[int]) -> None:
        for s in candidates:
            if len(chosen) == max_batch:
                return
            if est_time_s[s] <= left[0] and kv_need[s] <= left[1]:
                left[0] -= est_time_s[s]
                left[1] -= kv_need[s]
                chosen.append(s)

    take_in_order(sorted((s for s in slots if deadline_s[s] < now_s + horizon_s),
                         key=lambda s: (deadline_s[s], s)))
    opened = {bucket[s] for s in chosen}
    if not chosen:
        opened.add(bucket[min(slots, key=lambda s: (deadline_s[s], s))])

    def value(s: int) -> float:
        if value_mode == VALUE_PER_TIME:
            return weight[s] / max(est_time_s[s], 1e-12)
        return weight[s] / (1.0 + max(deadline_s[s] - now_s, 0.0) / lateness_scale_s)

    taken = set(chosen)
    take_in_order(sorted((s for s in slots if s not in taken and bucket[s] in opened),
                         key=lambda s: (-value(s), s)))
    return chosen
