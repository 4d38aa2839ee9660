"""The engine loop: timing against the cost model, conservation, determinism, rejections."""

from __future__ import annotations

import numpy as np
import pytest

from refimpl.metrics.summary import summarize
from refimpl.sched import POLICIES


@pytest.mark.parametrize("policy", POLICIES)
def test_a_lone_request_sees_exactly_the_cost_model(make_engine, step_model, policy, make_requests):
    prompt, new = 300, 5
    run = make_engine(policy).run(make_requests([(0.0, prompt, new)]))
    record = run.request_list[0]
    prefill_s = step_model.step_time_parts(prompt, prompt * (prompt + 1) // 2, 0, 0)
    assert record.first_token_s == pytest.approx(prefill_s, rel=1e-12)
    decode_s = [step_model.step_time_parts(0, 0, 1, prompt + k) for k in range(1, new)]
    assert record.finish_s == pytest.approx(prefill_s + sum(decode_s), rel=1e-12)
    tpot_s = (record.finish_s - record.first_token_s) / (new - 1)
    assert tpot_s == pytest.approx(np.mean(decode_s), rel=1e-12)
    assert len(run.steps) == new  # one prefill step, then one step per later token


@pytest.mark.parametrize("policy", POLICIES)
def test_every_request_ends_and_every_page_returns(make_engine, policy, make_requests):
    rng = np.random.default_rng(7)
    specs = [(float(t), int(p), int(n)) for t, p, n in zip(
        np.cumsum(rng.exponential(0.01, 200)), rng.integers(1, 3000, 200),
        rng.integers(1, 300, 200), strict=True)]
    engine = make_engine(policy, num_pages=600)  # tight: forces preemptions
    run = engine.run(make_requests(specs))
    assert all(r.is_finished for r in run.request_list)
    assert engine.pool.num_free_pages == engine.pool.num_pages
    summary = summarize(run.requests, run.steps)
    assert summary["num_finished"] + summary["num_rejected"] == 200
    finished = run.requests.status == "finished"
    assert np.array_equal(run.requests.num_generated[finished],
                          run.requests.max_new_tokens[finished])
    # the tokens the steps computed are exactly the prompts and outputs (plus recomputation)
    computed = run.steps.num_decode.sum() + run.steps.num_prefill_tokens.sum()
    assert computed >= (run.requests.prompt_tokens[finished].sum()
                        + run.requests.max_new_tokens[finished].sum() - finished.sum())


def test_tight_memory_preempts_and_still_finishes(make_engine, make_requests):
    specs = [(0.0, 500, 400) for _ in range(8)]  # 8 x 57 pages wanted, 100 there
    run = make_engine("vllm", num_pages=100).run(make_requests(specs))
    assert run.requests.num_preemptions.sum() > 0
    assert set(run.requests.status) == {"finished"}


def test_same_input_gives_identical_records(make_engine, make_requests):
    rng = np.random.default_rng(3)
    specs = [(float(t), int(p), int(n)) for t, p, n in zip(
        np.cumsum(rng.exponential(0.02, 100)), rng.integers(1, 2000, 100),
        rng.integers(1, 100, 100), strict=True)]
    first = make_engine("sarathi").run(make_requests(specs))
    second = make_engine("sarathi").run(make_requests(specs))
    for name in ("first_token_s", "finish_s", "num_generated"):
        assert np.array_equal(getattr(first.requests, name), getattr(second.requests, name))
    assert np.array_equal(first.steps.duration_s, second.steps.duration_s)


def test_impossible_requests_are_rejected_at_arrival_with_a_reason(make_engine, make_requests):
    specs = [(0.0, 8192, 1),  # prompt + output over the context
             (0.0, 100, 5000),  # 5,100 tokens: 319 pages, the pool has 200
             (0.5, 100, 10)]
    run = make_engine("vllm", num_pages=200).run(make_requests(specs))
    assert list(run.requests.status) == ["rejected", "rejected", "finished"]
    assert list(run.requests.reason[:2]) == ["exceeds_context", "exceeds_kv_capacity"]
    assert run.requests.finish_s[1] == 0.0


def test_idle_gaps_jump_the_clock_to_the_next_arrival(make_engine, make_requests):
    run = make_engine("vllm").run(make_requests([(0.0, 10, 2), (100.0, 10, 2)]))
    assert run.request_list[1].first_scheduled_s == 100.0
    assert run.steps.start_s[2] == 100.0


def test_arrivals_during_a_step_wait_for_the_next(make_engine, step_model, make_requests):
    prefill_s = step_model.step_time_parts(2000, 2000 * 2001 // 2, 0, 0)
    run = make_engine("vllm", token_budget=4096).run(
        make_requests([(0.0, 2000, 2), (prefill_s / 2, 10, 2)]))
    assert run.request_list[1].first_scheduled_s == pytest.approx(prefill_s)


@pytest.mark.parametrize("policy", ["vllm", "slo"])
def test_prompt_and_output_exactly_at_the_context_are_served_and_one_more_is_rejected(
        make_engine, make_requests, policy):
    limit = make_engine().model.max_context  # 8192
    specs = [(0.0, limit - 1, 1), (0.0, 1, limit - 1), (0.0, limit, 1), (0.0, 2, limit - 1)]
    run = make_engine(policy).run(make_requests(specs))
    assert list(run.requests.reason) == ["completed", "completed", "exceeds_context",
                                         "exceeds_context"]


def test_a_request_filling_the_pool_exactly_is_served_and_one_more_token_is_rejected(
        make_engine, make_requests):
    run = make_engine("vllm", num_pages=10).run(make_requests([(0.0, 150, 10), (1.0, 150, 11)]))
    assert list(run.requests.reason) == ["completed", "exceeds_kv_capacity"]  # 160 = 10 x 16


@pytest.mark.parametrize("policy", ["vllm", "slo"])
def test_the_compiled_loop_charges_a_step_by_its_rows_mod_4(make_requests, policy):
    from refimpl.config import ModelConfig
    from refimpl.costmodel.linear_step import LinearStepModel, step_features
    from refimpl.engine import Engine, SimulatedExecutor
    from refimpl.kv import PagePool
    from refimpl.sched import make_policy

    # pairs and context cost nothing, so a step's time follows from its recorded counts;
    # the edge passes of 1 and 2 rows outweigh a row (as OpenBLAS's do): 7 rows cost more than 8
    values = np.array([2e-3, 7e-4, 3e-4, 1e-4, 1e-5, 0.0, 0.0, 2e-3, 1e-3])
    model = ModelConfig.preset("llama-3-8b")
    engine = Engine(make_policy(policy), SimulatedExecutor(LinearStepModel(values)),
                    PagePool(512, 16), model)
    # one-token prompts a step apart: the batch climbs through every size to 9 and back
    steps = engine.run(make_requests([(0.004 * i, 1, 12) for i in range(9)])).steps
    prefill, seqs = steps.num_prefill_tokens, steps.num_decode
    counts = np.column_stack([prefill, prefill, seqs, seqs])  # (the two free features)
    np.testing.assert_allclose(steps.duration_s, step_features(counts) @ values, rtol=1e-12)
    rows = prefill + seqs
    assert {1, 2, 3, 4, 5, 6, 7, 8} <= set(rows.tolist())  # every remainder was met
    assert steps.duration_s[rows == 7].min() > steps.duration_s[rows == 8].max()

    # a clock at twice the model's times: every step charged double, the plans alike (the
    # policies plan with the model, and this run's arrivals wait for no step)
    slow = Engine(make_policy(policy), SimulatedExecutor(LinearStepModel(values), clock_scale=2.0),
                  PagePool(512, 16), model).run(
        make_requests([(0.008 * i, 1, 12) for i in range(9)])).steps
    counts = np.column_stack([slow.num_prefill_tokens, slow.num_prefill_tokens,
                              slow.num_decode, slow.num_decode])
    np.testing.assert_allclose(slow.duration_s, 2 * step_features(counts) @ values, rtol=1e-12)
    assert slow.num_decode.tolist() == steps.num_decode.tolist()


@pytest.mark.parametrize("scale", [0.0, -1.0, float("nan"), float("inf")])
def test_a_clock_scale_that_is_no_speed_is_refused_by_name(step_model, scale):
    from refimpl.engine import SimulatedExecutor
    from refimpl.errors import ConfigError

    with pytest.raises(ConfigError, match="clock_scale"):
        SimulatedExecutor(step_model, clock_scale=scale)
