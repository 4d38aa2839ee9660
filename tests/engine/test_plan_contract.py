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
from refimpl.sched import Policy, StepPlan, make_policy
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


@pytest.mark.parametrize("policy", ["vllm", "sarathi", "prefill-first", "edf", "sarathi-edf"])
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


class RefuseOddWaiting(Policy):
    """vLLM's plan, and every odd waiting row without output that it does not start ended
    through the plan."""

    name = "refuse-odd"

    def bind(self, ctx):
        super().bind(ctx)
        self.inner = make_policy("vllm")
        self.inner.bind(ctx)

    def schedule(self, now_s):
        waiting = self.ctx.waiting()
        assert (self.ctx.requests.status[waiting] == 0).all()  # ended ones left the queue
        plan = plan_once(self.inner, now_s)
        started = {i for i, _ in plan.prefill}
        generated = self.ctx.requests.num_generated
        refused = tuple((int(i), "refused") for i in waiting
                        if i % 2 and i not in started and generated[i] == 0)
        return StepPlan(plan.decode, plan.prefill, plan.preempt, refused)


def test_a_waiting_request_ended_by_the_plan_is_rejected_and_leaves_the_queue(make_engine,
                                                                              make_requests):
    engine = make_engine(RefuseOddWaiting(), num_pages=400)
    run = engine.run(make_requests(random_specs(2, 80, 0.005, 2000, 50)))
    refused = run.requests.reason == "refused"
    assert refused.any() and (run.requests.request_id[refused] % 2 == 1).all()
    assert (run.requests.status[refused] == "rejected").all()
    assert (run.requests.num_generated[refused] == 0).all()
    assert set(run.requests.reason[~refused]) == {"completed"}
    assert engine.pool.num_free_pages == engine.pool.num_pages
