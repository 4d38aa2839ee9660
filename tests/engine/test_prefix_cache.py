"""Prefix caching in the serving loop: hits counted against an oracle, less prompt work, the
switch, and balanced books under page pressure for every policy."""

from __future__ import annotations

import numpy as np
import pytest

import refimpl
from refimpl.costmodel import RooflineStepModel
from refimpl.engine import Engine, SimulatedExecutor
from refimpl.engine.simulate import cost_table_for, requests_from_workload
from refimpl.errors import ConfigError
from refimpl.kv import PagePool
from refimpl.sched import POLICIES, Request, make_policy
from refimpl.workloads import head, load_trace

BLOCK = 512
MODEL = "llama-3.1-8b"  # a 128k context: Mooncake-sized prompts fit


def shared_prefix_requests(num_requests, gap_s, seed, max_blocks=6):
    """Requests whose hashes branch off a few trunks (shared prefixes) or are their own."""
    rng = np.random.default_rng(seed)
    trunks = [tuple(range(1000 * t, 1000 * t + max_blocks)) for t in range(3)]
    requests = []
    for i in range(num_requests):
        num_blocks = int(rng.integers(1, max_blocks + 1))
        if rng.random() < 0.75:
            trunk = trunks[int(rng.integers(0, 3))]
            keep = int(rng.integers(0, num_blocks + 1))  # shared blocks, then its own
            hashes = trunk[:keep] + tuple(10**6 + 100 * i + k for k in range(num_blocks - keep))
        else:
            hashes = tuple(10**6 + 100 * i + k for k in range(num_blocks))
        prompt = num_blocks * BLOCK - int(rng.integers(0, BLOCK))  # the last block partial
        requests.append(Request(i, i * gap_s, prompt, int(rng.integers(1, 8)),
                                block_hashes=hashes))
    return requests


def expected_hits(requests):
    """Blocks a request may reuse (whole blocks before its last prompt token) whose hash chain
    was a full prompt block of an earlier request, counted in a row from its first block."""
    seen, hits = set(), 0
    for r in requests:
        eligible = min(len(r.block_hashes), (r.prompt_tokens - 1) // BLOCK)
        k = 0
        while k < eligible and r.block_hashes[:k + 1] in seen:
            k += 1
        hits += k
        seen.update(r.block_hashes[:k + 1] for k in range(r.prompt_tokens // BLOCK))
    return hits


@pytest.mark.parametrize("policy", ["vllm", "slo"])
def test_with_an_unbounded_cache_hits_are_the_blocks_whose_chain_appeared_earlier(policy):
    requests = shared_prefix_requests(60, gap_s=30.0, seed=1)  # each ends before the next
    summary = refimpl.simulate(requests, policy, model=MODEL).summary()
    assert summary["prefix_evicted_blocks"] == 0  # the pool never ran short: unbounded
    assert summary["prefix_hit_blocks"] == expected_hits(requests) > 0
    assert summary["prefix_hit_tokens"] == BLOCK * summary["prefix_hit_blocks"]


def test_a_hit_is_prompt_work_saved():
    prompt = 8 * BLOCK + 100
    requests = [Request(i, 30.0 * i, prompt, 4, block_hashes=tuple(range(9))) for i in range(2)]
    cached = refimpl.simulate(requests, "vllm", model=MODEL)
    plain = refimpl.simulate(requests, "vllm", model=MODEL, prefix_cache=False)
    assert cached.steps.num_prefill_tokens.sum() == 2 * prompt - 8 * BLOCK
    assert plain.steps.num_prefill_tokens.sum() == 2 * prompt
    ttft = cached.requests.first_token_s - cached.requests.arrival_s
    plain_ttft = plain.requests.first_token_s - plain.requests.arrival_s
    assert ttft[0] == plain_ttft[0] and ttft[1] < plain_ttft[1] / 2
    assert cached.settings["prefix_cache"] and not plain.settings["prefix_cache"]


def test_switched_off_a_run_is_the_run_without_hashes():
    requests = shared_prefix_requests(40, gap_s=0.05, seed=2)
    bare = [Request(r.request_id, r.arrival_s, r.prompt_tokens, r.max_new_tokens)
            for r in requests]
    off = refimpl.simulate(requests, "sarathi", model=MODEL, prefix_cache=False)
    none = refimpl.simulate(bare, "sarathi", model=MODEL)
    assert np.array_equal(off.requests.first_token_s, none.requests.first_token_s)
    assert np.array_equal(off.steps.duration_s, none.steps.duration_s)
    assert "prefix_hit_rate_tokens" not in off.summary()
    with pytest.raises(ConfigError, match="prefix_cache"):
        refimpl.simulate(requests, "sarathi", model=MODEL, prefix_cache="yes")


@pytest.mark.parametrize("policy", POLICIES)
def test_under_page_pressure_every_policy_ends_with_balanced_books(policy):
    # A pool of 160 pages (5 blocks) for bursts of requests of up to 4 blocks: evictions,
    # preemptions and (slo) the ladder, spills and restores through a CPU tier of 160 pages
    # (seed 4's plans restore into pages their own preemptions free, which the commit once
    # refused by restoring first); `Engine.run` checks every page is back in the pool.
    model = refimpl.ModelConfig.preset(MODEL)
    hardware = refimpl.HardwareSpec.preset("h100-sxm")
    step_model = RooflineStepModel(model, hardware)
    requests = shared_prefix_requests(80, gap_s=0.02, seed=4, max_blocks=4)
    pool = PagePool(160, 16, max_context=model.max_context, cpu_tier_pages=160)
    engine = Engine(make_policy(policy), SimulatedExecutor(step_model), pool, model,
                    hardware=hardware, cost_table=cost_table_for(model, hardware),
                    prefix_cache=True)
    run = engine.run(requests)
    counts = run.steps.prefix_cache
    assert counts["hit_blocks"] > 0 and counts["idle_pages"] >= 0
    assert set(run.requests.status) <= {"finished", "rejected"}
    assert pool.num_free_pages == pool.num_pages
    if policy == "slo":
        assert run.steps.kv_actions.get("spill", 0) > 0 and run.steps.kv_actions["preempt"] > 0


def test_the_mooncake_trace_hits(traces_dir):
    path = traces_dir / "mooncake_synthetic_trace.jsonl"
    if not path.is_file():
        pytest.skip(f"{path.name} not found")
    requests = requests_from_workload(head(load_trace(path), 300))
    summary = refimpl.simulate(requests, "vllm", model=MODEL).summary()
    # at most the blocks seen before (under load fewer: evicted, or still being computed)
    assert 0 < summary["prefix_hit_blocks"] <= expected_hits(requests)


def test_block_hashes_that_are_not_integers_are_refused():
    requests = [Request(0, 0.0, 600, 2, block_hashes=("a", "b"))]
    with pytest.raises(ConfigError, match="block_hashes"):
        refimpl.simulate(requests, "vllm", model=MODEL)
