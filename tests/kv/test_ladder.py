"""The memory-pressure ladder: which step fires at which pressure, and whom each step picks."""

from __future__ import annotations

import pytest

from refimpl.errors import ConfigError
from refimpl.kv import KVCandidate, LadderConfig, LadderStep, PagePool, PressureLadder

PAGE = 4


def fill(pool: PagePool, specs):
    """Allocate `(request_id, tokens, priority, slack_s, arrival_s)` and return candidates."""
    candidates = []
    for request_id, tokens, priority, slack_s, arrival_s in specs:
        pool.allocate(request_id, tokens)
        candidates.append(KVCandidate(request_id, priority, tokens, slack_s, arrival_s))
    return candidates


def steps(actions):
    return [(a.step, a.request_id) for a in actions]


def test_no_action_below_the_first_watermark():
    pool = PagePool(100, PAGE)
    candidates = fill(pool, [(1, 80 * PAGE, 2, 1.0, 0.0)])
    assert PressureLadder().relieve(pool, candidates, now_s=1.0) == []


def test_between_the_watermarks_only_new_requests_are_held():
    pool = PagePool(100, PAGE)
    candidates = fill(pool, [(1, 87 * PAGE, 2, 1.0, 0.0)])
    actions = PressureLadder().relieve(pool, candidates, now_s=2.5)
    assert steps(actions) == [(LadderStep.QUEUE_NEW, None)]
    assert actions[0].time_s == 2.5 and actions[0].utilization == pytest.approx(0.87)
    assert pool.num_used_pages == 87


def test_caps_low_priority_long_requests_longest_first_and_never_high_priority():
    pool = PagePool(100, PAGE)
    config = LadderConfig(long_context_tokens=10 * PAGE)
    candidates = fill(pool, [
        (1, 40 * PAGE, 0, 9.0, 0.0),  # high priority: never capped
        (2, 20 * PAGE, 1, 9.0, 0.0),
        (3, 30 * PAGE, 1, 9.0, 0.0),  # longest low-priority: capped first
        (4, 2 * PAGE, 1, 9.0, 0.0),  # short: not a cap candidate
    ])  # 92% used
    actions = PressureLadder(config).relieve(pool, candidates, now_s=0.0)
    assert steps(actions) == [(LadderStep.QUEUE_NEW, None), (LadderStep.CAP_LENGTH, 3)]
    assert actions[1].pages_freed == 30
    assert 3 not in pool and 1 in pool and 2 in pool


def test_quantizes_the_most_latency_tolerant_first_and_skips_shared_pages():
    pool = PagePool(100, PAGE)
    config = LadderConfig(low_priority=5)  # nobody is cappable
    candidates = fill(pool, [
        (1, 30 * PAGE, 1, 5.0, 0.0),
        (2, 30 * PAGE, 1, 0.1, 0.0),
        (3, 34 * PAGE, 1, 9.0, 0.0),  # most slack, but shares pages with a fork
    ])  # 94% used
    pool.fork(3, 4)
    actions = PressureLadder(config).relieve(pool, candidates, now_s=0.0)
    assert steps(actions) == [(LadderStep.QUEUE_NEW, None), (LadderStep.QUANTIZE, 1)]
    assert actions[1].pages_freed == 15 and pool.is_quantized(1)
    assert not pool.is_quantized(3) and not pool.is_quantized(2)


def test_spills_with_the_transfer_charged_and_within_the_tier():
    pool = PagePool(100, PAGE, cpu_tier_pages=10)
    config = LadderConfig(low_priority=5, quantize_factor=2)
    candidates = fill(pool, [
        (1, 30 * PAGE, 2, 9.0, 0.0),  # most tolerant, but 15 pages do not fit the tier
        (2, 10 * PAGE, 2, 8.0, 0.0),
        (3, 57 * PAGE, 0, 0.1, 0.0),
    ])
    for request_id in (1, 2, 3):
        pool.quantize(request_id, 2)  # already quantized: the ladder must go further
    pool.allocate(9, 48 * PAGE)  # not a candidate (e.g. the request being admitted)
    ladder = PressureLadder(config, page_bytes=1000, host_bandwidth_bytes_s=1e6)
    actions = ladder.relieve(pool, candidates, now_s=3.0)  # 97% used
    assert steps(actions) == [(LadderStep.QUEUE_NEW, None), (LadderStep.SPILL, 2)]
    assert actions[1].transfer_s == pytest.approx(5 * 1000 / 1e6)
    assert actions[1].pages_freed == 5
    assert pool.stats().num_spilled == 1 and ladder.history == actions


def test_preempts_the_newest_low_priority_request_last_of_all():
    pool = PagePool(100, PAGE, max_context=1000)
    config = LadderConfig(low_priority=5)
    candidates = []
    for request_id, pages, priority, arrival_s in [(1, 60, 1, 1.0), (2, 40, 1, 2.0),
                                                   (3, 0, 0, 3.0)]:  # 3: newest, high priority
        pool.allocate(request_id, pages * PAGE)
        if pages:
            pool.quantize(request_id, 2)  # already quantized: the ladder must go further
            pool.append(request_id, pages * PAGE)  # refill: quantized pages hold 8 tokens
        candidates.append(KVCandidate(request_id, priority, 2 * pages * PAGE, 1.0, arrival_s))
    actions = PressureLadder(config).relieve(pool, candidates, now_s=0.0)  # no tier: no spill
    assert steps(actions) == [(LadderStep.QUEUE_NEW, None), (LadderStep.PREEMPT, 2)]
    assert actions[-1].pages_freed == 40 and 2 not in pool and 1 in pool


def test_preemption_of_shared_pages_frees_nothing_and_goes_on_newest_first():
    pool = PagePool(100, PAGE)
    config = LadderConfig(low_priority=5)
    candidates = fill(pool, [(1, 50 * PAGE, 1, 1.0, 1.0), (2, 50 * PAGE, 1, 1.0, 2.0)])
    pool.fork(1, 3)  # forks block quantization and keep the pages alive
    pool.fork(2, 4)
    actions = PressureLadder(config).relieve(pool, candidates, now_s=0.0)
    assert steps(actions)[-2:] == [(LadderStep.PREEMPT, 2), (LadderStep.PREEMPT, 1)]
    assert all(a.pages_freed == 0 for a in actions)


def test_a_pending_need_escalates_until_the_pages_are_free():
    pool = PagePool(10, PAGE)
    config = LadderConfig(low_priority=5)
    candidates = fill(pool, [(1, 4 * PAGE, 1, 1.0, 0.0), (2, 4 * PAGE, 1, 1.0, 1.0)])
    actions = PressureLadder(config).relieve(pool, candidates, now_s=0.0, need_pages=5)
    assert pool.num_free_pages >= 5
    assert [a.step for a in actions][:2] == [LadderStep.QUEUE_NEW, LadderStep.QUANTIZE]


def test_spilled_or_unknown_candidates_are_left_alone():
    pool = PagePool(10, PAGE, cpu_tier_pages=10)
    candidates = fill(pool, [(1, 9 * PAGE, 1, 1.0, 0.0)])
    pool.spill(1)
    gone = KVCandidate(42, 3, 100, 1.0, 0.0)
    assert PressureLadder().relieve(pool, [*candidates, gone], now_s=0.0) == []


@pytest.mark.parametrize(("field", "kwargs"), [
    ("cap_above", {"cap_above": 1.5}),
    ("thresholds", {"quantize_above": 0.8}),
    ("quantize_factor", {"quantize_factor": 3}),
    ("queue_new_above", {"queue_new_above": 0}),
])
def test_bad_ladder_configs_are_rejected(field, kwargs):
    with pytest.raises(ConfigError, match=field):
        LadderConfig(**kwargs)


def test_holding_new_requests_is_recorded_once_per_episode():
    pool = PagePool(100, PAGE)
    candidates = fill(pool, [(1, 87 * PAGE, 2, 1.0, 0.0)])
    ladder = PressureLadder()
    for now_s in (1.0, 2.0, 3.0):
        ladder.relieve(pool, candidates, now_s)
    pool.free(1)
    ladder.relieve(pool, [], 4.0)
    pool.allocate(2, 90 * PAGE)
    ladder.relieve(pool, [], 5.0)
    assert [(a.step, a.time_s) for a in ladder.history] == [
        (LadderStep.QUEUE_NEW, 1.0), (LadderStep.QUEUE_NEW, 5.0)]


def test_a_rung_acts_only_above_its_threshold_not_at_it():
    config = LadderConfig(low_priority=5, quantize_above=0.9)  # nobody cappable
    pool = PagePool(100, PAGE)
    candidates = fill(pool, [(1, 45 * PAGE, 1, 5.0, 0.0), (2, 45 * PAGE, 1, 5.0, 0.0)])
    at = PressureLadder(config).relieve(pool, candidates, now_s=0.0)  # 90% used: at it
    assert LadderStep.QUANTIZE not in [a.step for a in at]
    pool.append(2, PAGE)  # 91%: above it
    above = PressureLadder(config).relieve(pool, candidates, now_s=0.0)
    assert LadderStep.QUANTIZE in [a.step for a in above]
