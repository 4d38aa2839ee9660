"""An engine with admission control over a page pool of a chosen size (llama-3-8b, H100)."""

from __future__ import annotations

import pytest


@pytest.fixture
def admitted_engine(step_model):
    """`admitted_engine(policy, num_pages=..., config=..., **policy_params)` -> a fresh Engine
    with an `AdmissionController`."""
    from refimpl.admission import AdmissionConfig, AdmissionController
    from refimpl.engine import Engine, SimulatedExecutor
    from refimpl.kv import PagePool
    from refimpl.kv.manager import KVManager
    from refimpl.sched import make_policy

    def build(policy="slo", *, num_pages=4096, config: AdmissionConfig | None = None,
              **params):
        model = step_model.model
        kv = KVManager(PagePool(num_pages, 16, max_context=model.max_context))
        return Engine(make_policy(policy, **params), SimulatedExecutor(step_model), kv, model,
                      admission=AdmissionController(config))

    return build


@pytest.fixture
def burst():
    """`burst(n, seed, priorities=(0,))`: n requests within half a second, mixed lengths."""
    import numpy as np

    from refimpl.sched import Request

    def build(n, seed=0, priorities=(0,)):
        rng = np.random.default_rng(seed)
        arrivals = np.sort(rng.uniform(0, 0.5, n))
        prompts = rng.integers(100, 3000, n)
        outputs = rng.integers(10, 300, n)
        return [Request(i, float(a), int(p), int(g), priority=priorities[i % len(priorities)])
                for i, (a, p, g) in enumerate(zip(arrivals, prompts, outputs, strict=True))]

    return build
