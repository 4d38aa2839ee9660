"""The compiled engine against the Python one: the same records, to the bit, on random runs.

The oracle test of `refimpl.engine.compiled`: for each baseline, random workloads that force
every branch of the policies (tight KV pools that preempt, prompts longer than the token
budget, idle gaps, arrivals mid-step and at one instant, requests that can never run, a small
`max_num_seqs`) must give equal `RequestRecords` and `StepRecords` (all but `decision_s`, which
is wall time), and leave the page pool in the same state.
"""

from __future__ import annotations

import numpy as np
import pytest

from refimpl.engine import simulate
from refimpl.engine.compiled import CompiledEngine
from refimpl.errors import ConfigError
from refimpl.metrics.records import RequestRecords, StepRecords
from refimpl.sched import QueuePolicy
from refimpl.workloads import synthetic

BASELINES = ("vllm", "sarathi", "prefill-first")

# name: (requests, mean gap s, longest prompt, longest output, KV pages, policy parameters)
SCENARIOS = {
    "tight-kv-preempts": (150, 0.01, 3000, 300, 400, {}),
    "long-prompts-chunk": (60, 0.05, 8000, 40, 4096, {"token_budget": 512}),
    "bursts-and-idle-gaps": (120, 0.5, 1500, 60, 1200, {"max_num_seqs": 8}),
    "impossible-and-simultaneous": (50, 0.0, 6000, 2500, 300, {"token_budget": 1024}),
}


def random_specs(seed: int, num: int, gap_s: float, max_prompt: int, max_new: int) -> list:
    """(arrival_s, prompt, new) rows; gaps of zero (one instant) and long idle gaps mixed in."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(gap_s, num) * rng.choice([0.0, 1.0, 1.0, 40.0], num)
    return [(float(t), int(p), int(n)) for t, p, n in zip(
        np.cumsum(gaps), rng.integers(1, max_prompt + 1, num), rng.integers(1, max_new + 1, num),
        strict=True)]


def assert_same_records(python: RequestRecords | StepRecords,
                        compiled: RequestRecords | StepRecords) -> None:
    for name, expected in vars(python).items():
        if name == "decision_s":
            continue
        actual = getattr(compiled, name)
        if isinstance(expected, np.ndarray):
            assert actual.dtype == expected.dtype, name
            assert np.array_equal(actual, expected, equal_nan=expected.dtype.kind == "f"), name
        else:
            assert actual == expected, name


@pytest.fixture
def run_both(step_model, make_requests):
    """`run_both(policy, specs, num_pages, **params)` -> ([engines], [their runs])."""
    from refimpl.engine import Engine, SimulatedExecutor
    from refimpl.kv import PagePool
    from refimpl.kv.manager import KVManager
    from refimpl.sched import make_policy

    def build(engine_class, policy, num_pages, params):
        kv = KVManager(PagePool(num_pages, 16, max_context=step_model.model.max_context))
        return engine_class(make_policy(policy, **params), SimulatedExecutor(step_model), kv,
                            step_model.model)

    def run(policy, specs, num_pages, engines=(Engine, CompiledEngine), **params):
        built = [build(engine_class, policy, num_pages, params) for engine_class in engines]
        return built, [engine.run(make_requests(specs)) for engine in built]

    return run


@pytest.mark.numba
@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("policy", BASELINES)
@pytest.mark.parametrize("seed", [0, 1])
def test_compiled_engine_equals_the_python_engine(run_both, policy, scenario, seed):
    num, gap_s, max_prompt, max_new, num_pages, params = SCENARIOS[scenario]
    specs = random_specs(seed, num, gap_s, max_prompt, max_new)
    (python_engine, compiled_engine), (python, compiled) = run_both(policy, specs, num_pages,
                                                                    **params)
    assert_same_records(python.requests, compiled.requests)
    assert_same_records(python.steps, compiled.steps)
    assert np.all(compiled.steps.decision_s > 0)
    for name in ("refcount", "free_stack", "counters"):  # the same pages taken and returned
        assert np.array_equal(getattr(python_engine.kv.pool, name),
                              getattr(compiled_engine.kv.pool, name)), name


@pytest.mark.numba
@pytest.mark.parametrize("policy", BASELINES)
def test_the_scenarios_reach_every_branch(run_both, policy):
    runs = {name: run_both(policy, random_specs(0, num, gap, prompt, new), pages,
                           engines=(CompiledEngine,), **params)[1][0]
            for name, (num, gap, prompt, new, pages, params) in SCENARIOS.items()}
    assert runs["tight-kv-preempts"].requests.num_preemptions.sum() > 0
    assert {"exceeds_context", "exceeds_kv_capacity"} <= set(
        runs["impossible-and-simultaneous"].requests.reason)
    if policy != "prefill-first":  # it never chunks
        assert (runs["long-prompts-chunk"].steps.num_prefill_tokens == 512).any()


@pytest.mark.numba
@pytest.mark.parametrize("policy", BASELINES)
def test_simulate_gives_the_same_results_with_either_engine(policy):
    workload = synthetic("azure-conv-like", num_requests=300, rate=20.0, seed=3)
    python = simulate(workload, policy, engine="python")
    compiled = simulate(workload, policy, engine="compiled")
    assert (python.settings["engine"], compiled.settings["engine"]) == ("python", "compiled")
    assert_same_records(python.requests, compiled.requests)
    assert_same_records(python.steps, compiled.steps)
    assert simulate(workload, policy).settings["engine"] == "compiled"  # auto


def test_simulate_picks_python_for_what_the_compiled_engine_cannot_run():
    class Mine(QueuePolicy):
        name = "mine"

        def schedule(self, now_s):
            return self.budgeted_step(list(self.running))

    assert simulate("azure-conv-like", Mine, num_requests=20).settings["engine"] == "python"
    with pytest.raises(ConfigError, match="compiled engine runs the built-in"):
        simulate("azure-conv-like", Mine, num_requests=20, engine="compiled")
    with pytest.raises(ConfigError, match="engine='gpu'"):
        simulate("azure-conv-like", "vllm", num_requests=20, engine="gpu")
