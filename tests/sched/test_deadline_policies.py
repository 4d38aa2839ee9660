"""`edf` and `sarathi-edf` against a plain-Python reading of their rules, and by hand.

`DeadlineOracle` restates both in Python over the policy context (nothing imported from the
compiled decisions; the budget step is the baselines' oracle's): decodes in start order, then
prompts under way and waiting ones by TTFT deadline (arrival + target, ties by row), and for
`edf` first SCORPIO's TTFT guard, which rejects every waiting request without output whose
prefill, even alone from now, would end past its deadline. It runs on the loop's Python path;
on random workloads with mixed TTFT targets the records must equal the compiled runs'.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from refimpl import SLO
from refimpl.sched import Request, StepPlan, make_policy
from refimpl.sched.queues import (
    BY_RANK,
    WAIT_HEAD,
    WAIT_LEN,
    _remove_waiting,
    new_queues,
    order_waiting_by,
    push_waiting,
)
from tests.engine._runs import assert_same_records, random_specs
from tests.sched.test_baselines_oracle import Oracle

TTFT_TARGETS_S = (0.02, 0.1, 0.5, 2.0, 30.0)  # tight enough that the guard acts


class DeadlineOracle(Oracle):
    """edf or sarathi-edf, read plainly."""

    def __init__(self, name: str, **params):
        super().__init__("sarathi", **params)  # the same budget step and chunk
        self.name = name

    def _deadline(self, i):
        r = self.ctx.requests
        return (r.arrival_s[i] + r.ttft_slo_s[i], i)

    def _floor_s(self, i):
        """The guard's floor under request `i`'s prefill time, written out."""
        c, r = self.ctx.step_model.coefficients, self.ctx.requests
        tokens, computed = int(self._left(i)), int(r.num_computed[i])
        steps = -(-tokens // self.token_budget)
        pairs = tokens * computed + tokens * (tokens + 1) // 2
        return (steps * c.overhead_s + max(tokens * c.linear_s_per_token, steps * c.weights_s)
                + max(pairs * c.attn_s_per_pair, tokens * c.new_token_s))

    def schedule(self, now_s):
        r = self.ctx.requests
        running = [int(i) for i in self.ctx.running()]
        order = ([i for i in running if self._decoding(i)]
                 + sorted((i for i in running if not self._decoding(i)), key=self._deadline))
        waiting = sorted((int(i) for i in self.ctx.waiting()), key=self._deadline)
        rejected = []
        if self.name == "edf":
            rejected = [i for i in waiting if r.num_generated[i] == 0
                        and now_s + self._floor_s(i) - r.arrival_s[i] > r.ttft_slo_s[i]]
            waiting = [i for i in waiting if i not in rejected]
        plan = self._budgeted(order, waiting)
        return StepPlan(plan.decode, plan.prefill, plan.preempt,
                        tuple((i, "ttft_unattainable") for i in rejected))


def requests_of(specs, seed):
    """Requests of `specs` with TTFT targets drawn from TTFT_TARGETS_S."""
    targets = np.random.default_rng(seed + 100).choice(TTFT_TARGETS_S, len(specs))
    return [Request(i, a, p, n, slo=SLO(float(t), 0.1))
            for i, ((a, p, n), t) in enumerate(zip(specs, targets, strict=True))]


# name: (requests, mean gap s, longest prompt, longest output, KV pages, policy parameters)
SCENARIOS = {
    "tight-kv-preempts": (120, 0.01, 3000, 300, 400, {}),
    "long-prompts-chunk": (50, 0.05, 6000, 40, 4096, {"token_budget": 256}),
    "bursts-and-idle-gaps": (100, 0.5, 1500, 60, 1200, {"max_num_seqs": 8}),
    "impossible-and-simultaneous": (40, 0.0, 6000, 2500, 300, {"token_budget": 1024}),
}


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("policy", ["edf", "sarathi-edf"])
@pytest.mark.parametrize("seed", [0, 1])
def test_compiled_deadline_policies_equal_the_plain_python_reading(make_engine, policy,
                                                                   scenario, seed):
    num, gap_s, max_prompt, max_new, num_pages, params = SCENARIOS[scenario]
    specs = random_specs(seed, num, gap_s, max_prompt, max_new)
    compiled_engine = make_engine(make_policy(policy, **params), num_pages=num_pages)
    oracle_engine = make_engine(DeadlineOracle(policy, **params), num_pages=num_pages)
    compiled = compiled_engine.run(requests_of(specs, seed))
    oracle = oracle_engine.run(requests_of(specs, seed))
    assert_same_records(oracle.requests, compiled.requests)
    assert_same_records(oracle.steps, compiled.steps)
    for name in ("refcount", "free_stack", "counters"):  # the same pages taken and returned
        assert (getattr(oracle_engine.pool, name) == getattr(compiled_engine.pool, name)).all()
    assert compiled_engine.pool.num_free_pages == compiled_engine.pool.num_pages


def test_the_scenarios_reach_every_branch(make_engine):
    runs = {(policy, name): make_engine(make_policy(policy, **params), num_pages=pages).run(
        requests_of(random_specs(0, num, gap, prompt, new), 0))
        for policy in ("edf", "sarathi-edf")
        for name, (num, gap, prompt, new, pages, params) in SCENARIOS.items()}
    tight = runs["edf", "tight-kv-preempts"].requests
    assert tight.num_preemptions.sum() > 0
    guarded = tight.reason == "ttft_unattainable"
    assert guarded.any() and (tight.status[guarded] == "rejected").all()
    assert np.isnan(tight.first_token_s[guarded]).all()
    assert not any((r.requests.reason == "ttft_unattainable").any()
                   for (policy, _), r in runs.items() if policy == "sarathi-edf")
    for run in runs.values():  # deadlines reorder: some request starts before an earlier one
        started = run.requests.first_scheduled_s
        assert (np.diff(started[~np.isnan(started)]) < 0).any()


def _alone_s(step_model, prompt):
    """Seconds of a one-chunk prefill of `prompt` tokens with nothing else in the step."""
    return step_model.step_time_parts(prompt, prompt * (prompt + 1) // 2, 0, 0)


def test_the_ttft_guard_rejects_exactly_the_unattainable_requests(make_engine, step_model):
    t512, t100, t400 = (_alone_s(step_model, p) for p in (512, 100, 400))
    assert t100 > 0.2 * t512  # the premise of `y` below (weights are read every step)
    requests = [
        Request(0, 0.0, 512, 3, slo=SLO(1.1 * t512, 1.0)),  # x: earliest deadline, served
        Request(1, 0.0, 100, 3, slo=SLO(1.2 * t512, 1.0)),  # y: attainable at 0, not after x
        Request(2, 0.0, 400, 3, slo=SLO(0.5 * t400, 1.0)),  # z: unattainable from the start
        Request(3, 0.0, 50, 3, slo=SLO(10.0, 1.0)),  # w: loose, served after x
    ]
    engine = make_engine("edf")
    run = engine.run(requests)
    x, y, z, w = run.request_list
    assert (z.status.name, z.finish_reason, z.finish_s) == ("REJECTED", "ttft_unattainable", 0.0)
    assert (y.status.name, y.finish_reason) == ("REJECTED", "ttft_unattainable")
    assert y.finish_s == t512  # when x's prefill step ended and y came up again
    for rejected in (y, z):
        assert math.isnan(rejected.first_scheduled_s) and rejected.num_generated == 0
    assert x.first_token_s == t512 and x.first_token_s - x.arrival_s <= x.slo.ttft_s
    assert [r.finish_reason for r in (x, w)] == ["completed", "completed"]
    assert engine.pool.num_free_pages == engine.pool.num_pages


def test_a_target_met_exactly_alone_is_attainable_and_one_just_under_is_not(make_engine,
                                                                           step_model):
    alone_s = _alone_s(step_model, 300)
    exact = make_engine("edf").run([Request(0, 0.0, 300, 2, slo=SLO(alone_s, 1.0))])
    assert exact.request_list[0].first_token_s == alone_s  # served, TTFT met exactly
    under = make_engine("edf").run([Request(0, 0.0, 300, 2, slo=SLO(alone_s * 0.999, 1.0))])
    assert under.request_list[0].finish_reason == "ttft_unattainable"


def test_sarathi_edf_serves_a_later_tighter_request_before_an_earlier_looser_one(make_engine):
    requests = [(0.0, 512, 4, 30.0),  # fills the first step: both others wait for step two
                (0.0001, 300, 2, 60.0),  # earlier, loose
                (0.0002, 300, 2, 0.5)]  # later, tight

    def first_tokens(policy):
        run = make_engine(policy).run([Request(i, a, p, n, slo=SLO(t, 1.0))
                                       for i, (a, p, n, t) in enumerate(requests)])
        return [r.first_token_s for r in run.request_list]

    _, loose, tight = first_tokens("sarathi-edf")
    assert tight < loose
    _, loose, tight = first_tokens("sarathi")  # arrival order, for contrast
    assert loose < tight


def test_a_rank_ordered_waiting_ring_stays_sorted_through_pushes_and_removals():
    rng = np.random.default_rng(0)
    n = 40
    keys = rng.choice([1.0, 2.0, 3.0, 5.0], n)  # ties: broken by row
    q = new_queues(n, n)
    order_waiting_by(q, keys)
    assert q.sizes[BY_RANK] == 1
    inside: set[int] = set()
    for _ in range(400):
        if len(inside) == n or (inside and rng.random() < 0.45):
            i = int(rng.choice(sorted(inside)))
            _remove_waiting(q, i)
            inside.remove(i)
        else:
            i = int(rng.choice([j for j in range(n) if j not in inside]))
            push_waiting(q, i, bool(rng.random() < 0.3))  # the front flag is overruled
            inside.add(i)
        ring = [int(q.waiting[(q.sizes[WAIT_HEAD] + k) % n]) for k in range(q.sizes[WAIT_LEN])]
        assert ring == sorted(inside, key=lambda j: (keys[j], j))
    _remove_waiting(q, n + 5)  # not there: nothing happens
    assert q.sizes[WAIT_LEN] == len(inside)
