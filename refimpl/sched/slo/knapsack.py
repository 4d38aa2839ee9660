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

Cost: one pass over the N active requests, plus sorting the urgent (U) and fill (F) candidates:
O(N + U log U + F log F), never more than O(N log N). `select_decode_batch` is the Numba
version the `slo` policy runs; `select_decode_batch_python` is the same algorithm in plain
Python, the baseline of `refimpl bench sched`.
"""

from __future__ import annotations

import numpy as np

from refimpl._numba import kernel

__all__ = [
    "VALUE_LATENESS",
    "VALUE_PER_TIME",
    "bucket_array",
    "bucket_of",
    "select_decode_batch",
    "select_decode_batch_python",
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
def bucket_array(context_tokens, first_bucket_tokens):
    """`bucket_of` of every entry of an int64 array."""
    out = np.empty(context_tokens.shape[0], np.int64)
    for i in range(context_tokens.shape[0]):
        out[i] = bucket_of(context_tokens[i], first_bucket_tokens)
    return out


@kernel
def select_decode_batch(deadline_s, est_time_s, weight, bucket, kv_need, active, now_s,
                        horizon_s, time_budget_s, kv_budget_pages, max_batch, value_mode,
                        lateness_scale_s, out):
    """Greedy deadline knapsack; writes chosen slots to `out` and returns how many.

    All per-slot arrays have one entry per policy slot; `active[slot]` marks decodable ones.
    """
    n = active.shape[0]
    urgent = np.empty(n, np.int64)
    num_urgent = 0
    earliest = -1
    for slot in range(n):
        if not active[slot]:
            continue
        if earliest < 0 or deadline_s[slot] < deadline_s[earliest]:
            earliest = slot
        if deadline_s[slot] < now_s + horizon_s:
            urgent[num_urgent] = slot
            num_urgent += 1
    if earliest < 0:
        return 0
    urgent = urgent[:num_urgent]
    urgent = urgent[np.argsort(deadline_s[urgent], kind="mergesort")]  # stable: ties by slot
    num_buckets = bucket.max() + 1 if n > 0 else 1
    opened = np.zeros(num_buckets, np.bool_)
    taken = np.zeros(n, np.bool_)
    time_left, pages_left, count = time_budget_s, kv_budget_pages, 0
    for slot in urgent:
        if count == max_batch:
            break
        if est_time_s[slot] <= time_left and kv_need[slot] <= pages_left:
            time_left -= est_time_s[slot]
            pages_left -= kv_need[slot]
            taken[slot] = True
            opened[bucket[slot]] = True
            out[count] = slot
            count += 1
    if count == 0:  # nothing urgent fitted: fill around the earliest deadline
        opened[bucket[earliest]] = True
    fill = np.empty(n, np.int64)
    value = np.empty(n, np.float64)
    num_fill = 0
    for slot in range(n):
        if active[slot] and not taken[slot] and opened[bucket[slot]]:
            if value_mode == VALUE_PER_TIME:
                value[num_fill] = weight[slot] / max(est_time_s[slot], 1e-12)
            else:
                slack_s = max(deadline_s[slot] - now_s, 0.0)
                value[num_fill] = weight[slot] / (1.0 + slack_s / lateness_scale_s)
            fill[num_fill] = slot
            num_fill += 1
    order = np.argsort(-value[:num_fill], kind="mergesort")  # highest value first, stable
    for i in order:
        if count == max_batch:
            break
        slot = fill[i]
        if est_time_s[slot] <= time_left and kv_need[slot] <= pages_left:
            time_left -= est_time_s[slot]
            pages_left -= kv_need[slot]
            out[count] = slot
            count += 1
    return count


def select_decode_batch_python(deadline_s, est_time_s, weight, bucket, kv_need, active, now_s,
                               horizon_s, time_budget_s, kv_budget_pages, max_batch,
                               value_mode, lateness_scale_s) -> list[int]:
    """`select_decode_batch` written plainly in Python over lists: the benchmark's baseline."""
    slots = [s for s in range(len(active)) if active[s]]
    if not slots:
        return []
    urgent = sorted((s for s in slots if deadline_s[s] < now_s + horizon_s),
                    key=lambda s: (deadline_s[s], s))
    chosen: list[int] = []
    opened: set[int] = set()
    time_left, pages_left = time_budget_s, kv_budget_pages
    for s in urgent:
        if len(chosen) == max_batch:
            break
        if est_time_s[s] <= time_left and kv_need[s] <= pages_left:
            time_left -= est_time_s[s]
            pages_left -= kv_need[s]
            chosen.append(s)
            opened.add(bucket[s])
    if not chosen:
        opened.add(bucket[min(slots, key=lambda s: (deadline_s[s], s))])
    taken = set(chosen)

    def value(s: int) -> float:
        if value_mode == VALUE_PER_TIME:
            return weight[s] / max(est_time_s[s], 1e-12)
        return weight[s] / (1.0 + max(deadline_s[s] - now_s, 0.0) / lateness_scale_s)

    fill = [s for s in slots if s not in taken and bucket[s] in opened]
    for s in sorted(fill, key=lambda s: -value(s)):  # sorted() is stable: ties keep slot order
        if len(chosen) == max_batch:
            break
        if est_time_s[s] <= time_left and kv_need[s] <= pages_left:
            time_left -= est_time_s[s]
            pages_left -= kv_need[s]
            chosen.append(s)
    return chosen
