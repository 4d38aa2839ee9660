"""The plan/commit contract: a policy's decision changes nothing; only the commit does.

Each built-in policy is run through a probe, a plain-Python policy that, every step, copies
every array of the run, asks the wrapped policy for its plan, and checks that the request
table, the KV cache and the queues are what they were (the decision's scratch aside). The
probe's plans then go through the loop's Python path, and the records must equal the run
of the policy on its compiled path: one decision, whichever way it is called.
"""

from __future__ import annotations

import numpy as np
import pytest

from refimpl.engine import plan_once
from refimpl.sched import Policy, make_policy
from refimpl.sched.queues import EPOCH

from ._runs import assert_same_records, random_specs


def _snapshot(arrays) -> dict[str, np.ndarray]:
    """Copies of every array a decision could touch, by name."""
    state = {"ints": arrays.ints, "floats": arrays.floats}
    state.update({f"kv.{name}": value for name, value in arrays.kv._asdict().items()
                  if isinstance(value, np.ndarray)})
    state.update({f"queues.{name}": value for name, value in arrays.queues._asdict().items()
                  if name not in ("marks", "order")})  # the decisions' scratch
    return {name: value.copy() for name, value in state.items()}


class Probe(Policy):
    """Runs `inner`'s decision from Python, checking every step that it changed nothing."""

    def __init__(self, inner: Policy) -> None:
        self.inner, self.name, self.steps = inner, inner.name, 0

    def bind(self, ctx):
        super().bind(ctx)
        self.inner.bind(ctx)

    def schedule(self, now_s):
        before = _snapshot(self.ctx.arrays)
        plan = plan_once(self.inner, now_s)
        after = _snapshot(self.ctx.arrays)
        before["queues.sizes"][EPOCH] = after["queues.sizes"][EPOCH]  # scratch too
        for name, value in before.items():
            assert np.array_equal(value, after[name], equal_nan=True), name
        self.steps += 1
        return plan


@pytest.mark.parametrize("policy", ["vllm", "sarathi", "prefill-first"])
@pytest.mark.parametrize("num_pages", [400, 4096])  # tight (preempts) and roomy
def test_a_decision_changes_nothing_and_the_python_path_gives_the_same_run(
        make_engine, make_requests, policy, num_pages):
    specs = random_specs(5, 120, 0.01, 3000, 200)
    probe = Probe(make_policy(policy))
    probed = make_engine(probe, num_pages=num_pages).run(make_requests(specs))
    compiled = make_engine(policy, num_pages=num_pages).run(make_requests(specs))
    assert probe.steps >= len(probed.steps) > 100  # (and the calls that found nothing)
    assert_same_records(compiled.requests, probed.requests)
    assert_same_records(compiled.steps, probed.steps)
    if num_pages == 400:
        assert probed.requests.num_preemptions.sum() > 0  # the contract held under preemption
