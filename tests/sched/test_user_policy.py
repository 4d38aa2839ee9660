"""A policy written in plain Python: the documented example runs, and broken plans are refused."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import refimpl
from refimpl.errors import SchedulingError
from refimpl.sched import Policy, StepPlan

README = Path(__file__).resolve().parents[2] / "README.md"


def _readme_policy_example() -> str:
    section = README.read_text().split("## Writing a policy", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    return code


def test_the_readme_policy_example_runs_and_serves_shortest_prompts_first(make_engine):
    namespace: dict = {}
    exec(_readme_policy_example(), namespace)  # the README's own code, as a user copies it
    summary = namespace["result"].summary()
    assert summary["num_finished"] == summary["num_requests"] == 200
    # three prompts at once under a 2,048-token budget: 900 whole, then 1,148 of the 1,200
    run = make_engine(namespace["ShortestPromptFirst"]).run(
        [refimpl.Request(i, 0.0, p, 2) for i, p in enumerate((1500, 900, 1200))])
    start = run.requests.first_scheduled_s
    assert start[1] == start[2] == 0.0 < start[0]
    assert list(run.steps.num_prefill_tokens[:1]) == [2048]


class GreedyDecodeOnly(Policy):
    """Starts one prompt whole, then only decodes: a small policy to break on purpose."""

    name = "greedy"

    def __init__(self, mutate=None, *, all_at_once=False):
        self.mutate, self.all_at_once = mutate, all_at_once

    def schedule(self, now_s):
        ctx = self.ctx
        decode = tuple(int(i) for i in ctx.running() if ctx.requests.num_uncomputed(i) == 1)
        waiting = [int(i) for i in ctx.waiting()][:None if self.all_at_once else 1]
        prefill = (tuple((i, ctx.requests.num_uncomputed(i)) for i in waiting)
                   if not decode else ())
        plan = StepPlan(decode, prefill)
        return self.mutate(plan) if self.mutate and plan else plan


def _requests(n=6):
    return [refimpl.Request(i, 0.001 * i, 50 + 10 * i, 5) for i in range(n)]


def test_a_plain_python_policy_serves_everything(make_engine):
    engine = make_engine(GreedyDecodeOnly)
    run = engine.run(_requests())
    assert set(run.requests.reason) == {"completed"}
    assert engine.pool.num_free_pages == engine.pool.num_pages


@pytest.mark.parametrize(("mutate", "match"), [
    (lambda plan: StepPlan((*plan.decode, 10_000), plan.prefill), "names no request"),
    (lambda plan: StepPlan(plan.decode, plan.prefill + plan.prefill), "twice"),
    (lambda plan: StepPlan(plan.decode, tuple((i, 0) for i, _ in plan.prefill) or ((0, 0),)),
     "no tokens"),
    (lambda plan: StepPlan(plan.decode, tuple((i, 10**6) for i, _ in plan.prefill)
                           or ((0, 10**6),)), "no tokens, or more"),
    (lambda plan: "not a plan", "must return a refimpl.StepPlan"),
])
def test_a_plan_that_breaks_the_contract_is_refused_with_its_reason(make_engine, mutate, match):
    with pytest.raises(SchedulingError, match=match):
        make_engine(GreedyDecodeOnly, mutate=mutate).run(_requests())


def test_a_plan_asking_more_pages_than_are_free_is_refused(make_engine):
    with pytest.raises(SchedulingError, match="more KV pages than are free"):
        make_engine(GreedyDecodeOnly, num_pages=8, all_at_once=True).run(
            [refimpl.Request(i, 0.0, 100, 5) for i in range(3)])


def test_a_policy_naming_more_kernels_than_the_loop_counts_is_refused(make_engine):
    names = (f"kernel-{k}" for k in range(10_000))
    policy = GreedyDecodeOnly(lambda plan: StepPlan(plan.decode, plan.prefill,
                                                    kernels=(next(names),)))
    with pytest.raises(SchedulingError, match="more than 1024 kernel candidates"):
        make_engine(policy).run([refimpl.Request(0, 0.0, 10, 1100)])


def test_a_plans_pairs_may_be_an_integer_array_and_serve_the_same(make_engine):
    import numpy as np

    as_array = GreedyDecodeOnly(lambda plan: StepPlan(
        np.asarray(plan.decode, np.int64), np.array(plan.prefill, np.int64).reshape(-1, 2)))
    runs = [make_engine(policy).run(_requests()) for policy in (GreedyDecodeOnly(), as_array)]
    assert runs[0].steps.num_prefill_tokens.tolist() == runs[1].steps.num_prefill_tokens.tolist()
    assert runs[0].requests.finish_s.tolist() == runs[1].requests.finish_s.tolist()
    assert StepPlan((), np.array([[0, 3], [1, 4]])).num_tokens == 7


@pytest.mark.parametrize("pairs", [
    [[0, 5, 1]], [[0.0, 5.0]], [0, 5],
])
def test_a_plans_pairs_array_of_the_wrong_shape_or_dtype_is_refused_by_name(make_engine, pairs):
    import numpy as np

    policy = GreedyDecodeOnly(lambda plan: StepPlan(plan.decode, np.array(pairs)))
    with pytest.raises(SchedulingError, match=r"StepPlan.prefill=.*\(n, 2\) integer array"):
        make_engine(policy).run(_requests())
