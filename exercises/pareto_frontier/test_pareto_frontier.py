"""Graded tests for the Pareto frontier under an SRAM budget, against an O(n^2) oracle."""

from __future__ import annotations

import itertools
import random

import pytest

from refimpl.grading.measure import elapsed_s


def brute_force(candidates, budget):
    """The oracle: test every fitting pair for dominance."""
    fitting = [c for c in candidates if c[1] <= budget]
    kept = [a for a in fitting if not any(
        b[2] <= a[2] and b[3] <= a[3] and (b[2] < a[2] or b[3] < a[3]) for b in fitting)]
    return [name for name, _, _, _ in sorted(kept, key=lambda c: (c[2], c[3], c[0]))]


def random_candidates(rng, num):
    """Candidates with few distinct values, so ties on latency, traffic or both are common."""
    return [(f"k{i}", rng.randrange(0, 100), rng.randrange(1, 12) / 4, rng.randrange(1, 12))
            for i in range(num)]


@pytest.mark.points(1)
def test_no_candidates_give_an_empty_frontier(solution):
    """An empty list of candidates gives []."""
    assert solution.pareto_frontier([], 1024) == []


@pytest.mark.points(1)
def test_candidates_over_the_budget_are_left_out_and_the_budget_is_inclusive(solution):
    """sram_bytes == budget fits; one byte more does not, however fast it is."""
    candidates = [("fits", 100, 2.0, 10), ("too_big", 101, 1.0, 1)]
    assert solution.pareto_frontier(candidates, 100) == ["fits"]
    assert solution.pareto_frontier(candidates, 99) == []


@pytest.mark.points(1)
def test_a_candidate_beaten_on_both_counts_is_dropped(solution):
    """Slower and more traffic than another: dropped; a trade-off: kept."""
    candidates = [("a", 1, 1.0, 30), ("b", 1, 2.0, 20), ("c", 1, 3.0, 10), ("worse", 1, 2.5, 25)]
    assert solution.pareto_frontier(candidates, 8) == ["a", "b", "c"]


@pytest.mark.points(1)
def test_ties_keep_the_better_one_or_both_when_identical(solution):
    """Equal latency: less traffic wins; equal on both: both kept, ordered by name."""
    candidates = [("z", 1, 1.0, 5), ("y", 1, 1.0, 9), ("x", 1, 1.0, 5), ("w", 1, 2.0, 5)]
    assert solution.pareto_frontier(candidates, 8) == ["x", "z"]


@pytest.mark.points(1)
def test_the_frontier_runs_from_fastest_to_least_traffic(solution):
    """Output is ordered by latency, and traffic falls strictly along it."""
    rng = random.Random(11)
    candidates = random_candidates(rng, 300)
    by_name = {c[0]: c for c in candidates}
    frontier = [by_name[name] for name in solution.pareto_frontier(candidates, 60)]
    assert frontier and frontier == sorted(frontier, key=lambda c: (c[2], c[3], c[0]))
    assert all(a[3] > b[3] for a, b in itertools.pairwise(frontier) if a[2:] != b[2:])


@pytest.mark.points(3)
def test_random_candidate_sets_match_a_brute_force_oracle(solution):
    """500 random sets of 0 to 60 candidates, random budgets, match pairwise dominance."""
    rng = random.Random(1)
    for _ in range(500):
        candidates = random_candidates(rng, rng.randrange(61))
        budget = rng.randrange(0, 110)
        assert solution.pareto_frontier(candidates, budget) == brute_force(candidates, budget)


@pytest.mark.points(2)
def test_two_hundred_thousand_candidates_take_under_two_seconds(solution):
    """O(n log n): 200,000 candidates on a long frontier in under 2 s."""
    rng = random.Random(2)
    candidates = [(f"k{i}", rng.randrange(1000), rng.random(), rng.randrange(10**9))
                  for i in range(200_000)]
    frontier, seconds = elapsed_s(lambda: solution.pareto_frontier(candidates, 500))
    assert seconds < 2.0, f"took {seconds:.1f} s: compare each candidate with a running best"
    assert len(frontier) > 5


@pytest.mark.points(1)
def test_a_negative_budget_raises_value_error(solution):
    """sram_budget_bytes < 0 raises ValueError naming sram_budget_bytes."""
    with pytest.raises(ValueError, match="sram_budget_bytes"):
        solution.pareto_frontier([("a", 1, 1.0, 1)], -1)
