"""`refimpl bench sched` builds a mid-run slo policy through the public loop's layout."""

from __future__ import annotations

from refimpl.bench.sched import _policy, time_ticks
from refimpl.sched.slo import SLOPolicy


def test_the_mid_run_state_plans_decodes_and_prompts():
    policy = _policy(SLOPolicy, 100, seed=0)
    plan = policy.schedule(0.0)
    assert len(plan.decode) > 0 and len(plan.prefill) > 0
    assert plan == policy.schedule(0.0)  # planning changes nothing: the bench times one tick
    assert time_ticks(SLOPolicy, 100, repeats=1) > 0
