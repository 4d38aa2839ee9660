"""The compiled `slo` decision against its Python oracle: the same records, step for step."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from refimpl.admission import AdmissionController
from refimpl.config.slo import SLO_PRESETS
from refimpl.sched import Request
from refimpl.sched.policy import PYTHON, SLO
from refimpl.sched.slo import PythonSLOPolicy, SLOPolicy

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
from _runs import assert_same_records

CLASSES = ("interactive", "default", "batch")


def _requests(seed: int, num: int, gap_s: float, max_prompt: int, max_new: int) -> list:
    """Mixed classes, priorities and weights; bursts and idle gaps; some long prompts."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(gap_s, num) * rng.choice([0.0, 1.0, 1.0, 40.0], num)
    arrivals = np.cumsum(gaps)
    out = []
    for i in range(num):
        cls = int(rng.integers(len(CLASSES)))
        long = rng.random() < 0.15
        prompt = int(rng.integers(2048, 4 * max_prompt) if long else rng.integers(1, max_prompt))
        out.append(Request(i, float(arrivals[i]), prompt, int(rng.integers(1, max_new + 1)),
                           priority=cls, weight=float(rng.choice([0.5, 1.0, 2.0])),
                           slo=SLO_PRESETS[CLASSES[cls]], slo_class=CLASSES[cls]))
    return out


def _run(make_engine, policy_class, requests, num_pages, gate, **params):
    engine = make_engine(policy_class, num_pages=num_pages,
                         gate=AdmissionController() if gate else None, **params)
    return engine.run([_copy(r) for r in requests]), engine.policy


def _copy(r: Request) -> Request:
    return Request(r.request_id, r.arrival_s, r.prompt_tokens, r.max_new_tokens,
                   priority=r.priority, weight=r.weight, slo=r.slo, slo_class=r.slo_class)


CASES = [  # (seed, requests, gap, max prompt, max new, pages, gate, params)
    (0, 300, 0.02, 1500, 300, 4096, False, {}),
    (1, 400, 0.01, 1500, 400, 3000, False, {}),
    (2, 400, 0.01, 1500, 400, 1200, False, {}),
    (3, 300, 0.005, 1000, 600, 1200, False, {"value_mode": 1, "max_batch": 32}),
    (4, 300, 0.01, 1500, 300, 3000, True, {}),
    (5, 250, 0.01, 800, 500, 1200, False, {"ladder": None}),
    (6, 300, 0.003, 600, 800, 1200, False, {"min_chunk": 16, "max_chunk": 512}),
]


@pytest.mark.parametrize("case", CASES, ids=[str(c[0]) for c in CASES])
def test_compiled_slo_matches_python(make_engine, case):
    seed, num, gap, max_prompt, max_new, pages, gate, params = case
    requests = _requests(seed, num, gap, max_prompt, max_new)
    expected, oracle = _run(make_engine, PythonSLOPolicy, requests, pages, gate, **params)
    actual, policy = _run(make_engine, SLOPolicy, requests, pages, gate, **params)
    assert (oracle.code, policy.code) == (PYTHON, SLO)
    assert_same_records(expected.requests, actual.requests)
    assert_same_records(expected.steps, actual.steps)  # kv_actions, kernel_usage included
    assert actual.steps.kv_actions == oracle.kv_actions() == policy.kv_actions()
    assert actual.steps.kernel_usage == expected.steps.kernel_usage


def test_other_step_models_run_the_python_decision(make_engine, step_model):
    from refimpl.costmodel.step import RooflineStepModel

    class Slower(RooflineStepModel):
        pass

    from refimpl.engine import Engine, SimulatedExecutor
    from refimpl.engine.simulate import cost_table_for
    from refimpl.kv import PagePool

    model, hardware = step_model.model, step_model.hardware
    policy = SLOPolicy()
    engine = Engine(policy, SimulatedExecutor(Slower(model, hardware)), PagePool(512, 16),
                    model, hardware=hardware, cost_table=cost_table_for(model, hardware))
    run = engine.run(_requests(9, 40, 0.05, 1000, 50))
    assert policy.code == PYTHON and policy.compiled is None
    assert len(run.requests.status) == 40


TIER_CASES = [  # (seed, pages, CPU-tier pages, ladder): the ladder's preempt step acts
    (10, 1200, 0, None),
    (11, 800, 50, None),
    (12, 1200, 0, (0.9, 0.91, 0.92, 0.93)),
]


@pytest.mark.parametrize("case", TIER_CASES, ids=[str(c[0]) for c in TIER_CASES])
def test_compiled_slo_matches_python_small_tier(step_model, case):
    from refimpl.engine import Engine, SimulatedExecutor
    from refimpl.engine.simulate import cost_table_for
    from refimpl.kv import PagePool
    from refimpl.kv.ladder import LadderConfig

    seed, pages, tier, thresholds = case
    model, hardware = step_model.model, step_model.hardware
    params = {} if thresholds is None else {"ladder": LadderConfig(
        cap_above=thresholds[0], quantize_above=thresholds[1], spill_above=thresholds[2],
        preempt_above=thresholds[3], long_context_tokens=100_000)}
    requests = _requests(seed, 300, 0.003, 1500, 600)
    runs = []
    for policy_class in (PythonSLOPolicy, SLOPolicy):
        pool = PagePool(pages, 16, max_context=model.max_context, cpu_tier_pages=tier)
        engine = Engine(policy_class(**params), SimulatedExecutor(step_model), pool, model,
                        hardware=hardware, cost_table=cost_table_for(model, hardware))
        runs.append((engine.run([_copy(r) for r in requests]), engine.policy))
    (expected, oracle), (actual, policy) = runs
    assert policy.code == SLO
    assert_same_records(expected.requests, actual.requests)
    assert_same_records(expected.steps, actual.steps)
    assert "preempt" in policy.kv_actions() and oracle.kv_actions() == policy.kv_actions()
