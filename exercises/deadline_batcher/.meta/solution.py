"""Reference solution: the seed's greedy deadline knapsack by length bucket, O(n log n).

One pass finds the most urgent request; its bucket's requests are split into urgent and
the rest, each sorted once, and a single greedy pass admits what fits. Exact knapsack would
be exponential; the greedy protects deadlines first and then packs value per second.
"""

from __future__ import annotations

from bisect import bisect_right


def bucket_of(context_tokens: int, bucket_edges: list[int]) -> int:
    """Index i of the bucket [edges[i], edges[i+1]) holding `context_tokens`."""
    return bisect_right(bucket_edges, context_tokens) - 1


def pick_batch(requests: list, now_s: float, bucket_edges: list[int], time_budget_s: float,
               kv_budget_bytes: int, max_batch: int, urgency_s: float) -> list[int]:
    """Ids of the decode requests to batch this tick, in the order they were picked."""
    if not requests:
        return []
    most_urgent = min(requests, key=lambda r: (r.deadline_s, r.request_id))
    bucket = bucket_of(most_urgent.context_tokens, bucket_edges)
    members = [r for r in requests if bucket_of(r.context_tokens, bucket_edges) == bucket]
    urgent = sorted((r for r in members if r.deadline_s <= now_s + urgency_s),
                    key=lambda r: (r.deadline_s, r.request_id))
    rest = sorted((r for r in members if r.deadline_s > now_s + urgency_s),
                  key=lambda r: (-r.weight / r.est_time_s, r.deadline_s, r.request_id))
    picked: list[int] = []
    time_s, kv_bytes = 0.0, 0
    for request in urgent + rest:
        if len(picked) == max_batch:
            break
        if (time_s + request.est_time_s <= time_budget_s
                and kv_bytes + request.kv_bytes <= kv_budget_bytes):
            picked.append(request.request_id)
            time_s += request.est_time_s
            kv_bytes += request.kv_bytes
    return picked
