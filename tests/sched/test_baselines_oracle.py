"""The compiled baselines against a plain-Python reading of their rules (the test oracle).

`Oracle` restates vLLM's token-budget step, Sarathi-Serve's decode-first order and
prefill-first in Python over the policy context (nothing here is imported from the compiled
decisions), and runs on the loop's Python path. On random workloads that force every branch
(tight pools that preempt, prompts longer than the budget, idle gaps, simultaneous arrivals,
requests that can never run, a small `max_num_seqs`) the two must give equal records.
"""

from __future__ import annotations

import pytest

from refimpl.sched import Policy, StepPlan, make_policy
from tests.engine._runs import assert_same_records, random_specs


class Oracle(Policy):
    """vllm, sarathi or prefill-first, read plainly."""

    def __init__(self, name: str, *, max_num_seqs: int = 256, token_budget: int | None = None):
        self.name, self.max_num_seqs = name, max_num_seqs
        self.token_budget = token_budget or (512 if name == "sarathi" else 2048)

    def _left(self, i):
        return self.ctx.requests.num_uncomputed(i)

    def _decoding(self, i):
        return self.ctx.requests.num_generated[i] > 0 and self._left(i) == 1

    def schedule(self, now_s):
        running = [int(i) for i in self.ctx.running()]
        if self.name == "prefill-first":
            return self._prefill_first(running)
        if self.name == "sarathi":
            running = ([i for i in running if self._decoding(i)]
                       + [i for i in running if not self._decoding(i)])
        return self._budgeted(running)

    def _budgeted(self, order, waiting=None):
        """The budget step over running `order`, then `waiting` (default: the loop's queue)."""
        kv, budget, free = self.ctx.kv, self.token_budget, self.ctx.kv.num_free_pages
        decode, prefill, preempt, scheduled = [], [], [], set()
        alive = [int(i) for i in self.ctx.running()]  # start order, victims leave it
        for i in order:
            if budget == 0:
                break
            if i not in alive:
                continue
            tokens = min(self._left(i), budget)
            need = kv.pages_needed(i, tokens)
            while need > free:
                victims = [v for v in alive if v not in scheduled and v != i]
                victim = victims[-1] if victims else i
                free += kv.pages_held(victim)
                alive.remove(victim)
                preempt.append(victim)
                if victim == i:
                    break
            if i not in alive:
                continue
            free, budget = free - need, budget - tokens
            scheduled.add(i)
            (decode.append(i) if self._decoding(i) else prefill.append((i, tokens)))
        running = len(alive)
        reserve = int(0.01 * kv.num_pages)  # vLLM's watermark: new requests leave 1% free
        for i in (int(i) for i in (self.ctx.waiting() if waiting is None else waiting)):
            if not (budget > 0 and not preempt and running < self.max_num_seqs):
                break
            tokens = min(self._left(i), budget)
            need = kv.pages_needed(i, tokens)
            if need > free - (reserve if running > 0 else 0):
                break
            free, budget, running = free - need, budget - tokens, running + 1
            prefill.append((i, tokens))
        return StepPlan(tuple(decode), tuple(prefill), tuple(preempt))

    def _prefill_first(self, running):
        kv, budget, free = self.ctx.kv, self.token_budget, self.ctx.kv.num_free_pages
        prefill, reserve = [], int(0.01 * kv.num_pages)  # vLLM's watermark
        for i in (int(i) for i in self.ctx.waiting()):
            if len(running) + len(prefill) >= self.max_num_seqs:
                break
            tokens = self._left(i)
            need = kv.pages_needed(i, tokens)
            held_back = reserve if running or prefill else 0
            if need > free - held_back or (prefill and tokens > budget):
                break
            free, budget = free - need, budget - tokens
            prefill.append((i, tokens))
        if prefill:
            return StepPlan((), tuple(prefill))
        decode, preempt, alive = [], [], list(running)
        for i in running:
            if i not in alive:
                continue
            need = kv.pages_needed(i, 1)
            while need > free and i in alive:
                victim = alive.pop()
                free += kv.pages_held(victim)
                preempt.append(victim)
            if i in alive:
                free -= need
                decode.append(i)
        return StepPlan(tuple(decode), (), tuple(preempt))


# name: (requests, mean gap s, longest prompt, longest output, KV pages, policy parameters)
SCENARIOS = {
    "tight-kv-preempts": (150, 0.01, 3000, 300, 400, {}),
    "long-prompts-chunk": (60, 0.05, 8000, 40, 4096, {"token_budget": 512}),
    "bursts-and-idle-gaps": (120, 0.5, 1500, 60, 1200, {"max_num_seqs": 8}),
    "impossible-and-simultaneous": (50, 0.0, 6000, 2500, 300, {"token_budget": 1024}),
}


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("policy", ["vllm", "sarathi", "prefill-first"])
@pytest.mark.parametrize("seed", [0, 1])
def test_compiled_baselines_equal_the_plain_python_reading(make_engine, make_requests, policy,
                                                           scenario, seed):
    num, gap_s, max_prompt, max_new, num_pages, params = SCENARIOS[scenario]
    specs = random_specs(seed, num, gap_s, max_prompt, max_new)
    compiled_engine = make_engine(make_policy(policy, **params), num_pages=num_pages)
    oracle_engine = make_engine(Oracle(policy, **params), num_pages=num_pages)
    compiled = compiled_engine.run(make_requests(specs))
    oracle = oracle_engine.run(make_requests(specs))
    assert_same_records(oracle.requests, compiled.requests)
    assert_same_records(oracle.steps, compiled.steps)
    for name in ("refcount", "free_stack", "counters"):  # the same pages taken and returned
        assert (getattr(oracle_engine.pool, name) == getattr(compiled_engine.pool, name)).all()


@pytest.mark.parametrize("policy", ["vllm", "sarathi", "prefill-first"])
def test_the_scenarios_reach_every_branch(make_engine, make_requests, policy):
    runs = {name: make_engine(make_policy(policy, **params), num_pages=pages).run(
        make_requests(random_specs(0, num, gap, prompt, new)))
        for name, (num, gap, prompt, new, pages, params) in SCENARIOS.items()}
    assert runs["tight-kv-preempts"].requests.num_preemptions.sum() > 0
    assert {"exceeds_context", "exceeds_kv_capacity"} <= set(
        runs["impossible-and-simultaneous"].requests.reason)
    if policy != "prefill-first":  # it never chunks
        assert (runs["long-prompts-chunk"].steps.num_prefill_tokens == 512).any()
