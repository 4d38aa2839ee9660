"""An engine with admission control over a page pool of a chosen size (llama-3-8b, H100)."""

from __future__ import annotations

import pytest


@pytest.fixture
def admitted_engine(make_engine):
    """`admitted_engine(policy, num_pages=..., config=..., **policy_params)` -> a fresh Engine
    with an `AdmissionController` as its gate."""
    from refimpl.admission import AdmissionConfig, AdmissionController

    def build(policy="slo", *, num_pages=4096, config: AdmissionConfig | None = None,
              **params):
        return make_engine(policy, num_pages=num_pages, gate=AdmissionController(config),
                           **params)

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
