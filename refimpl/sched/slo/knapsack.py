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
version the `slo` policy runs; refimpl.sched.slo.knapsack_python is the same algorithm in plain
Python, the tests' oracle and the baseline of `refimpl bench sched`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from refimpl._numba import inline_kernel, kernel

__all__ = [
    "BUCKETS",
    "BUCKET_COUNT",
    "EST_S",
    "KV_NEED",
    "MAX_BUCKETS",
    "VALUE_LATENESS",
    "VALUE_PER_TIME",
    "KnapsackWork",
    "bucket_of",
    "new_knapsack_work",
    "select_decode_batch",
    "select_into",
    "tick_inputs",
    "tick_inputs_into",
]

VALUE_PER_TIME = 0  # value = weight / estimated time (default)
VALUE_LATENESS = 1  # value = weight * 1 / (1 + slack / lateness_scale_s)
MAX_BUCKETS = 64  # more than `bucket_of` gives any int64 context


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
def tick_inputs_into(context, deadline_s, active, n, now_s, min_tick_s, max_tick_s,
                     horizon_ticks, c_seq_s, c_kv_s, page_size, first_bucket_tokens, est_s,
                     buckets, kv_need):
    """`tick_inputs` over the first `n` slots, into `est_s`, `buckets` and `kv_need`;
    returns the tick and the urgent time."""
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
    return tick_s, urgent_s


def tick_inputs(context, deadline_s, active, now_s, min_tick_s, max_tick_s, horizon_ticks,
                c_seq_s, c_kv_s, page_size, first_bucket_tokens):
    """One pass over the decode set: each slot's estimated time, bucket and page need, the
    tick (`clamp(earliest deadline - now, min_tick_s, max_tick_s)`, or `max_tick_s` with
    nothing active) and the time of all requests due within `horizon_ticks` ticks."""
    n = len(active)
    est_s, buckets, kv_need = np.empty(n), np.empty(n, np.int64), np.empty(n, np.int64)
    tick_s, urgent_s = tick_inputs_into(context, deadline_s, active, n, now_s, min_tick_s,
                                        max_tick_s, horizon_ticks, c_seq_s, c_kv_s, page_size,
                                        first_bucket_tokens, est_s, buckets, kv_need)
    return est_s, buckets, kv_need, tick_s, urgent_s


class KnapsackWork(NamedTuple):
    """The arrays one decode batch choice works in, allocated once and reused tick after
    tick: an allocation per tick costs more than the choice, and each array more costs two
    reference-count updates per compiled call that is handed the work (so they are few)."""

    floats: np.ndarray  # (NUM_WORK_FLOATS, slots): EST_S, KEYS, HEAP_KEYS rows
    ints: np.ndarray  # (NUM_WORK_INTS, slots): BUCKETS, KV_NEED, SLOTS, HEAP_SLOTS, TAKEN rows
    per_bucket: np.ndarray  # (2, MAX_BUCKETS): OPENED (0/1), BUCKET_COUNT rows


# Rows of `KnapsackWork.floats`, `.ints` and `.per_bucket`: tick_inputs' estimated times,
# buckets and page needs; the urgent deadlines, then the fill candidates' -values, and their
# slots; the entries being popped; the slots taken; the buckets opened, and the batch's
# sequences per bucket (the kernel picks).
EST_S, KEYS, HEAP_KEYS = range(3)
NUM_WORK_FLOATS = 3
BUCKETS, KV_NEED, SLOTS, HEAP_SLOTS, TAKEN = range(5)
NUM_WORK_INTS = 5
OPENED, BUCKET_COUNT = range(2)


def new_knapsack_work(n: int) -> KnapsackWork:
    """Work arrays for a decode set of up to `n` slots."""
    n = max(n, 1)
    return KnapsackWork(np.zeros((NUM_WORK_FLOATS, n)), np.zeros((NUM_WORK_INTS, n), np.int64),
                        np.zeros((2, MAX_BUCKETS), np.int64))


@inline_kernel
def _sift_down(heap_keys, heap_slots, size, k):
    """Restore the min-heap of `(key, slot)` pairs below position `k`."""
    key, slot = heap_keys[k], heap_slots[k]
    while True:
        child = 2 * k + 1
        if child >= size:
            break
        if child + 1 < size and (heap_keys[child + 1] < heap_keys[child] or (
                heap_keys[child + 1] == heap_keys[child]
                and heap_slots[child + 1] < heap_slots[child])):
            child += 1
        if not (heap_keys[child] < key or (heap_keys[child] == key
                                           and heap_slots[child] < slot)):
            break
        heap_keys[k], heap_slots[k] = heap_keys[child], heap_slots[child]
        k = child
    heap_keys[k], heap_slots[k] = key, slot


@kernel
def _take_in_order(heap_keys, heap_slots, size, est_time_s, kv_need, bucket, opened, taken,
                   out, count, time_left, pages_left, max_batch):
    """Pop the first `size` `(key, slot)` pairs smallest first (slots unique, so the order is
    total), taking each slot that still fits.

    Heapified in O(size) and popped only while something can still fit (the batch is not
    full, and time is left for the cheapest entry): O(size + B log size) in practice.
    """
    cheapest = np.inf  # the smallest time of any entry, and of entries needing no page
    cheapest_no_page = np.inf
    for e in range(size):
        slot = heap_slots[e]
        cheapest = min(cheapest, est_time_s[slot])
        if kv_need[slot] == 0:
            cheapest_no_page = min(cheapest_no_page, est_time_s[slot])
    for k in range(size // 2 - 1, -1, -1):
        _sift_down(heap_keys, heap_slots, size, k)
    while size > 0 and count < max_batch:
        if time_left < cheapest or (pages_left <= 0 and time_left < cheapest_no_page):
            break  # no entry left can fit: stop popping (the choice is the same)
        slot = heap_slots[0]
        size -= 1
        heap_keys[0], heap_slots[0] = heap_keys[size], heap_slots[size]
        _sift_down(heap_keys, heap_slots, size, 0)
        if est_time_s[slot] <= time_left and kv_need[slot] <= pages_left:
            time_left -= est_time_s[slot]
            pages_left -= kv_need[slot]
            taken[slot] = 1
            opened[bucket[slot]] = 1
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


@inline_kernel
def _before(a, b):
    """Whether a sorts before b, NaN last (NumPy's order)."""
    return a < b or (b != b and a == a)


@inline_kernel
def _median_of_three(a, b, c):
    """The middle one of three values in `_before` order."""
    if _before(b, a):
        a, b = b, a
    if _before(c, b):
        b = c
        if _before(b, a):
            b = a
    return b


@kernel
def _kth_smallest(values, size, k):
    """What `np.partition(values[:size], k)[k]` holds, found in place in values[:size]
    (reordered): quickselect with a three-way split, so runs of equal keys cost no more.

    Written out rather than calling np.partition: Numba's partition compiles its shape checks'
    messages and a unique() with it, 5.8 s of a cold serving loop (measured), for one number.
    """
    lo, hi = 0, size - 1
    while lo < hi:
        pivot = _median_of_three(values[lo], values[(lo + hi) // 2], values[hi])
        below, i, above = lo, lo, hi  # [lo, below) < pivot, [below, i) == pivot, (above, hi] >
        while i <= above:
            v = values[i]
            if _before(v, pivot):
                values[i], values[below] = values[below], v
                below += 1
                i += 1
            elif _before(pivot, v):
                values[i], values[above] = values[above], v
                above -= 1
            else:
                i += 1
        if k < below:
            hi = below - 1
        elif k > above:
            lo = above + 1
        else:
            return pivot
    return values[k]


@inline_kernel
def _gather(keys, slots, size, cut, above, heap_keys, heap_slots):
    """Copy the entries with key <= `cut` (or > `cut` when `above`) to the heap; how many."""
    m = 0
    for i in range(size):
        if (keys[i] > cut) == above:
            heap_keys[m], heap_slots[m] = keys[i], slots[i]
            m += 1
    return m


@kernel
def _take_best(keys, slots, size, est_time_s, kv_need, bucket, opened, taken, out, count,
               time_left, pages_left, max_batch, heap_keys, heap_slots):
    """`_take_in_order` over the first `size` (key, slot) entries of two arrays.

    The batch takes at most `room` more entries, so only the best are heaped (a linear-time
    partition finds them); the others, still in order, only if misfits leave room and one of
    them fits. Every key of the first part is <= every key of the rest: the order is the full
    one, at O(size + B log B) instead of O(size log size).
    """
    room = max_batch - count
    cut = np.inf
    if size > 4 * room + 64:
        for i in range(size):  # the heap is free until _gather fills it
            heap_keys[i] = keys[i]
        cut = _kth_smallest(heap_keys, size, room)
    m = _gather(keys, slots, size, cut, False, heap_keys, heap_slots)
    count, time_left, pages_left = _take_in_order(heap_keys, heap_slots, m, est_time_s,
                                                  kv_need, bucket, opened, taken, out, count,
                                                  time_left, pages_left, max_batch)
    if count < max_batch and cut < np.inf and _any_fits(keys, slots, size, cut, est_time_s,
                                                       kv_need, time_left, pages_left):
        m = _gather(keys, slots, size, cut, True, heap_keys, heap_slots)
        count, time_left, pages_left = _take_in_order(heap_keys, heap_slots, m, est_time_s,
                                                      kv_need, bucket, opened, taken, out,
                                                      count, time_left, pages_left, max_batch)
    return count, time_left, pages_left


@kernel
def select_into(deadline_s, est_time_s, weight, bucket, kv_need, active, n, now_s, horizon_s,
                time_budget_s, kv_budget_pages, max_batch, value_mode, lateness_scale_s, out,
                stats, work):
    """`select_decode_batch` over the first `n` slots, working in `work` (a KnapsackWork)."""
    keys, slots, taken = work.floats[KEYS], work.ints[SLOTS], work.ints[TAKEN]
    opened, heap_keys, heap_slots = work.per_bucket[OPENED], work.floats[HEAP_KEYS], work.ints[
        HEAP_SLOTS]
    num_urgent = 0
    earliest = -1
    for slot in range(n):
        taken[slot] = 0
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
    opened[:] = 0
    count, time_left, pages_left = _take_best(keys, slots, num_urgent, est_time_s, kv_need,
                                              bucket, opened, taken, out, 0, time_budget_s,
                                              kv_budget_pages, max_batch, heap_keys,
                                              heap_slots)
    for i in range(num_urgent):  # urgent requests left out, and the pages they need
        if not taken[slots[i]]:
            stats[1] += kv_need[slots[i]]
    if count == 0:  # nothing urgent fitted: fill around the earliest deadline
        opened[bucket[earliest]] = 1
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
                                      max_batch, heap_keys, heap_slots)
    stats[0] = kv_budget_pages - pages_left
    return count


def select_decode_batch(deadline_s, est_time_s, weight, bucket, kv_need, active, now_s,
                        horizon_s, time_budget_s, kv_budget_pages, max_batch, value_mode,
                        lateness_scale_s, out, stats) -> int:
    """Greedy deadline knapsack; writes chosen slots to `out` and returns how many.

    All per-slot arrays have one entry per policy slot; `active[slot]` marks decodable ones.
    Ties go to the lower slot (entries are ordered as `(key, slot)` pairs), so the choice is
    total. `stats` receives the pages the batch takes and the pages the urgent requests left
    out would need (the scheduler preempts when those exceed what is free).
    """
    n = len(active)
    return int(select_into(deadline_s, est_time_s, weight, bucket, kv_need, active, n, now_s,
                           horizon_s, time_budget_s, kv_budget_pages, max_batch, value_mode,
                           lateness_scale_s, out, stats, new_knapsack_work(n)))
