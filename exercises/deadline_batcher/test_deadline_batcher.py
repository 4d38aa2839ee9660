"""Graded tests for the deadline batcher, against a re-scanning (O(n * batch)) greedy oracle."""

from __future__ import annotations

import random
from typing import NamedTuple

import pytest

from refimpl.grading.measure import elapsed_s

EDGES = [0, 512, 1024, 2048]


class Req(NamedTuple):
    """A decode request as the batcher sees it."""

    request_id: int
    context_tokens: int
    deadline_s: float
    weight: float = 1.0
    est_time_s: float = 0.001
    kv_bytes: int = 1


def pick(solution, requests, now_s=0.0, time_budget_s=1.0, kv_budget_bytes=10**9,
         max_batch=64, urgency_s=0.01):
    """`pick_batch` with roomy defaults."""
    return solution.pick_batch(requests, now_s, EDGES, time_budget_s, kv_budget_bytes,
                               max_batch, urgency_s)


def oracle(requests, now_s, edges, time_budget_s, kv_budget_bytes, max_batch, urgency_s):
    """The rules applied literally: rescan for the best remaining request at every step."""
    if not requests:
        return []

    def bucket(r):
        return max(i for i, edge in enumerate(edges) if r.context_tokens >= edge)

    first = min(requests, key=lambda r: (r.deadline_s, r.request_id))
    left = [r for r in requests if bucket(r) == bucket(first)]
    picked, time_s, kv_bytes = [], 0.0, 0
    while left and len(picked) < max_batch:
        urgent = [r for r in left if r.deadline_s <= now_s + urgency_s]
        if urgent:
            best = min(urgent, key=lambda r: (r.deadline_s, r.request_id))
        else:
            best = min(left, key=lambda r: (-r.weight / r.est_time_s, r.deadline_s, r.request_id))
        left.remove(best)
        fits_time = time_s + best.est_time_s <= time_budget_s
        if fits_time and kv_bytes + best.kv_bytes <= kv_budget_bytes:
            picked.append(best.request_id)
            time_s += best.est_time_s
            kv_bytes += best.kv_bytes
    return picked


@pytest.mark.points(1)
def test_context_lengths_fall_in_their_buckets(solution):
    """0 and 511 fall in bucket 0, 512 in 1, 2047 in 2; 2048 and beyond in the last."""
    cases = {0: 0, 511: 0, 512: 1, 1023: 1, 1024: 2, 2047: 2, 2048: 3, 10**6: 3}
    for tokens, want in cases.items():
        assert solution.bucket_of(tokens, EDGES) == want, tokens


@pytest.mark.points(1)
def test_no_requests_give_an_empty_batch(solution):
    """No active requests: an empty batch."""
    assert pick(solution, []) == []


@pytest.mark.points(1)
def test_the_batch_comes_from_the_most_urgent_requests_bucket(solution):
    """Only requests in the bucket of the earliest deadline are batched, whatever their value."""
    requests = [Req(1, 100, 5.0, weight=100), Req(2, 700, 1.0), Req(3, 900, 9.0),
                Req(4, 1500, 2.0)]
    assert pick(solution, requests) == [2, 3]


@pytest.mark.points(2)
def test_urgent_requests_go_first_then_value_per_second(solution):
    """Due soon: earliest deadline first; the rest: weight / est_time, highest first."""
    requests = [Req(1, 10, 0.005), Req(2, 20, 0.002), Req(3, 30, 5.0, weight=1, est_time_s=0.01),
                Req(4, 40, 6.0, weight=3, est_time_s=0.01), Req(5, 50, 4.0, weight=1,
                est_time_s=0.001)]
    assert pick(solution, requests, urgency_s=0.01) == [2, 1, 5, 4, 3]


@pytest.mark.points(1)
def test_a_request_that_does_not_fit_is_skipped_not_the_end(solution):
    """A request over the time left is skipped and smaller ones after it still join."""
    requests = [Req(1, 10, 0.001, est_time_s=0.6), Req(2, 10, 0.002, est_time_s=0.5),
                Req(3, 10, 0.003, est_time_s=0.3), Req(4, 10, 9.0, est_time_s=0.1)]
    assert pick(solution, requests, time_budget_s=1.0) == [1, 3, 4]


@pytest.mark.points(1)
def test_batch_size_and_kv_budget_are_respected(solution):
    """No more than max_batch requests, and their KV bytes stay within the budget."""
    requests = [Req(i, 10, 1.0 + i, kv_bytes=100) for i in range(10)]
    assert pick(solution, requests, max_batch=3) == [0, 1, 2]
    assert pick(solution, requests, kv_budget_bytes=450) == [0, 1, 2, 3]


@pytest.mark.points(3)
def test_random_request_sets_match_the_oracle(solution):
    """400 random sets of 0 to 40 requests with random budgets match the literal rules."""
    rng = random.Random(3)
    for _ in range(400):
        requests = [Req(i, rng.choice([5, 300, 600, 1500, 4000]), rng.randrange(20) / 10,
                        rng.randrange(1, 4), rng.randrange(1, 5) / 100, rng.randrange(1, 50))
                    for i in range(rng.randrange(41))]
        rng.shuffle(requests)
        args = (rng.randrange(10) / 10, EDGES, rng.randrange(1, 30) / 100, rng.randrange(1, 300),
                rng.randrange(1, 12), rng.randrange(10) / 10)
        assert solution.pick_batch(requests, *args) == oracle(requests, *args)


@pytest.mark.points(1)
def test_a_hundred_thousand_requests_take_under_two_seconds(solution):
    """O(n log n): a batch of up to 1,000 from 100,000 requests in under 2 s."""
    rng = random.Random(4)
    requests = [Req(i, rng.randrange(4096), rng.random(), rng.random() + 0.1,
                    rng.random() / 1000 + 1e-6, rng.randrange(1, 100)) for i in range(100_000)]
    batch, seconds = elapsed_s(lambda: solution.pick_batch(requests, 0.0, EDGES, 10.0, 10**9,
                                                           1000, 0.05))
    assert seconds < 2.0, f"took {seconds:.1f} s: sort each group once instead of rescanning"
    assert len(batch) == 1000
