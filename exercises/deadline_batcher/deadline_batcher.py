"""Your solution to the deadline-batcher exercise: fill in `bucket_of` and `pick_batch`."""

from __future__ import annotations


def bucket_of(context_tokens: int, bucket_edges: list[int]) -> int:
    """Index i of the bucket [edges[i], edges[i+1]) holding `context_tokens`.

    `bucket_edges` is increasing and starts at 0; the last bucket has no upper end.
    """
    raise NotImplementedError("bucket_of: not written yet")


def pick_batch(requests: list, now_s: float, bucket_edges: list[int], time_budget_s: float,
               kv_budget_bytes: int, max_batch: int, urgency_s: float) -> list[int]:
    """Ids of the decode requests to batch this tick, in the order they were picked.

    Each request has `.request_id`, `.context_tokens`, `.deadline_s`, `.weight`,
    `.est_time_s` and `.kv_bytes`. The batch comes from one bucket: the bucket of the most
    urgent request. Take first that bucket's requests due by now_s + urgency_s, earliest
    deadline first; then the rest by weight / est_time_s, highest first. Add each request
    that still fits (count <= max_batch, summed est_time_s <= time_budget_s, summed
    kv_bytes <= kv_budget_bytes); skip one that does not and go on. Ties: earlier deadline,
    then smaller request_id.
    """
    raise NotImplementedError("pick_batch: not written yet")
