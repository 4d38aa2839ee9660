"""The compiled ladder decision (`plan_relief`) against a plain-Python reading of the rules.

The oracle below climbs the ladder on a copy of the pool, acting through `PagePool`'s methods
(the pool itself tracks what each action changes), as `PressureLadder.relieve` did before its
decision was compiled. Random pools (forks, quantized, spilled and unknown candidates, a CPU
tier, a pending need) must give the same actions from the plan, leave the pool untouched by
it, and end in the same pool once `relieve` applies them.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from refimpl.errors import CapacityError, KVCacheError
from refimpl.kv import (
    KVCandidate,
    LadderConfig,
    LadderStep,
    PagePool,
    PressureLadder,
    RequestState,
)
from refimpl.kv import _ladder_kernels as LK

ARRAYS = ("refcount", "free_stack", "counters", "tables", "num_pages_of", "lengths",
          "tokens_per_page", "states")


def oracle(pool: PagePool, candidates, cfg: LadderConfig, need_pages, page_bytes, bandwidth):
    """The ladder's rules read plainly, applied to `pool`: (step, index, freed, transfer_s)."""
    def pressure():
        return (pool.num_used_pages + need_pages) / pool.num_pages

    resident = [i for i, c in enumerate(candidates)
                if c.request_id in pool and pool.state(c.request_id) is RequestState.RESIDENT]
    cappable = [i for i in resident if candidates[i].priority >= cfg.low_priority
                and candidates[i].context_tokens >= cfg.long_context_tokens]

    def by(key):
        return lambda indices: sorted(indices, key=lambda i: key(candidates[i]))

    cap = by(lambda c: (-c.priority, -c.context_tokens, c.request_id))
    tolerant = by(lambda c: (-c.priority, -c.slack_s, -c.context_tokens, c.request_id))
    newest = by(lambda c: (-c.priority, -c.arrival_s, -c.request_id))
    steps = [(LadderStep.CAP_LENGTH, cfg.cap_above, cap(cappable)),
             (LadderStep.QUANTIZE, cfg.quantize_above, tolerant(resident)),
             (LadderStep.SPILL, cfg.spill_above, tolerant(resident)),
             (LadderStep.PREEMPT, cfg.preempt_above, newest(resident))]
    done, out = set(), []
    for step, threshold, victims in steps:
        for i in victims:
            request_id = candidates[i].request_id
            if pressure() <= threshold and pool.num_free_pages >= need_pages:
                break
            if request_id in done:
                continue
            table, before, transfer_s = pool.page_table(request_id), pool.num_free_pages, 0.0
            if step is LadderStep.QUANTIZE:
                shared = any(pool.refcount[page] > 1 for page in table)
                keep = -(-pool.length(request_id) // (pool.page_size * cfg.quantize_factor))
                if pool.is_quantized(request_id) or shared or keep == len(table):
                    continue
                pool.quantize(request_id, cfg.quantize_factor)
            elif step is LadderStep.SPILL:
                room = pool.cpu_tier_pages - pool.stats().num_spilled_pages
                if not table or len(table) > room:
                    continue
                pool.spill(request_id)
                transfer_s = len(table) * page_bytes / bandwidth
            else:
                pool.free(request_id)
            if step is not LadderStep.QUANTIZE:
                done.add(request_id)
            out.append((step, i, pool.num_free_pages - before, transfer_s))
    return out


def random_scenario(rng: np.random.Generator):
    """A pool under pressure, candidates for it, and a ladder config."""
    page = int(rng.choice([1, 2, 4]))
    pool = PagePool(int(rng.integers(6, 48)), page, max_context=400,
                    cpu_tier_pages=int(rng.integers(0, 30)), initial_slots=4)
    ids = []
    for request_id in range(int(rng.integers(1, 14))):
        try:
            if ids and rng.random() < 0.3:
                pool.fork(int(rng.choice(ids)), request_id)
                if rng.random() < 0.5:
                    pool.append(request_id, int(rng.integers(0, 3 * page)))
            else:
                pool.allocate(request_id, int(rng.integers(0, 10 * page)))
            ids.append(request_id)
        except (CapacityError, KVCacheError):
            pass  # a full pool, or a fork of a spilled request: the next one
        if ids and rng.random() < 0.25:
            try:
                chosen = int(rng.choice(ids))
                pool.quantize(chosen, int(rng.choice([2, 4])))
            except KVCacheError:
                pass  # shared or spilled
        if ids and rng.random() < 0.15:
            chosen = int(rng.choice(ids))
            if pool.state(chosen) is RequestState.RESIDENT and pool.can_spill(chosen):
                pool.spill(chosen)
        if ids and rng.random() < 0.1:
            pool.free(ids.pop(int(rng.integers(len(ids)))))
    named = [*ids, 1000, 1001]  # two that the pool never saw
    candidates = [KVCandidate(int(r), int(rng.integers(0, 4)), int(rng.integers(0, 40)),
                              float(rng.choice([0.0, 0.5, 1.0, np.inf, rng.random()])),
                              float(rng.choice([0.0, 1.0, rng.random()])))
                  for r in rng.permutation(named) if rng.random() < 0.8]
    if candidates and rng.random() < 0.3:
        candidates.append(candidates[int(rng.integers(len(candidates)))])  # named twice
    thresholds = np.sort(rng.uniform(0.05, 1.0, 5))
    cfg = LadderConfig(*thresholds.tolist(), low_priority=int(rng.integers(0, 4)),
                       long_context_tokens=int(rng.integers(1, 40)),
                       quantize_factor=int(rng.choice([2, 4])))
    need_pages = int(rng.integers(0, pool.num_pages // 2 + 1))
    page_bytes = int(rng.integers(1, 5000)) if rng.random() < 0.5 else float(rng.random())
    return pool, candidates, cfg, need_pages, page_bytes, float(rng.uniform(0.5, 1e6))


def snapshot(pool: PagePool):
    return [getattr(pool, name).copy() for name in ARRAYS]


@pytest.mark.parametrize("first_seed", range(0, 600, 100))
def test_the_compiled_plan_matches_the_rules_and_changes_nothing(first_seed):
    for seed in range(first_seed, first_seed + 100):
        pool, candidates, cfg, need_pages, page_bytes, bandwidth = random_scenario(
            np.random.default_rng(seed))
        ladder = PressureLadder(cfg, page_bytes, bandwidth)
        expected_pool = copy.deepcopy(pool)
        expected = oracle(expected_pool, candidates, cfg, need_pages, page_bytes, bandwidth)
        before = snapshot(pool)
        assert ladder.plan(pool, candidates, need_pages) == expected, seed
        assert all(np.array_equal(a, b) for a, b in zip(before, snapshot(pool), strict=True))
        actions = [a for a in ladder.relieve(pool, candidates, 0.0, need_pages)
                   if a.step is not LadderStep.QUEUE_NEW]
        assert [(a.step, a.request_id, a.pages_freed, a.transfer_s) for a in actions] == [
            (step, candidates[i].request_id, freed, transfer_s)
            for step, i, freed, transfer_s in expected], seed
        for name, a, b in zip(ARRAYS, snapshot(pool), snapshot(expected_pool), strict=True):
            assert np.array_equal(a, b), (seed, name)


def test_the_plan_refuses_outputs_too_small_for_every_candidate():
    pool = PagePool(4, 4)
    pool.allocate(1, 16)
    slots = np.zeros(1, np.int64)
    ints, floats = np.ones(1, np.int64), np.zeros(1, np.float64)
    actions, transfer_s = np.zeros((1, 3), np.int64), np.zeros(1, np.float64)
    count = LK.plan_relief(pool.refcount, pool.counters, pool.tables, pool.num_pages_of,
                           pool.lengths, pool.tokens_per_page, pool.states, 4, 0, slots, ints,
                           ints, floats, floats, ints, 0.5, 0.6, 0.7, 0.8, 0, 1, 2, 0, 1, 1.0,
                           actions, transfer_s)
    assert count == LK.OUT_TOO_SMALL and not actions.any()
