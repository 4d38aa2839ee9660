"""Graded tests for the rolling-window quantile, against sorting the window from scratch."""

from __future__ import annotations

import math
import random

import pytest

from refimpl.grading.measure import elapsed_s


def brute_force(samples, now_s, window_s, quantile):
    """The oracle: filter the window, sort it, take the nearest rank."""
    window = sorted(v for t, v in samples if now_s - window_s < t <= now_s)
    return window[math.ceil(quantile * len(window)) - 1] if window else None


@pytest.mark.points(1)
def test_an_empty_window_has_no_value(solution):
    """Before any sample, and after all samples expire, value() is None."""
    rolling = solution.RollingQuantile(10.0)
    assert rolling.value(0.0) is None
    rolling.add(1.0, 5.0)
    assert rolling.value(50.0) is None


@pytest.mark.points(1)
def test_the_p95_is_the_nearest_rank(solution):
    """p95 of 1..100 is 95, of 1..20 is 19; a single sample is its own p95."""
    for num, want in ((100, 95), (20, 19), (1, 1)):
        rolling = solution.RollingQuantile(1000.0)
        for i in range(num, 0, -1):  # arrival order must not matter
            rolling.add(float(num - i), float(i))
        assert rolling.value(float(num)) == want, num


@pytest.mark.points(1)
def test_samples_leave_the_window_once_window_s_old(solution):
    """A sample at t counts while now - window_s < t: at now = t + window_s it is gone."""
    rolling = solution.RollingQuantile(10.0)
    rolling.add(0.0, 100.0)
    rolling.add(5.0, 1.0)
    assert rolling.value(9.99) == 100.0
    assert rolling.value(10.0) == 1.0
    assert rolling.value(15.0) is None


@pytest.mark.points(1)
def test_other_quantiles_use_the_same_rule(solution):
    """Median (q=0.5) of 1..10 is 5; q=1.0 is the maximum; q=0.01 is the minimum."""
    for quantile, want in ((0.5, 5.0), (1.0, 10.0), (0.01, 1.0)):
        rolling = solution.RollingQuantile(100.0, quantile)
        for i in range(1, 11):
            rolling.add(float(i), float(i))
        assert rolling.value(10.0) == want, quantile


@pytest.mark.points(1)
def test_time_going_backwards_raises_value_error(solution):
    """add or value with an earlier time than already seen raises ValueError naming it."""
    rolling = solution.RollingQuantile(10.0)
    rolling.add(5.0, 1.0)
    with pytest.raises(ValueError, match="t_s"):
        rolling.add(4.0, 1.0)
    rolling.value(6.0)
    with pytest.raises(ValueError, match="now_s"):
        rolling.value(5.5)


@pytest.mark.points(3)
def test_random_streams_match_sorting_the_window(solution):
    """20 random streams of 400 steps (bursts, gaps, repeats) match a sort of the window."""
    rng = random.Random(5)
    for _ in range(20):
        window_s, quantile = rng.choice([0.5, 2.0, 10.0]), rng.choice([0.5, 0.9, 0.95, 0.99])
        rolling, samples, now_s = solution.RollingQuantile(window_s, quantile), [], 0.0
        for step in range(400):
            now_s += rng.choice([0.0, 0.0, 0.01, 0.1, 1.0, 5.0])
            if rng.random() < 0.7:
                value = float(rng.randrange(20))
                rolling.add(now_s, value)
                samples.append((now_s, value))
            else:
                want = brute_force(samples, now_s, window_s, quantile)
                assert rolling.value(now_s) == want, f"step {step}"


@pytest.mark.points(2)
def test_fifty_thousand_samples_and_queries_take_under_three_seconds(solution):
    """50,000 adds, each followed by a query, over a window holding them all: under 3 s."""
    rng = random.Random(6)
    values = [rng.random() for _ in range(50_000)]

    def stream():
        rolling = solution.RollingQuantile(1e9)
        for i, value in enumerate(values):
            rolling.add(float(i), value)
            rolling.value(float(i))
        return rolling.value(float(len(values)))

    last, seconds = elapsed_s(stream)
    assert seconds < 3.0, f"took {seconds:.1f} s: keep the window sorted instead of sorting it"
    assert last == sorted(values)[47_499]


@pytest.mark.points(1)
def test_bad_windows_and_quantiles_raise_value_error(solution):
    """window_s <= 0 or a quantile outside (0, 1] raise ValueError naming the argument."""
    with pytest.raises(ValueError, match="window_s"):
        solution.RollingQuantile(0.0)
    for quantile in (0.0, 1.5):
        with pytest.raises(ValueError, match="quantile"):
            solution.RollingQuantile(1.0, quantile)
